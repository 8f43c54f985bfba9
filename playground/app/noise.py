"""Whether a timing comparison on the page says anything: each side is a few interleaved repeats (A B, B A, …, so
drift hits both alike), summarised by its median and its range; when the two ranges overlap the difference is
inside the noise, and when the machine has more runnable work than cores every timing is shared with it."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any

from playground.app.words import t
from playground.generation.config import GenerationConfig
from playground.generation.engine import run_plan
from playground.generation.plan import plan

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


def turns(names: Sequence[str], repeats: int = REPEATS) -> list[tuple[int, str]]:
    """(repeat, side) in the order to measure them: every side once per repeat, the order alternating each round
    (A B, B A, …) so a drift of the machine's speed hits every side alike."""
    return [(r, name) for r in range(repeats) for name in (names if r % 2 == 0 else names[::-1])]


def decode_rate(lm: Any, prompt_ids: list[int], cfg: GenerationConfig) -> Generator[None, None, float]:
    """Tokens/s of one run of `cfg` after its first token (the prefill), timing only the engine's own work: one
    `next()` of it per slice (the other visitors' turns in between are not counted)."""
    events = run_plan(plan(lm, prompt_ids, cfg))
    spent, tokens = 0.0, 0
    while True:
        began = time.perf_counter()
        event = next(events, None)
        took = time.perf_counter() - began
        if event is None:
            break
        if event.step > 0:  # the first token's time is the prompt's prefill
            spent, tokens = spent + took, tokens + 1
        yield
    return tokens / spent if spent > 0 else 0.0


def decode_rates(prompt_ids: list[int], sides: Mapping[str, tuple[Any, GenerationConfig]], repeats: int = REPEATS,
                 ) -> Generator[None, None, dict[str, dict[str, float]]]:
    """Each side's (model, settings) decode rate `repeats` times, interleaved: name -> spread of tokens/s."""
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _, name in turns(list(sides), repeats):
        lm, cfg = sides[name]
        rates[name].append((yield from decode_rate(lm, prompt_ids, cfg)))
    return {name: spread(values) for name, values in rates.items()}


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
    return t("noise_overlap" if overlap(a, b) else "noise_clear", lang, n=min(int(a["n"]), int(b["n"]))) + \
        busy_words(load, lang)


def busy_words(load: Mapping[str, float] | None, lang: str) -> str:
    """A sentence (with its leading space) saying the machine was busy while measuring, or ""."""
    if load is None or not busy(load):
        return ""
    return ("" if lang == "zh" else " ") + t("noise_busy", lang, load=load["load"], cores=int(load["cores"]))
