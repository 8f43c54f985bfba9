"""Whether a timing comparison on the page says anything: each side is a few interleaved repeats (A B, B A, …, so
drift hits both alike), summarised by its median and its range; when the two ranges overlap the difference is
inside the noise, and when the machine has more runnable work than cores every timing is shared with it."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping

from playground.app.words import t

REPEATS = 3  # each side of a comparison the page times


def spread(values: Iterable[float]) -> dict[str, float]:
    """median, min, max and n of some measurements."""
    v = sorted(float(x) for x in values)
    if not v:
        raise ValueError("a spread needs at least one measurement")
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "n": len(v)}


def overlap(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Whether two spreads' ranges overlap (then neither side is measurably faster)."""
    return a["min"] <= b["max"] and b["min"] <= a["max"]


def interleaved(sides: Mapping[str, Callable[[], float]], repeats: int = REPEATS) -> dict[str, list[float]]:
    """Each side's measurement `repeats` times, the order alternating each round (A B, B A, …)."""
    names = list(sides)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            out[name].append(float(sides[name]()))
    return out


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    """`fn` as a measurement: the seconds one call takes."""
    def measure() -> float:
        began = time.perf_counter()
        fn()
        return time.perf_counter() - began
    return measure


def machine_load() -> dict[str, float]:
    """The 1-minute load average and the cores (no load average where the platform has none)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return {"load": float(load), "cores": float(os.cpu_count() or 1)}


def busy(load: Mapping[str, float]) -> bool:
    """More runnable work than cores: the measurement shared the machine."""
    return load["load"] > load["cores"]


def verdict(a: Mapping[str, float], b: Mapping[str, float], load: Mapping[str, float] | None, lang: str) -> str:
    """One or two sentences: whether the difference between two spreads is outside the noise, and whether the
    machine was busy while they were taken."""
    words = t("noise_overlap" if overlap(a, b) else "noise_clear", lang, n=min(int(a["n"]), int(b["n"])))
    if load is not None and busy(load):
        words += ("" if lang == "zh" else " ") + t("noise_busy", lang, load=load["load"], cores=int(load["cores"]))
    return words
