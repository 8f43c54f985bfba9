"""The KV-cache lesson (prefill vs decode), by formula and by measurement.

Prefill: the prompt's L_p tokens in one pass, an L_p × L_p score matrix per head (compute-bound).
Decode: one new token per step, Q_t (1 query) against K_all (T + 1 keys), a 1 × (T + 1) row;
every step reads the whole cache (memory-bound). Without a cache each step recomputes every
position: (T + 1) × (T + 1) scores and K/V of all T + 1 tokens (O((T+1)²·d_h) per step
instead of O((T+1)·d_h)).

`kv_step_costs` counts, per step, the FLOPs of attention and of the linear layers and the bytes
of K/V read, with and without the cache (a pure function of the config and lengths; FLOPs count a
multiply-add as 2). `time_cache` measures both modes through `generate_all` and explains the result:
on a tiny model each step's fixed cost (Python, kernel launches, reading the weights) dwarfs the
attention work the cache saves, so the cache only wins once the context is long.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterator
from typing import Any

import numpy as np

from playground.config import ModelConfig
from playground.generation import GenerationConfig, GenerationResult, generate_all, stepper_class
from playground.loaded import LoadedModel


def linear_flops_per_token(config: ModelConfig) -> dict[str, int]:
    """FLOPs of every weight matrix one token passes through in the decoder stack, per layer and in all
    (2 per multiply-add), and the head's 2·d·V. Cross-attention K/V are per source token (`cross_kv`)."""
    c = config
    d, dh, h, hkv = c.d_model, c.head_dim, c.n_heads, c.n_kv_heads
    attn = 2 * d * (h + 2 * hkv) * dh + 2 * h * dh * d  # fused q/k/v, then W_O
    mlp = (6 if c.mlp == "gated" else 4) * d * c.d_ff  # gate+up and down, or fc1 and fc2
    cross = 2 * d * h * dh + 2 * h * dh * d if c.kind == "seq2seq" else 0  # cross q and W_O
    per_layer = attn + mlp + cross
    return {
        "per_layer": per_layer, "layers": c.n_layers * per_layer, "head": 2 * d * c.vocab_size,
        "cross_kv_per_source_token": (2 * d * 2 * hkv * dh * c.n_layers) if c.kind == "seq2seq" else 0,
    }


def kv_step_costs(
    config: ModelConfig,
    prompt_len: int,
    new_tokens: int,
    *,
    batch: int = 1,
    element_size: int = 4,
    source_len: int = 0,
) -> dict[str, Any]:
    """Per generation step, what one forward pass costs with and without the KV cache.

    prompt_len: decoder-only: the prompt (L_p); seq2seq: the decoder prefix (1 start token), with
    the encoded source of `source_len` tokens. Step 0 is the prefill (the same in both modes); step
    t ≥ 1 feeds one token with the cache (1 query against n = L_p + t keys) and all n tokens without.

    Arrays over steps: steps, keys (n), attention_flops_cached / _uncached (4·h·d_h·queries·keys per
    layer: Q·Kᵀ and A·V, self + cross), linear_flops_cached / _uncached (every matrix, per token
    processed, the head once), total_flops_*, kv_bytes_read_cached (the whole cache, read every
    step: 2·N·B·h_kv·n·d_h·s, + the cross K/V for seq2seq), kv_bytes_recomputed_uncached (the same
    K/V recomputed from scratch instead), weight_bytes (the matrices read once per step, both ways).
    """
    c = config
    if prompt_len < 1 or new_tokens < 1:
        raise ValueError("prompt_len and new_tokens must be at least 1")
    B, N, h, hkv, dh, s = batch, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, element_size
    lin = linear_flops_per_token(c)
    steps = np.arange(new_tokens)
    keys = np.where(steps == 0, prompt_len, prompt_len + steps).astype(np.int64)  # n at each step
    q_cached = np.where(steps == 0, prompt_len, 1).astype(np.int64)
    q_uncached = keys.copy()
    per_qk = 4 * h * dh * N * B  # FLOPs per (query, key) pair in all layers: Q·Kᵀ and weights·V
    cross_attn = lambda q: per_qk * q * source_len  # noqa: E731 - cross-attention of q queries
    cross_kv = lin["cross_kv_per_source_token"] * source_len * B
    attn_c = per_qk * q_cached * keys + cross_attn(q_cached)
    attn_u = per_qk * q_uncached * keys + cross_attn(q_uncached)
    # Without a cache the decoder also re-projects the source's cross K/V at every step.
    lin_c = B * (lin["layers"] * q_cached + lin["head"]) + np.where(steps == 0, cross_kv, 0)
    lin_u = B * (lin["layers"] * q_uncached + lin["head"]) + cross_kv
    kv_bytes = 2 * N * B * hkv * dh * s * keys
    cross_bytes = 2 * N * B * hkv * dh * s * source_len
    weights = (lin["layers"] + lin["head"]) // 2 * s
    return {
        "steps": steps, "keys": keys, "queries_cached": q_cached, "queries_uncached": q_uncached,
        "attention_flops_cached": attn_c, "attention_flops_uncached": attn_u,
        "linear_flops_cached": lin_c, "linear_flops_uncached": lin_u,
        "total_flops_cached": attn_c + lin_c, "total_flops_uncached": attn_u + lin_u,
        "kv_bytes_read_cached": np.where(steps == 0, 0, kv_bytes + cross_bytes),
        "kv_bytes_recomputed_uncached": np.where(steps == 0, 0, kv_bytes + cross_bytes),
        "weight_bytes": np.full(new_tokens, weights, dtype=np.int64),
        "linear_flops_per_token": lin, "prompt_len": prompt_len, "source_len": source_len,
        "batch": batch, "element_size": element_size,
    }


