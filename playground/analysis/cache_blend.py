"""Cache reuse: a prompt's keys and values taken from elsewhere instead of computed (pure functions over a model).

Two kinds of reuse, both measured with the model's own passes and its own KV cache:

* **Prefix reuse** (`prefix_reuse`). A second prompt that begins like the first can take the first prompt's cached
  K/V for the shared beginning: position for position they are the same numbers, so only the rest is prefilled and
  the answer is the same.

* **CacheBlend** (Yao et al., EuroSys 2025): chunks whose K/V were cached alone, moved by rotation and blended with
  r % of the positions recomputed. Its mechanics and their definitions are `playground.models.cache_blend`; here,
  what is lost and saved: each layer's deviation from the full prefill (`deviation`), the answer's KL and top-1
  agreement along the full run's greedy tokens (`quality`), the share of the prefill's work recomputed
  (`recompute_share`), and the sweep over r the lab draws (`blend_sweep`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from playground.models.cache_blend import (
    CHECK_LAYER,
    KV,
    blend,
    chunked_kv,
    kv_of,
    naive_reuse,
    new_cache,
    prefill,
    rotate_keys,
)
from playground.models.kv_cache import KVCache


def deviation(a: KV, b: KV) -> list[torch.Tensor]:
    """Per layer, per position: ‖k_a − k_b‖² + ‖v_a − v_b‖² over heads and dims (T,), over b's first positions."""
    out = []
    for ka, va, kb, vb in zip(*a, *b):
        n = ka.shape[1]
        out.append(((ka - kb[:, :n]) ** 2).sum((0, 2)) + ((va - vb[:, :n]) ** 2).sum((0, 2)))
    return out


def relative_deviation(reused: KV, full: KV) -> list[float]:
    """Per layer: ‖K/V reused − full‖ / ‖K/V full‖ over the reused positions (0 = the same numbers)."""
    out = []
    for ka, va, kb, vb in zip(*reused, *full):
        n = ka.shape[1]
        num = ((ka - kb[:, :n]) ** 2).sum() + ((va - vb[:, :n]) ** 2).sum()
        den = (kb[:, :n] ** 2).sum() + (vb[:, :n] ** 2).sum()
        out.append(float((num / den.clamp_min(1e-30)).sqrt()))
    return out


def recompute_share(layers: int, positions: int, picked: int, r_full: bool, check_layer: int = CHECK_LAYER) -> float:
    """The share of the full prefill's token·layer work a real CacheBlend engine does: every position up to the
    check layer (to pick), then the picked ones and the last token (naive reuse: the last token only)."""
    total = layers * (positions + 1)
    if r_full:
        return 1.0
    if picked == 0:
        return layers / total
    upto = min(check_layer + 1, layers)
    return (upto * (positions + 1) + (layers - upto) * (picked + 1)) / total


# --- quality -------------------------------------------------------------------------------------------


def kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    """KL(p ‖ q) in nats of two next-token distributions given as logits."""
    lp, lq = F.log_softmax(p_logits.double(), -1), F.log_softmax(q_logits.double(), -1)
    return float((lp.exp() * (lp - lq)).sum())


@torch.no_grad()
def along(model: Any, logits: torch.Tensor, cache: KVCache, tokens: Sequence[int]) -> list[torch.Tensor]:
    """The next-token logits at each of `tokens` (teacher-forced): the first is `logits`, then one decode step with
    `cache` per token fed."""
    out = [logits]
    for token in tokens[:-1]:
        step, cache = prefill(model, [token], cache)
        out.append(step)
    return out


@dataclass
class Quality:
    kl_first: float  # KL(full ‖ method) of the first answer token's distribution
    kl_mean: float  # mean over the steps along the full run's greedy tokens
    top1: float  # share of those steps where the method's top token is the full run's token
    same_first: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kl_first": self.kl_first, "kl_mean": self.kl_mean, "top1": self.top1, "same_first": self.same_first}


def quality(full_steps: list[torch.Tensor], steps: list[torch.Tensor], tokens: Sequence[int]) -> Quality:
    kls = [kl(a, b) for a, b in zip(full_steps, steps)]
    agree = [int(torch.argmax(s)) == t for s, t in zip(steps, tokens)]
    return Quality(kls[0], sum(kls) / len(kls), sum(agree) / len(agree), agree[0])


