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


def _load_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_trim()


def release(force: bool = False) -> bool:
    """Return freed heap to the OS, at most once per `MIN_INTERVAL_SECONDS` unless `force`; whether it ran."""
    global _last
    if _malloc_trim is None:
        return False
    with _lock:
        now = time.monotonic()
        if not force and now - _last < MIN_INTERVAL_SECONDS:
            return False
        _last = now
    _malloc_trim(0)
    return True