def prefill_decode_shapes(
    config: ModelConfig, prompt_len: int, step: int, *, batch: int = 1, source_len: int = 0
) -> dict[str, Any]:
    """The two attention shapes at a step: prefill (L_p × L_p) and decode (1 × (T + 1)).

    prompt_len: the decoder stream before the first new token (decoder-only: the prompt; seq2seq:
    the start token, with the source of `source_len` tokens read once by the encoder, S × S).
    T = tokens already cached before the step's new token (L_p + step − 1 for step ≥ 1).
    Each: queries, keys, q_shape (B, h, queries, d_h), k_shape (B, h_kv, keys, d_h),
    scores_shape (B, h, queries, keys), flops_per_layer (4·h·d_h·queries·keys); "encoder" for seq2seq.
    """
    c = config
    T = prompt_len + max(int(step), 1) - 1

    def shape(queries: int, keys: int) -> dict[str, Any]:
        return {
            "queries": queries, "keys": keys, "q_shape": (batch, c.n_heads, queries, c.head_dim),
            "k_shape": (batch, c.n_kv_heads, keys, c.head_dim), "scores_shape": (batch, c.n_heads, queries, keys),
            "flops_per_layer": 4 * c.n_heads * c.head_dim * queries * keys * batch,
        }

    out = {"prefill": shape(prompt_len, prompt_len), "decode": shape(1, T + 1), "T": T, "step": int(step),
           "kind": config.kind}
    if config.kind == "seq2seq":
        out["encoder"] = shape(source_len, source_len)
    return out


def _spread(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    q1, q3 = (float(np.percentile(v, p)) for p in (25, 75))
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "q1": q1, "q3": q3, "n": len(v)}


def _fit(points: list[tuple[int, float]]) -> dict[str, float]:
    """step_ms ≈ fixed + per_key · n: least squares over (keys, ms) points."""
    n = np.array([p[0] for p in points], dtype=np.float64)
    ms = np.array([p[1] for p in points], dtype=np.float64)
    if len(set(n.tolist())) < 2:
        return {"fixed_ms": float(ms.mean()), "per_key_ms": 0.0}
    slope, intercept = np.polyfit(n, ms, 1)
    return {"fixed_ms": float(intercept), "per_key_ms": float(slope)}


def time_cache(
    lm: LoadedModel,
    prompt: str | list[int],
    max_new_tokens: int = 48,
    *,
    repeats: int = 5,
    warmup: int = 1,
    chat: bool = False,
) -> dict[str, Any]:
    """Greedy runs with and without the KV cache through `generate_all`: warm-up, then `repeats`
    alternating pairs; exactly `max_new_tokens` each (end-of-text is ignored for the measurement).

    Returns, per mode ("cached", "uncached"): decode_ms (median, min, max, q1, q3 of each run's
    decode ms per token), prefill_ms (same), step_ms (per step, median over runs), fit (fixed_ms +
    per_key_ms · keys, least squares over every decode step); and keys (per step), speedup (median
    uncached / median cached decode), same_tokens, verdict ("cache_wins", "overhead_dominates",
    "cache_slower"), crossover_keys (where the fitted lines cross, None if they do not),
    context_limit, the FLOP counts of `kv_step_costs` at the last step, parameters.
    """
    for item in iter_time_cache(lm, prompt, max_new_tokens, repeats=repeats, warmup=warmup, chat=chat):
        if isinstance(item, dict):
            return item
    raise AssertionError("the measurement ends with its result")


