"""The lessons' measurements on demand, as jobs (`playground.app.jobs`): bounded by the model, not by a
fixed size, and sliced so the other visitors keep their turn.

- SDPA against the explicit softmax: the explicit path holds two (h, T, T) float32 tensors, so the lengths
  measured are the lesson's own (128 … 1024) that fit the model's positions and `SDPA_BYTES`: a 256-head
  upload is measured at shorter lengths instead of allocating gigabytes. One length per slice, then the
  memory peaks in a child process over the same lengths.
- The KV lesson's timing with and without the cache: its length and repeats shrink until every run fits
  `TIME_CACHE_FLOPS` (without the cache each step recomputes the whole prefix: T² work); one run per slice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from playground.analysis.kv_lesson import iter_time_cache, kv_step_costs
from playground.analysis.sdpa import DEFAULT_LENGTHS, peak_memory, sdpa_vs_explicit
from playground.app import noise
from playground.app.jobs import Progress

SDPA_BYTES = 256 * 1024**2  # the explicit path's peak at the longest length measured (SmolLM2 at 1024: 75 MB)
SDPA_MIN_LENGTH = 16


def explicit_bytes(n_heads: int, length: int) -> int:
    """The explicit path's peak: the masked scores and the weights (h, T, T) in float32, and the T × T mask."""
    return 2 * n_heads * length * length * 4 + length * length


def sdpa_lengths(lm: Any, budget: int = SDPA_BYTES) -> tuple[int, ...]:
    """The lesson's lengths that fit the model's positions and the budget; else the longest power of two
    that does (at least `SDPA_MIN_LENGTH`), or () when not even that fits."""
    h, limit = lm.config.n_heads, lm.config.max_positions
    fits = [T for T in DEFAULT_LENGTHS if T <= limit and explicit_bytes(h, T) <= budget]
    if fits:
        return tuple(fits)
    T = min(DEFAULT_LENGTHS)
    while T > SDPA_MIN_LENGTH and not (T <= limit and explicit_bytes(h, T) <= budget):
        T //= 2
    return (T,) if T <= limit and explicit_bytes(h, T) <= budget else ()


def sdpa_work(lm: Any, lengths: tuple[int, ...], *, memory: bool = True) -> Iterator[Progress | dict[str, Any]]:
    """The job: one length timed per slice (Progress after each), the memory peaks in one more, then the
    measurement as `sdpa_vs_explicit` returns it."""
    if not lengths:
        raise ValueError("no attention length fits this model's positions and the memory budget")
    on_cpu = lm.model.embed.weight.device.type == "cpu"
    rows: list[dict[str, Any]] = []
    data: dict[str, Any] = {}
    for i, T in enumerate(lengths):
        data = sdpa_vs_explicit(lm, (T,), memory=memory and not on_cpu)  # a GPU's peaks come with each length
        rows += data["rows"]
        yield Progress("lengths", i + 1, len(lengths))
    if memory and on_cpu:  # the CPU's peaks: one child process over every length
        c = lm.config
        measured = peak_memory(c.n_heads, c.n_kv_heads, c.head_dim, list(lengths), dtype=data["dtype"])
        for row in rows:
            peaks = (measured or {}).get(row["length"], {})
            row["sdpa_peak_bytes"], row["explicit_peak_bytes"] = peaks.get("sdpa"), peaks.get("explicit")
        data["memory_method"] = "measured" if measured else "analytic"
    yield {**data, "rows": rows, "load": noise.machine_load()}


TIME_CACHE_FLOPS = 2e12  # the KV lesson's timing, every run of it (SmolLM2: a 150-token prompt, 48 tokens, 5 repeats)


def time_cache_shape(lm: Any, prompt_tokens: int, wanted_tokens: int, *, cap: float = TIME_CACHE_FLOPS,
                     ) -> tuple[int, int] | None:
    """(new tokens, repeats) for the KV lesson's timing of a prompt: the wanted length (8 to 48 tokens) and
    5 repeats, shortened, then repeated less, until every run of it fits `cap`; None when even one repeat
    of 2 tokens does not (the prompt is too long to time here)."""
    def cost(tokens: int, repeats: int) -> float:
        warm = min(8, tokens)
        cached, uncached = (float(a.sum()) for a in _step_flops(lm, prompt_tokens, tokens))
        w_cached, w_uncached = (float(a.sum()) for a in _step_flops(lm, prompt_tokens, warm))
        return repeats * (cached + uncached) + w_cached + w_uncached

    tokens = min(48, max(8, wanted_tokens))
    while tokens > 2 and cost(tokens, 5) > cap:
        tokens = max(2, tokens // 2)
    for repeats in (5, 3, 1):
        if cost(tokens, repeats) <= cap:
            return tokens, repeats
    return None


def _step_flops(lm: Any, prompt_tokens: int, tokens: int) -> tuple[Any, Any]:
    costs = kv_step_costs(lm.config, max(1, prompt_tokens), tokens,
                          source_len=prompt_tokens if lm.kind == "seq2seq" else 0)
    return costs["total_flops_cached"], costs["total_flops_uncached"]


def time_cache_work(lm: Any, prompt_ids: list[int], tokens: int, repeats: int,
                    ) -> Iterator[Progress | dict[str, Any]]:
    """The KV lesson's timing as a job: one whole run (one mode, one repeat) per slice; the machine's load with
    the result."""
    for item in iter_time_cache(lm, prompt_ids, max_new_tokens=tokens, repeats=repeats):
        yield Progress("runs", *item) if isinstance(item, tuple) else {**item, "load": noise.machine_load()}
