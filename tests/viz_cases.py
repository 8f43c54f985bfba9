"""Every public figure builder and caption function of `playground.viz`, called on small synthetic
inputs shaped like the analyses' output (no model, no torch), and the text a person reads in what
they return. Shared by tests/viz/test_viz_i18n.py; the builders are looked up when a case runs."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

# Token labels hold no English word, so whatever English shows up came from a string table.
WORDS = ["α", "β", "γ", "δ", "ε", "ζ", "η", "θ"]


def _viz(module: str, name: str) -> Callable[..., Any]:
    return getattr(importlib.import_module(f"playground.viz.{module}"), name)


def _softmax(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.normal(size=shape)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sinusoid(length: int, dim: int, base: float = 10000.0) -> np.ndarray:
    pos = np.arange(length)[:, None]
    rates = base ** (-np.arange(0, dim, 2) / dim)
    table = np.zeros((length, dim))
    table[:, 0::2] = np.sin(pos * rates)
    table[:, 1::2] = np.cos(pos * rates)
    return table


# --- inputs shaped like playground.analysis output -------------------------------------------------


def attention_steps(kind: str = "self", phase: str = "prefill") -> dict[str, Any]:
    """`analysis.attention_steps`: self prefill (causal), self decode (a sliding window hides keys), a long
    self decode (K/V hover by position), cross (T5 bias, scale 1) or encoder."""
    rng = np.random.default_rng(1)
    d, h, g = 4, 4, 2
    if phase == "long":
        d, Tq, S, step, mask_kind = 64, 1, 320, 319, "causal"
        mask = np.ones((1, S), dtype=bool)
    elif kind == "self" and phase == "prefill":
        Tq, S, step, mask_kind = 3, 3, 0, "causal"
        mask = np.tril(np.ones((3, 3), dtype=bool))
    elif kind == "self":
        Tq, S, step, mask_kind = 1, 5, 2, "causal, sliding window 3"
        mask = np.array([[False, False, True, True, True]])
    else:
        Tq, S, step, mask_kind = (1, 4, 1, "none") if kind == "cross" else (4, 4, 0, "none")
        mask = np.ones((Tq, S), dtype=bool)
    scale = 1.0 if kind == "cross" else d**-0.5
    scores = rng.normal(size=(Tq, S))
    scaled = scores * scale
    masked = np.where(mask, scaled, -np.inf)
    weights = np.exp(masked - masked.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    v = rng.normal(size=(S, d))
    concat = rng.normal(size=(Tq, h * d))
    w_slice = rng.normal(size=(d, 8))
    labels = (WORDS * (S // len(WORDS) + 1))[: max(Tq, S)]
    return {
        "kind": kind, "layer": 1, "head": 3, "kv_head": 1, "step": step,
        "phase": "encoder" if kind == "encoder" else "decode" if phase == "long" else phase,
        "n_heads": h, "n_kv_heads": h // g, "head_dim": d,
        "scale": scale, "positional": "rope" if kind == "self" else "relative",
        "query_labels": labels[S - Tq:S] if kind == "self" else labels[:Tq], "key_labels": labels[:S],
        "q": rng.normal(size=(Tq, d)), "k": rng.normal(size=(S, d)), "scores": scores, "scaled": scaled,
        "bias": rng.normal(size=(Tq, S)) if kind == "cross" else None, "mask": mask, "mask_kind": mask_kind,
        "masked": masked, "weights": weights, "v": v, "output": weights @ v, "concat": concat,
        "w_o_slice": w_slice, "w_o_shape": (h * d, 8), "o_bias": np.zeros(8) if kind == "cross" else None,
        "head_contribution": rng.normal(size=(Tq, 8)), "attention_output": rng.normal(size=(Tq, 8)),
        "max_abs_error": 3e-7,
    }


def lens_entries(first_top: int | None = 1) -> list[dict[str, Any]]:
    """`analysis.logit_lens`: embedding, block 0, block 1; the chosen token reaches rank 1 at entry
    `first_top` (None: never)."""
    names = ["embedding", "block 0", "block 1"]
    out = []
    for i, name in enumerate(names):
        rank = 1 if first_top is not None and i >= first_top else 3 + i
        out.append({"layer": i, "name": name, "token_ids": [5, 9, 11], "token_texts": WORDS[i:i + 3],
                    "probs": [0.5, 0.3, 0.1], "rank": rank, "prob": 0.5 if rank == 1 else 0.05})
    return out


def kv_costs() -> dict[str, Any]:
    keys = np.arange(4, 10)
    return {
        "keys": keys, "attention_flops_cached": 40 * keys, "attention_flops_uncached": 40 * keys**2,
        "total_flops_cached": 10**6 + 40 * keys, "total_flops_uncached": 10**6 * keys + 40 * keys**2,
        "kv_bytes_read_cached": 2048 * keys, "weight_bytes": np.full(keys.size, 4 * 10**6),
    }


def kv_shapes(seq2seq: bool = False) -> dict[str, Any]:
    def shape(queries: int, keys: int) -> dict[str, Any]:
        return {"queries": queries, "keys": keys, "q_shape": (1, 4, queries, 8), "k_shape": (1, 2, keys, 8),
                "scores_shape": (1, 4, queries, keys), "flops_per_layer": 128 * queries * keys}

    if seq2seq:
        return {"encoder": shape(5, 5), "prefill": shape(1, 1), "decode": shape(1, 4), "T": 3, "step": 3,
                "kind": "seq2seq"}
    return {"prefill": shape(4, 4), "decode": shape(1, 7), "T": 6, "step": 3, "kind": "decoder"}


def cache_timing(verdict: str = "cache_wins", crossover: float | None = 40.0,
                 limit: int | None = 32) -> dict[str, Any]:
    """`analysis.time_cache`: the verdict and where the fitted lines cross (None: they do not)."""
    keys = list(range(4, 10))
    speedup = {"cache_wins": 2.0, "overhead_dominates": 1.02, "cache_slower": 0.8}[verdict]

    def mode(fixed: float, slope: float, median: float) -> dict[str, Any]:
        return {"decode_ms": {"median": median, "min": median * 0.9, "max": median * 1.2},
                "step_ms": np.array([fixed + slope * k for k in keys]), "fit": {"fixed_ms": fixed, "per_key_ms": slope}}

    return {
        "keys": keys, "repeats": 3, "cached": mode(2.0, 0.001, 2.0), "uncached": mode(1.5, 0.05, 2.0 * speedup),
        "speedup": speedup, "verdict": verdict, "crossover_keys": crossover, "context_limit": limit,
        "parameters": 3_500_000,
        "flops_last_step": {"keys": 9, "attention_cached": 360, "attention_uncached": 3240, "total_cached": 10**6,
                            "total_uncached": 9 * 10**6},
    }


def kv_what_if(live: bool = True, seed: bool = True) -> dict[str, Any]:
    tokens = np.array([1, 10, 100, 1000])
    N, B, d, s, q, gqa = 4, 1, 8, 2, 8, 2

    def mem(h: int, t: Any) -> Any:
        return 2 * N * B * h * t * d * s

    total = mem(gqa, 100)
    return {
        "bytes": total, "gb": total / 1e9, "layers": N, "batch": B, "kv_heads": gqa, "query_heads": q,
        "gqa_kv_heads": gqa, "tokens": 100, "head_dim": d, "dtype": "fp16", "bytes_per_element": s,
        "attention": "GQA", "variants": {"MHA": mem(q, 100), "GQA": total, "MQA": mem(1, 100)},
        "curve": {"tokens": tokens, "MHA": mem(q, tokens), "GQA": mem(gqa, tokens), "MQA": mem(1, tokens)},
        "live": {"tokens": 12, "bytes": mem(gqa, 12), "formula_bytes": mem(gqa, 12)} if live else None,
        "expected_gb": round(total / 1e9, 1) if seed else None,
    }


def rope_data() -> dict[str, Any]:
    inv = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    cmp = 1000.0 ** (-np.arange(0, 8, 2) / 8)
    dist = np.arange(16)
    return {"base": 10000.0, "compare_base": 1000.0, "inv_freq": inv, "compare_inv_freq": cmp, "distances": dist,
            "decay": 2 * np.cos(dist[:, None] * inv).sum(1), "compare_decay": 2 * np.cos(dist[:, None] * cmp).sum(1),
            "context": 64}


def rope_shift(available: bool = True, positional: str = "sinusoidal") -> dict[str, Any]:
    if not available:
        return {"available": False, "reason": f"this model's positions are {positional}, not RoPE"}
    shifts = [0, 1, 7]
    return {"available": True, "layer": 0, "head": 1, "kv_head": 0, "step": 2, "query_position": 5,
            "key_position": 2, "query_label": "β", "key_label": "γ", "shifts": shifts,
            "positions": [(5 + s, 2 + s) for s in shifts], "scores": np.array([0.5, 0.5 + 1e-9, 0.5 - 1e-9]),
            "spread": 2e-9, "recorded_score": 0.5, "scale": 0.5, "distances": np.arange(8),
            "by_distance": np.cos(np.arange(8) * 0.3)}


def pe_schemes(own: str = "rope") -> dict[str, Any]:
    delta = np.arange(8)
    one = np.cos(delta * 0.2)[None]
    return {"own": own, "distances": delta, "length": 8, "schemes": {
        "sinusoidal": {"curves": one, "labels": ["PE(0)·PE(δ)"], "source": "formula"},
        "learned": {"curves": np.zeros((0, 8)), "labels": [], "source": "unavailable"},
        "rope": {"curves": one, "labels": ["q = k = 1"], "source": "model"},
        "relative": {"curves": (delta // 2)[None].astype(float), "labels": ["bucket of δ"], "source": "formula"},
        "alibi": {"curves": -np.array([[0.5], [0.25]]) * delta, "labels": ["head 0", "head 1"], "source": "formula"},
    }}


def pattern_gallery(window_is_models: bool = True) -> dict[str, Any]:
    T, w, g, stride, dil, real = 8, 3, 1, 2, 2, 6
    i, j = np.indices((T, T))
    causal = j <= i
    dist = i - j
    masks = {
        "full": np.ones((T, T), dtype=bool), "causal": causal, "sliding_window": causal & (dist < w),
        "local_global": causal & ((dist < w) | (j < g)), "strided": causal & ((dist < stride) | (dist % stride == 0)),
        "dilated": causal & (dist % dil == 0) & (dist < w * dil), "padding": causal & (j < real) & (i < real),
    }
    own = {"sliding_window": "self"} if window_is_models else {"causal": "self"}
    patterns = [{"key": k, "mask": m, "cells": int(m.sum()), "fraction_of_full": m.sum() / T**2,
                 "fraction_of_causal": m.sum() / causal.sum(), "flops_per_layer": 128 * int(m.sum()), "own": own.get(k)}
                for k, m in masks.items()]
    return {"length": T, "window": w, "window_is_models": window_is_models, "global_tokens": g, "stride": stride,
            "dilation": dil, "real_length": real, "patterns": patterns, "n_heads": 4, "head_dim": 8}


def own_weights(kind: str = "self", T: int = 4) -> dict[str, Any]:
    """`analysis.own_pattern_weights`; past 141 tokens the hover names positions instead of tokens."""
    rng = np.random.default_rng(2)
    mask = np.tril(np.ones((T, T), dtype=bool))
    w = np.where(mask, rng.random((T, T)), 0.0)
    w /= w.sum(axis=1, keepdims=True)
    labels = (WORDS * (T // len(WORDS) + 1))[:T]
    return {"weights": w, "mask": mask, "query_labels": labels, "key_labels": labels, "kind": kind,
            "layer": 1, "head": 2, "hidden_mass": 0.0}


def sdpa_data(measured: bool = True, method: str = "measured") -> dict[str, Any]:
    rows = []
    for T in (16, 64, 256):
        score = 4 * T * T * 4
        rows.append({"length": T, "sdpa_ms": 0.01 * T, "sdpa_ms_min": 0.009 * T, "sdpa_ms_max": 0.012 * T,
                     "explicit_ms": 0.03 * T, "explicit_ms_min": 0.028 * T, "explicit_ms_max": 0.035 * T,
                     "max_abs_diff": 2e-7, "score_bytes": score, "explicit_bytes_analytic": 2 * score + T * T,
                     "sdpa_peak_bytes": 100 * T if measured else None,
                     "explicit_peak_bytes": 3 * score if measured else None})
    return {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8, "dtype": "float32", "repeats": 5,
            "device": "cuda:0" if method == "measured_cuda" else "cpu",
            "memory_method": method if measured else "analytic", "rows": rows}


def _part(key: str, params: int, note: str = "", repeat: int = 1, tensors: list | None = None) -> dict[str, Any]:
    return {"key": key, "path": key, "tensors": tensors if tensors is not None else [("weight", (8, 8))],
            "buffers": [], "params_each": params // repeat, "params": params, "repeat": repeat, "note": note}


def _block(cross: bool, layers: int, norm: str) -> list[dict[str, Any]]:
    names = ["attn_norm", "attn"] + (["cross_norm", "cross"] if cross else []) + ["mlp_norm", "mlp"]
    notes = {"attn": "SelfAttention", "cross": "CrossAttention", "mlp": "GatedMLP" if norm == "RMSNorm" else "PlainMLP"}
    return [_part(n, 64 * layers if n.endswith("norm") else 4096 * layers, notes.get(n, norm), layers,
                  [("weight", (8,))] if n.endswith("norm") else [("q.weight", (8, 8)), ("k.weight", (8, 4))])
            for n in names]


def anatomy(kind: str = "decoder", positional: str = "rope") -> dict[str, Any]:
    """`analysis.anatomy`: a pre-LN decoder with a tied head (RoPE, or a learned or sinusoidal table with an
    identity embedding norm), or a post-LN seq2seq model with a T5 relative bias, an untied head and a final
    logits bias."""
    if kind == "decoder":
        positions = [_part("positions", 0 if positional != "learned" else 512, positional, tensors=[])]
        if positional != "rope":
            positions.append(_part("embed_norm", 0, "none", tensors=[]))
        stacks = [{"name": "decoder", "layers": 2, "pre": True,
                   "wiring": ["h1 = x + SelfAttention(Norm(x))", "x' = h1 + MLP(Norm(h1))"],
                   "parts": positions + _block(False, 2, "RMSNorm"),
                   "final_norm": _part("final_norm", 8, "RMSNorm", tensors=[("weight", (8,))])}]
        head, extra = _part("head", 0, "tied"), []
    else:
        stacks = [{"name": name, "layers": 2, "pre": False, "wiring": ["x' = Norm(x + MLP(x))"],
                   "parts": [_part("relative_bias", 256, "relative", tensors=[("embedding.weight", (32, 4))]),
                             _part("embed_norm", 16, "LayerNorm", tensors=[("weight", (8,)), ("bias", (8,))])]
                   + _block(name == "decoder", 2, "LayerNorm"), "final_norm": None}
                  for name in ("encoder", "decoder")]
        head = _part("head", 1_200_000, "untied")
        extra = [_part("final_logits_bias", 100, tensors=[("", (1, 100))])]
    return {"kind": kind, "family": "llama" if kind == "decoder" else "bart", "vocab_size": 100,
            "positional": "rope" if kind == "decoder" else "relative", "embedding": _part("embedding", 800),
            "stacks": stacks, "head": head, "extra": extra, "parameters": 2_345_678}


def residual_norms() -> dict[str, Any]:
    norms = np.array([[1.0, 1.1, 1.2], [2.0, 2.5, 2.2], [4.0, 5.0, 4.5]])
    return {"norms": norms, "steps": [0, 1, 2], "layer_names": ["embedding", "block 0", "block 1"],
            "growth": norms[-1] / norms[0]}


def training_view(curves: bool = True, schedule: str = "cosine", task: str | None = "lm") -> dict[str, Any]:
    steps = np.arange(1, 101)
    return {
        "available": True, "task": task, "assumed": ["min_lr_ratio"], "schedule": schedule, "lr_steps": steps,
        "lr": 1e-3 * np.minimum(steps / 10, 1.0), "peak_lr": 1e-3, "warmup": 10, "label_smoothing": 0.1, "clip": 1.0,
        "steps": 100, "weight_decay": 0.01, "optimizer": "AdamW",
        "curves": {"step": list(range(1, 101)), "loss": list(np.linspace(5, 2, 100)),
                   "nll": list(np.linspace(4.8, 1.9, 100))} if curves else None,
        "evals": [{"step": 50, "held_out_nll": 2.5, "validation_loss": 2.6}, {"step": 100, "held_out_nll": 2.1}],
    }


# --- the cases ---------------------------------------------------------------------------------------

CANDIDATES = [
    {"token": "α", "id": 7, "stages": {"raw": 0.50, "repetition_penalty": 0.50, "temperature": 0.62, "top_k": 0.70,
                                       "top_p": 1.0}, "removed_by": None, "chosen": True},
    {"token": "β", "id": 8, "stages": {"raw": 0.20, "repetition_penalty": 0.20, "temperature": 0.18, "top_k": 0.30,
                                       "top_p": 0.0}, "removed_by": "top_p", "chosen": False},
    {"token": "γ", "id": 9, "stages": {"raw": 0.10, "repetition_penalty": 0.04, "temperature": 0.02, "top_k": 0.0,
                                       "top_p": 0.0}, "removed_by": "top_k", "chosen": False},
]
BEAMS = [
    [{"tokens": "α", "score": -0.5, "finished": False}, {"tokens": "β", "score": -1.2, "finished": False}],
    [{"tokens": "α γ", "score": -0.9, "finished": True}, {"tokens": "β δ", "score": -1.5, "finished": False}],
]
CACHE_STATS = {"layers": 4, "batch": 1, "kv_heads": 2, "query_heads": 8, "tokens": 37, "head_dim": 32,
               "element_size": 4}
TIMING = {"prefill_ms": 100.0, "decode_ms_per_token": 20.0, "tokens_per_s": 50.0}
TIMING_SLOW = {"prefill_ms": 100.0, "decode_ms_per_token": 80.0, "tokens_per_s": 12.5}


def _case(module: str, function: str, *args: Any, **kwargs: Any) -> tuple[str, str, tuple, dict]:
    return module, function, args, kwargs


_RNG = np.random.default_rng(0)
_INV = 10000.0 ** (-np.arange(0, 8, 2) / 8)
_LENS_RANKS = np.array([[5.0, 3.0, np.nan], [2.0, 1.0, np.nan], [1.0, 1.0, np.nan]])
_STEP_KINDS = (("self", "prefill"), ("self", "decode"), ("self", "long"), ("cross", "decode"), ("encoder", "encoder"))
_TIMINGS = {"wins_limit": ("cache_wins", 40.0, 32), "wins_inside": ("cache_wins", 5.0, 32),
            "wins_none": ("cache_wins", -3.0, None), "overhead": ("overhead_dominates", None, None),
            "slower": ("cache_slower", 40.0, None)}

# name -> (module, function, args, kwargs); inputs are built once, so every call draws the same figure.
def attribution(seq2seq: bool = False, every_part: bool = True) -> dict[str, Any]:
    """`Attribution.to_dict()`: 3 layers × 4 heads (and cross-attention heads), MLPs, the other parts."""
    rng = np.random.default_rng(22)
    heads = rng.normal(size=(3, 4))
    other = {"embeddings": 0.4, "positions": -0.1, "attention biases": 0.05, "MLP biases": -0.02,
             "norm biases": 0.01, "head biases": 0.03, "steering": 0.7, "patch": -0.3}
    if not every_part:
        other = {"embeddings": 0.4}
    cross = rng.normal(size=(3, 4)) if seq2seq else None
    mlps = rng.normal(size=3)
    total = float(heads.sum() + mlps.sum() + sum(other.values()) + (cross.sum() if seq2seq else 0.0))
    return {"token_id": 5, "versus_id": None, "logit": total, "total": total, "heads": heads.tolist(),
            "mlps": mlps.tolist(), "cross_heads": None if cross is None else cross.tolist(), "other": other}


def divergence(first: int | None = 2) -> dict[str, Any]:
    """`Divergence.to_dict()` over 5 steps."""
    return {"kl": [0.0, 0.1, 0.8, 1.2, 0.4], "rank": [0, 0, 3, 7, 1], "prob": [0.6, 0.5, 0.05, 0.01, 0.2],
            "original_prob": [0.6, 0.55, 0.5, 0.4, 0.3], "tokens": [1, 2, 3, 4, 5], "first_difference": first}


def head_sweep(partial: bool = False) -> dict[str, Any]:
    """`HeadSweep.to_dict()` of a 4-head layer (the last two not reached when partial)."""
    drops = [0.3, -0.1, float("nan"), float("nan")] if partial else [0.3, -0.1, 1.2, 0.0]
    order = [0, 1, 2, 3] if partial else [2, 0, 3, 1]
    return {"layer": 1, "token_id": 5, "attention": "self", "base_logprob": -1.0, "logprob_drop": drops,
            "logit_drop": drops, "order": order}


CASES: dict[str, tuple[str, str, tuple, dict]] = {
    # attention
    "attention_heads_grid": _case("attention", "attention_heads_grid", _softmax(_RNG, (4, 3, 3)), WORDS[:3],
                                  WORDS[:3]),
    "attention_heads_grid_gqa_log": _case("attention", "attention_heads_grid", _softmax(_RNG, (4, 3, 3)),
                                          kv_groups=2, scale="log", hide_first=True),
    "attention_heatmap": _case("attention", "attention_heatmap", _softmax(_RNG, (3, 3)), WORDS[:3], WORDS[:3],
                               highlight_row=1),
    "attention_heatmap_log": _case("attention", "attention_heatmap", _softmax(_RNG, (3, 3)), scale="log"),
    "attention_row": _case("attention", "attention_row", _softmax(_RNG, (4,)), WORDS[:4]),
    "head_summary": _case("attention", "head_summary", _RNG.random((2, 3)), 3 * _RNG.random((2, 3))),
    # KV cache
    "cache_growth": _case("cache", "cache_growth", [1, 2, 3], [3 << 20, 6 << 20, 9 << 20], [12 << 20] * 3,
                          [9 << 20, 18 << 20, 27 << 20]),
    "cache_growth_big_buffer": _case("cache", "cache_growth", [1, 2], [4096, 8192], [64 << 20] * 2, [4096, 8192]),
    "cache_growth_reused": _case("cache", "cache_growth", [1, 2, 3], [3 << 20, 6 << 20, 9 << 20], [12 << 20] * 3,
                                 [9 << 20, 18 << 20, 27 << 20], reused=(64, 2 << 20)),
    "timing_comparison": _case("cache", "timing_comparison", TIMING, TIMING_SLOW),
    "timing_comparison_no_rate": _case("cache", "timing_comparison", {"prefill_ms": 1.0, "decode_ms_per_token": 1.0},
                                       {"prefill_ms": 1.0, "decode_ms_per_token": 2.0}),
    "kv_formula": _case("cache", "kv_formula", CACHE_STATS),
    "kv_formula_mha": _case("cache", "kv_formula", {**CACHE_STATS, "query_heads": 2}),
    # positional encodings
    "pe_heatmap": _case("positional", "pe_heatmap", _sinusoid(12, 8)),
    "pe_waves": _case("positional", "pe_waves", _sinusoid(12, 8), dims=[0, 4]),
    "pe_similarity": _case("positional", "pe_similarity", _sinusoid(6, 8)),
    "pe_base_comparison": _case("positional", "pe_base_comparison", _sinusoid(12, 8), _sinusoid(12, 8, 1000.0),
                                dims=[2]),
    "rope_frequencies": _case("positional", "rope_frequencies", _INV, context_length=64),
    "rope_rotation": _case("positional", "rope_rotation", _INV, pair=1, positions=6),
    "rope_relative_scores": _case("positional", "rope_relative_scores", np.cos(np.arange(8) * 0.4), np.arange(8)),
    "learned_table_heatmap": _case("positional", "learned_table_heatmap", _RNG.normal(size=(6, 4))),
    "cosine_similarity_matrix": _case("positional", "cosine_similarity_matrix", _RNG.normal(size=(6, 4))),
    "relative_bias_plot": _case("positional", "relative_bias_plot", _RNG.normal(size=(2, 5)), np.arange(-2, 3)),
    # decoding
    "candidate_funnel": _case("sampling", "candidate_funnel", CANDIDATES),
    "candidate_funnel_empty": _case("sampling", "candidate_funnel", []),
    "candidate_funnel_bytes": _case("sampling", "candidate_funnel", [  # a byte token: UTF-8 bytes, not a character
        {"token": "<0xE4><0xB8>", "id": 161, "stages": {"raw": 0.6}, "bytes": True, "chosen": True},
        {"token": "的", "id": 3, "stages": {"raw": 0.4}}]),
    "beam_table": _case("sampling", "beam_table", BEAMS),
    "beam_table_empty": _case("sampling", "beam_table", []),
    "beam_tree": _case("sampling", "beam_tree", BEAMS, final="α γ"),
    "beam_tree_empty": _case("sampling", "beam_tree", []),
    **{f"stage_name_{s}": _case("sampling", "stage_name", s)
       for s in [*CANDIDATES[0]["stages"], "min_p", "forced_bos", "forced_eos"]},
    # attention step by step
    **{f"attention_steps_figure_{k}_{p}": _case("attention_steps", "attention_steps_figure", attention_steps(k, p))
       for k, p in _STEP_KINDS},
    **{f"attention_steps_caption_{k}_{p}": _case("attention_steps", "attention_steps_caption", attention_steps(k, p))
       for k, p in _STEP_KINDS},
    "heads_concat_figure": _case("attention_steps", "heads_concat_figure", attention_steps()),
    "heads_concat_figure_bias": _case("attention_steps", "heads_concat_figure", attention_steps("cross", "decode")),
    # logit lens
    "logit_lens_figure": _case("logit_lens", "logit_lens_figure", lens_entries(), 3),
    "lens_rank_strip": _case("logit_lens", "lens_rank_strip", _LENS_RANKS, ["embedding", "block 0", "block 1"],
                             [1, 2, 3], WORDS[:3], selected=2),
    **{f"logit_lens_caption_{n}": _case("logit_lens", "logit_lens_caption", lens_entries(f), 3, "α")
       for n, f in (("first", 1), ("last", 2), ("never", None))},
    # KV-cache lesson
    "kv_cost_chart": _case("kv_lesson", "kv_cost_chart", kv_costs()),
    "kv_cost_caption": _case("kv_lesson", "kv_cost_caption", kv_costs()),
    "prefill_decode_figure": _case("kv_lesson", "prefill_decode_figure", kv_shapes()),
    "prefill_decode_figure_seq2seq": _case("kv_lesson", "prefill_decode_figure", kv_shapes(True)),
    "prefill_decode_caption": _case("kv_lesson", "prefill_decode_caption", kv_shapes()),
    "prefill_decode_caption_seq2seq": _case("kv_lesson", "prefill_decode_caption", kv_shapes(True)),
    "cache_timing_figure": _case("kv_lesson", "cache_timing_figure", cache_timing()),
    **{f"cache_timing_caption_{n}": _case("kv_lesson", "cache_timing_caption", cache_timing(*a))
       for n, a in _TIMINGS.items()},
    "kv_memory_chart": _case("kv_lesson", "kv_memory_chart", kv_what_if(), "preset"),
    "kv_memory_caption": _case("kv_lesson", "kv_memory_caption", kv_what_if()),
    "kv_memory_caption_plain": _case("kv_lesson", "kv_memory_caption", kv_what_if(False, False)),
    # positional encodings compared
    "rope_base_comparison": _case("positional_compare", "rope_base_comparison", rope_data()),
    "rope_base_caption": _case("positional_compare", "rope_base_caption", rope_data()),
    "rope_shift_figure": _case("positional_compare", "rope_shift_figure", rope_shift()),
    "rope_shift_caption": _case("positional_compare", "rope_shift_caption", rope_shift()),
    **{f"rope_shift_caption_no_rope_{p}": _case("positional_compare", "rope_shift_caption", rope_shift(False, p))
       for p in ("sinusoidal", "learned", "relative", "none")},
    "pe_schemes_figure": _case("positional_compare", "pe_schemes_figure", pe_schemes()),
    "pe_schemes_caption": _case("positional_compare", "pe_schemes_caption", pe_schemes()),
    # attention patterns
    "pattern_gallery_figure": _case("patterns", "pattern_gallery_figure", pattern_gallery()),
    "pattern_gallery_caption": _case("patterns", "pattern_gallery_caption", pattern_gallery()),
    "pattern_gallery_caption_default": _case("patterns", "pattern_gallery_caption", pattern_gallery(False)),
    "own_weights_figure": _case("patterns", "own_weights_figure", own_weights()),
    "own_weights_figure_encoder": _case("patterns", "own_weights_figure", own_weights("encoder")),
    "own_weights_figure_long": _case("patterns", "own_weights_figure", own_weights("self", 150)),
    "own_weights_caption": _case("patterns", "own_weights_caption", own_weights()),
    # SDPA
    "sdpa_figure": _case("sdpa", "sdpa_figure", sdpa_data()),
    "sdpa_figure_analytic": _case("sdpa", "sdpa_figure", sdpa_data(False)),
    "sdpa_caption": _case("sdpa", "sdpa_caption", sdpa_data()),
    "sdpa_caption_analytic": _case("sdpa", "sdpa_caption", sdpa_data(False)),
    "sdpa_caption_cuda": _case("sdpa", "sdpa_caption", sdpa_data(method="measured_cuda")),
    "sdpa_table": _case("sdpa", "sdpa_table", sdpa_data()),
    # anatomy
    "anatomy_figure": _case("anatomy", "anatomy_figure", anatomy()),
    "anatomy_figure_seq2seq": _case("anatomy", "anatomy_figure", anatomy("seq2seq")),
    "anatomy_figure_learned": _case("anatomy", "anatomy_figure", anatomy("decoder", "learned")),
    "anatomy_figure_sinusoidal": _case("anatomy", "anatomy_figure", anatomy("decoder", "sinusoidal")),
    "residual_norm_figure": _case("anatomy", "residual_norm_figure", residual_norms(), 1),
    "residual_norm_caption": _case("anatomy", "residual_norm_caption", anatomy(), residual_norms(), 1),
    "residual_norm_caption_post": _case("anatomy", "residual_norm_caption", anatomy("seq2seq"),
                                        {**residual_norms(), "norms": np.ones((3, 3))}, 1),
    # training recipe
    "training_figure": _case("training", "training_figure", training_view()),
    "training_figure_no_curves": _case("training", "training_figure", training_view(False)),
    "training_figure_noam": _case("training", "training_figure", training_view(False, "inverse_sqrt", None)),
    "training_figure_none": _case("training", "training_figure", {"available": False, "reason": "no_provenance"}),
    "training_caption": _case("training", "training_caption", training_view()),
    "training_caption_no_curves": _case("training", "training_caption", training_view(False)),
    "training_caption_noam": _case("training", "training_caption", training_view(False, "inverse_sqrt", None)),
    "training_caption_no_recipe": _case("training", "training_caption", {"available": False, "reason": "no_recipe"}),
    # the causal lab
    "attribution_figure": _case("causal", "attribution_figure", attribution(), "α"),
    "attribution_figure_versus_seq2seq": _case("causal", "attribution_figure", attribution(True, False), "α", "β"),
    "attribution_caption": _case("causal", "attribution_caption", attribution(), "α"),
    "attribution_caption_seq2seq": _case("causal", "attribution_caption", attribution(True), "α"),
    "divergence_figure": _case("causal", "divergence_figure", divergence(), WORDS[:5]),
    "divergence_figure_same_text": _case("causal", "divergence_figure", divergence(None), WORDS[:5]),
    "head_sweep_figure": _case("causal", "head_sweep_figure", head_sweep(), "α"),
    "head_sweep_figure_partial": _case("causal", "head_sweep_figure", head_sweep(True), "α"),
}


def run_case(name: str, lang: str = "en") -> Any:
    """The case drawn in `lang` (a builder that draws no words takes none)."""
    module, function, args, kwargs = CASES[name]
    builder = _viz(module, function)
    if "lang" in inspect.signature(builder).parameters:
        kwargs = {**kwargs, "lang": lang}
    return builder(*args, **kwargs)


# --- the text a person reads -------------------------------------------------------------------------

TEXT_KEYS = {"text", "name", "hovertemplate", "texttemplate", "ticktext", "customdata", "values", "x", "y"}


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "OU":
            for v in value.ravel():
                yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _walk(node: Any, out: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "template":
                continue
            if key in TEXT_KEYS:
                out.extend(_strings(value))
            if key == "labelalias" and isinstance(value, dict):  # the tick labels drawn for category coordinates
                out.extend(str(v) for v in value.values())
            elif isinstance(value, (dict, list, tuple)):
                _walk(value, out)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _walk(value, out)


def readable_text(result: Any) -> list[str]:
    """Every string a person reads in a builder's result: a figure's titles, axis and colour-bar titles,
    legend names, annotations, hover templates and hover data, tick labels and category coordinates,
    table headers and cells; a caption itself; a table's column names and cells."""
    if isinstance(result, str):
        return [result]
    if isinstance(result, list) and all(isinstance(r, dict) for r in result):
        return [str(x) for row in result for pair in row.items() for x in pair]
    if isinstance(result, list):
        return [str(x) for x in result]
    out: list[str] = []
    _walk(result.to_plotly_json(), out)
    return out
