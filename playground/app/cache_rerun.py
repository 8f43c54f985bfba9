"""The KV-cache tab's rerun: the current run's request again with and without the cache, timed fresh,
as a job of bounded slices (`playground.app.jobs`).

Without the cache, step t recomputes every one of its P + t positions, so the rerun's work grows with
the square of the run's length: a run at the page's limits would take hours. The rerun times only as
many steps as fit `RERUN_FLOPS` (counted with attention's T² term, for both modes) and says how many; the
rest is estimated from the FLOP count at the speed it measured. Each mode runs in a scheduler of its own,
one batch step per slice (a prompt chunk, a decoding step, or a chunk of a cache-less pass), and each
slice is timed on its own, so the numbers are this request's compute, not the other visitors' turns.
The two modes are timed `REPEATS` times each, interleaved (with, without; without, with; …): the page shows
each mode's median and range, and says when the ranges overlap (one measurement of each once showed a prefill
*with* the cache 2× slower, which was noise).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from playground.analysis.kv_lesson import kv_step_costs
from playground.app import noise
from playground.app.jobs import Progress
from playground.generation.batch import Scheduler
from playground.generation.config import GenerationConfig
from playground.generation.plan import plan

RERUN_FLOPS = 2e12  # both modes, every repeat; SmolLM2-135M after a 150-token prompt: its first 17 steps
REPEATS = noise.REPEATS


@dataclasses.dataclass(frozen=True)
class RerunResult:
    """Timings of the two modes over the first `steps` of the run's `total_steps`: the median of the repeats (CLI
    timing keys), each key's spread over the repeats, and the machine's load when they were taken."""

    cached: dict[str, float]
    uncached: dict[str, float]
    spreads: dict[str, dict[str, dict[str, float]]]  # mode -> timing key -> median, min, max, n
    load: dict[str, float]
    steps: int
    total_steps: int
    same_tokens: bool
    uncached_flops: float  # of the steps timed
    full_uncached_flops: float  # of the whole run without the cache
    full_uncached_seconds: float  # estimated at the measured speed (the measured time when steps == total)

    @property
    def partial(self) -> bool:
        return self.steps < self.total_steps


def step_flops(lm: Any, prefix_len: int, steps: int, beams: int, source_len: int) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs of each step (the prefill first) with and without the cache: linear layers and attention."""
    costs = kv_step_costs(lm.config, max(1, prefix_len), max(1, steps), batch=max(1, beams),
                          source_len=source_len)
    return costs["total_flops_cached"].astype(np.float64), costs["total_flops_uncached"].astype(np.float64)


def steps_within(cached: np.ndarray, uncached: np.ndarray, cap: float) -> int:
    """The most leading steps (at least 2: a prefill and one decoding step) whose two modes fit `cap`."""
    spent = np.cumsum(cached + uncached)
    return max(2, min(len(spent), int(np.searchsorted(spent, cap, side="right"))))


def rerun_work(
    lm: Any, prompt_ids: list[int], cfg: GenerationConfig, forced: list[int], total_steps: int,
    *, cap: float = RERUN_FLOPS,
) -> Iterator[Progress | RerunResult]:
    """The job: Progress after every slice, then the RerunResult. `total_steps` is the run's length; `cap` covers
    both modes and every repeat."""
    probe = plan(lm, prompt_ids, cfg.replace(max_new_tokens=1), forced)
    source = len(probe.prompt_ids) if lm.kind == "seq2seq" else 0
    total = max(1, total_steps)
    flops_cached, flops_uncached = step_flops(lm, len(probe.prefix_ids), total, cfg.num_beams, source)
    steps = min(total, steps_within(REPEATS * flops_cached, REPEATS * flops_uncached, cap))
    timed: dict[str, list[dict[str, float]]] = {"cached": [], "uncached": []}
    tokens: dict[str, list[list[int]]] = {"cached": [], "uncached": []}
    warm = plan(lm, prompt_ids, cfg.replace(max_new_tokens=1), forced)
    for _ in _slices(lm, warm):  # wake the threads and the allocator first (as the CLI's timing would)
        yield Progress("warmup", 0, steps, 0.0)
    for r, mode in noise.turns(["cached", "uncached"], REPEATS):
        p = plan(lm, prompt_ids, cfg.replace(max_new_tokens=steps, use_cache=mode == "cached"), forced)
        per_event: list[float] = []
        pending = spent = 0.0
        last = None
        for took, events in _slices(lm, p):
            pending, spent = pending + took, spent + took
            for event in events:
                per_event.append(pending)
                pending, last = 0.0, event
            yield Progress(mode, r * steps + len(per_event), REPEATS * steps, spent)
        tokens[mode].append(list(last.token_ids) if last is not None else [])
        timed[mode].append(_timing(per_event))
    spreads = {mode: {key: noise.spread(run[key] for run in runs) for key in runs[0]} for mode, runs in timed.items()}
    median = {mode: {key: s["median"] for key, s in keys.items()} for mode, keys in spreads.items()}
    measured = median["uncached"]["total_ms"] / 1000.0
    timed_flops = float(flops_uncached[:steps].sum())
    full_flops = float(flops_uncached.sum())
    same = all(ids == tokens["cached"][0] for runs in tokens.values() for ids in runs)
    yield RerunResult(median["cached"], median["uncached"], spreads, noise.machine_load(), steps, total, same,
                      timed_flops, full_flops, measured * full_flops / timed_flops if timed_flops else measured)


def _slices(lm: Any, p: Any) -> Iterator[tuple[float, list[Any]]]:
    """The plan run alone in a scheduler of its own, one step at a time: (seconds, events) per step."""
    scheduler = Scheduler(lm, max_rows=max(1, p.cfg.num_beams))
    ticket = scheduler.submit(p)
    try:
        while scheduler.busy():
            began = time.perf_counter()
            scheduler.step()
            took = time.perf_counter() - began
            yield took, ticket.take()  # raises the run's own error, if any
    finally:
        ticket.cancel()
        while scheduler.busy():  # a stopped job lets its request end (its greenlet finishes)
            scheduler.step()


def _timing(per_event: list[float]) -> dict[str, float]:
    """The CLI's timing keys from each step's compute seconds (the first is the prefill)."""
    if not per_event:
        return {"prefill_ms": 0.0, "decode_ms_per_token": 0.0, "tokens_per_s": 0.0, "total_ms": 0.0}
    decode = per_event[1:]
    total = sum(per_event)
    return {
        "prefill_ms": 1000.0 * per_event[0],
        "decode_ms_per_token": 1000.0 * (sum(decode) / len(decode)) if decode else 0.0,
        "tokens_per_s": len(per_event) / total if total > 0 else 0.0,
        "total_ms": 1000.0 * total,
    }
