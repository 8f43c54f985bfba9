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

MIN_INTERVAL_SECONDS = 5.0  # a trim takes a few milliseconds; under load once in a while is enough

_lock = threading.Lock()
_last = 0.0
_trailing: threading.Timer | None = None  # the trim after the last release of a burst (at most one waits)


def _load_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_trim()


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
