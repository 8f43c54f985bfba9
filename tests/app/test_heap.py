"""Freed heap goes back to the OS (glibc), at most once per interval."""

from __future__ import annotations

import ctypes.util
import os

import pytest

from playground.app import heap

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
