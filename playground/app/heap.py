"""Give freed heap back to the operating system after a run.

A run allocates and frees many mid-sized buffers (tensors, frames, Gradio's per-request copies of the
page config) from many worker threads. glibc keeps what was freed in its arenas, so a server's RSS
(what a Space's memory limit counts) creeps up under load although nothing is held: measured here,
200 script calls left +30 MiB that `malloc_trim(0)` returned at once. Elsewhere (no glibc) this is a
no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from dataclasses import dataclass

MIN_INTERVAL_SECONDS = 5.0  # a trim takes a few milliseconds; under load once in a while is enough

_lock = threading.Lock()
_last = 0.0
_trailing: threading.Timer | None = None  # the trim after the last release of a burst (at most one waits)


def _libc_function(name: str):
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


_malloc_trim = _libc_function("malloc_trim")


class _Mallinfo2(ctypes.Structure):  # glibc >= 2.33: every field a size_t (mallinfo's ints wrap past 2 GiB)
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


_mallinfo2 = _libc_function("mallinfo2")
if _mallinfo2 is not None:
    _mallinfo2.restype = _Mallinfo2


@dataclass(frozen=True)
class Allocator:
    """What glibc's malloc holds, in bytes: a server's memory beyond what it counts is either still allocated
    (`in_use`: held by something) or freed but kept by the allocator (`free_kept`: fragmentation, not a leak)."""

    in_use: int  # allocated from the arenas' heaps and not freed
    free_kept: int  # freed, but kept in the arenas
    mmapped: int  # allocated directly with mmap (given back to the system at once when freed)


def allocator() -> Allocator | None:
    """glibc's own account (`mallinfo2`, every arena), or None without it (musl, macOS, glibc < 2.33)."""
    if _mallinfo2 is None:
        return None
    info = _mallinfo2()
    return Allocator(in_use=info.uordblks, free_kept=info.fordblks, mmapped=info.hblkhd)


def release(force: bool = False) -> bool:
    """Return freed heap to the OS, at most once per `MIN_INTERVAL_SECONDS` unless `force`; whether it ran now.

    Every call also makes sure one trim follows within the interval: a release skipped for the interval, and what
    is freed after a release (the run's last frame, Gradio's copies of it), would otherwise stay with the process
    until some later visitor's call (row 9: a script's two runs 4 s apart kept +585 to +710 MiB of freed heap)."""
    global _last
    if _malloc_trim is None:
        return False
    with _lock:
        now = time.monotonic()
        _follow_up()
        if not force and now - _last < MIN_INTERVAL_SECONDS:
            return False
        _last = now
    _malloc_trim(0)
    return True


def _follow_up() -> None:  # with _lock held
    global _trailing
    if _trailing is None:
        _trailing = threading.Timer(MIN_INTERVAL_SECONDS, _trail)
        _trailing.daemon = True  # never keeps the process alive
        _trailing.start()


def _trail() -> None:
    global _trailing, _last
    with _lock:
        _trailing = None
        _last = time.monotonic()
    _malloc_trim(0)  # the last trim of a burst: nothing reschedules it, so an idle server ends trimmed


def settle() -> None:
    """Wait for the trim that follows the last release (if one is pending): a load test's idle measure starts there."""
    with _lock:
        pending = _trailing
    if pending is not None:
        pending.join()


M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # glibc's mallopt parameters (malloc.h)
ARENAS = 2  # arenas for the whole process: threads share them instead of each keeping freed memory of its own
MMAP_THRESHOLD = 128 * 1024  # blocks from this size up are mmapped, so freeing one gives it back at once
_mallopt = _libc_function("mallopt")


def bound_allocator(arenas: int = ARENAS, mmap_threshold: int = MMAP_THRESHOLD) -> bool:
    """Keep glibc from holding freed memory per thread, and large blocks out of its heaps; whether it took.

    glibc grows its mmap threshold each time a large block is freed (up to 32 MiB), so after a precision copy or a
    dtype switch is dropped, every tensor below that size comes from arenas that never shrink; and each thread that
    allocates may get an arena of its own (8 per core). Fixing the threshold and the number of arenas does what
    `MALLOC_MMAP_THRESHOLD_` and `MALLOC_ARENA_MAX` do, from inside the process (a Space starts `app.py` itself).
    Call it before the server's threads start: an arena made before stays."""
    if _mallopt is None:
        return False
    return bool(_mallopt(M_ARENA_MAX, arenas)) and bool(_mallopt(M_MMAP_THRESHOLD, mmap_threshold))