def iter_time_cache(
    lm: LoadedModel,
    prompt: str | list[int],
    max_new_tokens: int = 48,
    *,
    repeats: int = 5,
    warmup: int = 1,
    chat: bool = False,
) -> Iterator[tuple[int, int] | dict[str, Any]]:
    """`time_cache` one run at a time: yields (runs done, runs) after each, then the result."""
    if repeats < 1 or max_new_tokens < 2:
        raise ValueError("use at least 1 repeat and 2 new tokens (one prefill, one decode step)")
    # A private copy of the config without end-of-text, so every run decodes exactly max_new_tokens.
    quiet = dataclasses.replace(lm, config=dataclasses.replace(lm.config, eos_token_id=None))
    base = GenerationConfig(max_new_tokens=max_new_tokens, top_candidates=0, chat=chat)
    total, done = 2 * (warmup + repeats), 0
    for _ in range(warmup):
        for use_cache in (True, False):
            generate_all(quiet, prompt, base.replace(use_cache=use_cache, max_new_tokens=min(8, max_new_tokens)))
            done += 1
            yield done, total
    runs: dict[str, list] = {"cached": [], "uncached": []}
    for r in range(repeats):
        order = (True, False) if r % 2 == 0 else (False, True)  # alternate so drift hits both modes alike
        for use_cache in order:
            mode = "cached" if use_cache else "uncached"
            runs[mode].append(generate_all(quiet, prompt, base.replace(use_cache=use_cache)))
            done += 1
            yield done, total
    yield _summary(lm, runs, max_new_tokens, repeats)


def _summary(lm: LoadedModel, runs: dict[str, list], max_new_tokens: int, repeats: int) -> dict[str, Any]:
    first = runs["cached"][0]
    prefix = len(first.decoder_prefix)
    keys = [prefix + t if t else prefix for t in range(len(first.token_ids))]
    out: dict[str, Any] = {"keys": keys, "max_new_tokens": max_new_tokens, "repeats": repeats,
                           "prompt_tokens": len(first.prompt_ids), "parameters": lm.parameter_count}
    for mode, results in runs.items():
        per_step = np.array([[e.timing["step_ms"] for e in res.steps] for res in results])  # (repeats, steps)
        points = [(keys[t], float(per_step[r, t])) for r in range(len(results)) for t in range(1, per_step.shape[1])]
        out[mode] = {
            "decode_ms": _spread([res.timing["decode_ms_per_token"] for res in results]),
            "prefill_ms": _spread([res.timing["prefill_ms"] for res in results]),
            "step_ms": np.median(per_step, axis=0), "fit": _fit(points),
        }
    c_med, u_med = out["cached"]["decode_ms"]["median"], out["uncached"]["decode_ms"]["median"]
    out["speedup"] = u_med / c_med if c_med > 0 else float("nan")
    out["same_tokens"] = all(res.token_ids == first.token_ids for rs in runs.values() for res in rs)
    # Within ±10 % the two are the same speed on a shared CPU: the per-step overhead hides what the cache saves.
    speedup = out["speedup"]
    out["verdict"] = "cache_wins" if speedup >= 1.1 else ("cache_slower" if speedup < 0.9 else "overhead_dominates")
    fc, fu = out["cached"]["fit"], out["uncached"]["fit"]
    gap = fu["per_key_ms"] - fc["per_key_ms"]
    out["crossover_keys"] = (fc["fixed_ms"] - fu["fixed_ms"]) / gap if gap > 0 else None
    out["context_limit"] = stepper_class(lm.kind).context_limit(lm.config)
    costs = kv_step_costs(lm.config, prefix, len(keys), element_size=lm.model.embed.weight.element_size(),
                          source_len=len(first.prompt_ids) if lm.kind == "seq2seq" else 0)
    last = -1
    out["flops_last_step"] = {
        "keys": int(costs["keys"][last]),
        "attention_cached": int(costs["attention_flops_cached"][last]),
        "attention_uncached": int(costs["attention_flops_uncached"][last]),
        "total_cached": int(costs["total_flops_cached"][last]),
        "total_uncached": int(costs["total_flops_uncached"][last]),
    }
    return out


def run_lesson(lm: LoadedModel, result: GenerationResult, step: int) -> dict[str, Any]:
    """The formulas filled in with one run's lengths: costs over every step, the shapes at `step`, and
    the live cache stats the engine reported at that step (`result.steps[step].cache`)."""
    if not 0 <= int(step) < len(result.token_ids):
        raise ValueError(f"step {step} is outside this run's steps 0..{len(result.token_ids) - 1}")
    prefix = len(result.decoder_prefix)
    source = len(result.prompt_ids) if lm.kind == "seq2seq" else 0
    size = lm.model.embed.weight.element_size()
    return {
        # "selected": the step the captions read, so the costs and the shapes name the same step and T + 1
        "costs": {**kv_step_costs(lm.config, prefix, max(2, len(result.token_ids)), element_size=size,
                                  source_len=source), "selected": int(step)},
        "shapes": prefill_decode_shapes(lm.config, prefix, int(step), source_len=source),
        "cache": result.steps[int(step)].cache if int(step) < len(result.steps) else None,
    }