@torch.no_grad()
def greedy_tokens(model: Any, ids: Sequence[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """The full prefill's next `n` greedy tokens and its logits at each."""
    logits, cache = prefill(model, ids, new_cache(model, len(ids) + n + 1))
    tokens, steps = [], []
    for _ in range(n):
        steps.append(logits)
        tokens.append(int(torch.argmax(logits)))
        logits, cache = prefill(model, tokens[-1:], cache)
    return tokens, steps


# --- the sweep the lab and the docs show ----------------------------------------------------------------


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    began = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - began


def blend_sweep(model: Any, ids: Sequence[int], starts: Sequence[int], rs: Sequence[float], steps: int = 8):
    """A generator: one slice per r (yields r's row), returning the whole measure: the chunks, the per-layer
    deviation of naive reuse from the full prefill, and per r its KL, top-1 agreement along the full run's next
    `steps` greedy tokens, the share of work recomputed and the seconds its prefill took (measured: naive reuse at
    r = 0, the blend's pass between, the full prefill at r = 100)."""
    (tokens, full_steps), full_s = _timed(greedy_tokens, model, ids, steps)
    _, t_full = _timed(prefill, model, ids)
    full = kv_of(model, ids)
    reused, t_chunks = _timed(chunked_kv, model, ids, starts)
    _, t_naive = _timed(naive_reuse, model, ids, reused)
    layers, n = len(full[0]), len(ids) - 1
    check = deviation(reused, full)[min(CHECK_LAYER, layers - 1)]
    rows = []
    for r in rs:
        (logits, cache, picked), seconds = _timed(blend, model, ids, reused, r, steps + 1)
        q = quality(full_steps, along(model, logits, cache, tokens), tokens)
        share = recompute_share(layers, n, picked.numel(), picked.numel() == n)
        row = {"r": float(r), **q.to_dict(), "share": share, "picked": picked.tolist(), "seconds": seconds}
        rows.append(row)
        yield row
    return {"starts": list(starts), "tokens": len(ids), "layers": layers, "rows": rows, "steps": steps,
            "deviation": relative_deviation(reused, full), "full_seconds": t_full, "naive_seconds": t_naive,
            "chunk_seconds": t_chunks, "answer": tokens, "check": check.tolist(), "check_layer": CHECK_LAYER,
            "rotation": rotation_example(model, ids, starts)}


def rotation_example(model: Any, ids: Sequence[int], starts: Sequence[int]) -> dict[str, Any] | None:
    """The seed's formula on one key: the last chunk's first token, layer 0, head 0, cached at position 0 of its
    chunk and moved to where the chunk starts; three of its rotary pairs (fastest, middle, slowest turning) as
    (x_i, x_{i+r/2}) before and after, with their angles θ_i per position."""
    rope = model.rope
    if rope is None or len(starts) < 2:
        return None
    s = starts[-1]
    alone = kv_of(model, ids[s:s + 1])[0][0][0, 0]  # (d,)
    moved = rotate_keys(model, [kv_of(model, ids[s:s + 1])[0][0]], s)[0][0, 0]
    half = rope.inv_freq.shape[0]
    index = sorted({0, half // 2, half - 1})
    return {"from": 0, "to": s, "index": index, "theta": [float(rope.inv_freq[i]) for i in index],
            "pairs": [[float(alone[i]), float(alone[i + half]), float(moved[i]), float(moved[i + half])]
                      for i in index]}


# --- prefix reuse --------------------------------------------------------------------------------------


@torch.no_grad()
def prefix_reuse(model: Any, first: Sequence[int], second: Sequence[int], steps: int = 8) -> dict[str, Any]:
    """The second prompt prefilled whole, and again with the first prompt's cached K/V for their shared beginning
    (at most all but its last token): the positions reused, both prefill times, and whether the greedy tokens
    that follow are the same."""
    shared = 0
    while shared < min(len(first), len(second) - 1) and first[shared] == second[shared]:
        shared += 1
    _, cached = prefill(model, first)
    k, v = cached.read_span(0, cached.length)
    (logits_a, cache_a), t_whole = _timed(prefill, model, second, new_cache(model, len(second) + steps + 1))
    cache_b = new_cache(model, len(second) + steps + 1)
    began = time.perf_counter()
    if shared:
        cache_b.write_span(0, shared, [x[:, :shared] for x in k], [x[:, :shared] for x in v])
    logits_b, cache_b = prefill(model, second[shared:], cache_b)
    t_reused = time.perf_counter() - began
    texts = []
    for logits, cache in ((logits_a, cache_a), (logits_b, cache_b)):
        out = []
        for _ in range(steps):
            out.append(int(torch.argmax(logits)))
            logits, cache = prefill(model, out[-1:], cache)
        texts.append(out)
    return {"shared": shared, "tokens": len(second), "whole_seconds": t_whole, "reused_seconds": t_reused,
            "same": texts[0] == texts[1], "answer": texts[0], "reused_answer": texts[1],
            "max_logit_diff": float((logits_a - logits_b).abs().max())}
