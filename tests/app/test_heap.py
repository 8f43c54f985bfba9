"""Freed heap goes back to the OS (glibc), at most once per interval."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from playground.app import heap

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="no C library to trim")


def _rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])


def test_release_returns_freed_small_blocks_and_is_throttled():
    # Many small blocks (below the mmap threshold, so they live in the heap); one in 16 stays alive, so
    # the heap cannot shrink from its top and keeps the freed pages between them until trimmed.
    blocks = [bytearray(2048) for _ in range(60_000)]
    kept = blocks[::16]
    del blocks
    held = _rss_kib()
    assert heap.release(force=True)
    after = _rss_kib()
    assert after < held - 50_000, (held, after)  # of ~110 MiB freed, at least 50 MiB came back
    assert len(kept) == 3750
    assert not heap.release()  # within the interval: skipped


def test_a_release_skipped_within_the_interval_is_followed_by_one_trim():
    """Row 9 of issue 42: a script's second run ended within the interval of the first, so its freed heap stayed."""
    heap.release(force=True)  # the first run's own release
    blocks = [bytearray(2048) for _ in range(60_000)]  # the second run's buffers, freed as in the test above
    kept = blocks[::16]
    del blocks
    held = _rss_kib()
    assert not heap.release()  # within the interval: not now...
    heap.settle()  # ...but once the interval has passed, with no later call to ask for it
    after = _rss_kib()
    assert after < held - 50_000, (held, after)
    assert len(kept) == 3750


@pytest.mark.skipif(heap.allocator() is None, reason="glibc's mallinfo2 (glibc >= 2.33) is not in this C library")
def test_the_allocators_account_sees_what_is_allocated_and_what_is_freed():
    """The holdings line's heap_in_use follows what Python allocates from the arenas (blocks under the mmap threshold)."""
    before = heap.allocator()
    kept = [bytearray(10_000) for _ in range(1_000)]  # 10 MB in blocks glibc serves from its heaps, not mmap
    during = heap.allocator()
    assert during.in_use - before.in_use >= 10_000_000
    del kept
    after = heap.allocator()
    assert during.in_use - after.in_use >= 10_000_000  # freed: no longer in use, whether kept by glibc or not


PROBE = """
import sys
from playground.app import heap
if sys.argv[1] == "bounded":
    assert heap.bound_allocator()
freed = bytearray(4 << 20)  # 4 MiB, mmapped; freeing it raises glibc's own threshold to 4 MiB
del freed
before = heap.allocator().mmapped
kept = bytearray(512 << 10)  # 512 KiB: from the heap below glibc's raised threshold, mmapped under ours (128 KiB)
print(heap.allocator().mmapped - before)
"""


@pytest.mark.skipif(heap.allocator() is None, reason="glibc's mallinfo2 (glibc >= 2.33) is not in this C library")
@pytest.mark.parametrize(("setting", "mmapped"), [("glibc", False), ("bounded", True)])
def test_the_bounded_allocator_keeps_its_mmap_threshold_after_a_large_block_is_freed(setting, mmapped):
    """Under glibc's defaults a freed 4 MiB block raises the threshold, so later blocks of a few hundred KiB stay in
    arenas that never shrink; bounded (the app's default), a 512 KiB block is still mmapped and goes back when freed."""
    out = subprocess.run([sys.executable, "-c", PROBE, setting], capture_output=True, text=True, check=True,
                         cwd=REPO, env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")})
    grew = int(out.stdout.strip())
    assert (grew >= 512 << 10) is mmapped, grew


def test_the_app_starts_with_the_bounded_allocator_unless_asked():
    from app import parse_args

    assert parse_args([]).allocator == "bounded"
    assert parse_args(["--allocator", "glibc"]).allocator == "glibc"
