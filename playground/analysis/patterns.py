"""Attention patterns: which keys each query may see, and what that saves.

Full attention scores every (query, key) pair: T² cells, O(T²) time and memory. Sparse patterns
keep a subset:
- causal: key j ≤ query i (every decoder);
- sliding window w: i − w < j ≤ i (Mistral; O(T·w));
- local + global: the window plus g global tokens every query sees (Longformer, BigBird);
- strided: the last `stride` tokens plus every stride-th one before (Sparse Transformer, O(T·√T)
  with stride √T);
- dilated: every d-th token within a window w·d (Longformer's dilated window: a wider view, same cost);
- padding: a shorter sequence padded to the batch length hides the padding keys.
Causal and sliding-window masks come from the model's own `causal_mask`; the others from their
definitions. The loaded model's own masks are marked, and `own_pattern_weights` shows its real
weights under them from a recorded run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from playground.analysis.attention_steps import attention_matrix
from playground.analysis.recorded import RunCache
from playground.generation import GenerationResult
from playground.loaded import LoadedModel
from playground.models.attention import causal_mask

PATTERNS = ("full", "causal", "sliding_window", "local_global", "strided", "dilated", "padding")


def _causal(length: int, window: int | None = None) -> np.ndarray:
    m = causal_mask(length, length, window=window)
    return np.ones((length, length), dtype=bool) if m is None else m.numpy()


def pattern_masks(
    length: int, *, window: int, global_tokens: int, stride: int, dilation: int, real_length: int
) -> dict[str, np.ndarray]:
    """(T, T) bool masks (True: query i sees key j) for every pattern, T = `length`."""
    i = np.arange(length)[:, None]
    j = np.arange(length)[None, :]
    dist = i - j  # how far back key j lies from query i
    causal = dist >= 0
    return {
        "full": np.ones((length, length), dtype=bool),
        "causal": _causal(length),
        "sliding_window": _causal(length, window),
        "local_global": causal & ((dist < window) | (j < global_tokens)),
        "strided": causal & ((dist < stride) | (dist % stride == 0)),
        "dilated": causal & (dist % dilation == 0) & (dist < window * dilation),
        "padding": causal & (j < real_length) & (i < real_length),
    }


def own_patterns(lm: LoadedModel) -> dict[str, str]:
    """The loaded model's own masks: pattern -> the attention kind that uses it."""
    if lm.kind == "seq2seq":
        return {"full": "encoder", "causal": "self"}
    return {"sliding_window" if lm.config.sliding_window else "causal": "self"}


def attention_patterns(
    lm: LoadedModel,
    length: int = 32,
    *,
    window: int | None = None,
    global_tokens: int = 2,
    stride: int | None = None,
    dilation: int = 2,
    real_length: int | None = None,
) -> dict[str, Any]:
    """The gallery's masks at `length` tokens with their costs against full attention.

    window: the model's sliding window when it has one, else `length` // 4 (at least 2); stride:
    about √length; real_length (padding): three quarters of `length`.
    Returns length, window, window_is_models, global_tokens, stride, dilation, real_length, and
    patterns [{key, mask (T, T), cells, fraction_of_full, fraction_of_causal, flops_per_layer
    (4·h·d_h per visible cell: Q·Kᵀ and A·V, as a kernel that skips hidden cells does), own (the kind
    that uses it in this model, or None)}].
    """
    c = lm.config
    length = int(max(4, min(int(length), c.max_positions, 1024)))
    models_window = c.sliding_window
    window = int(window or models_window or max(2, length // 4))
    stride = int(stride or max(2, round(length**0.5)))
    real_length = int(real_length or max(1, (3 * length) // 4))
    masks = pattern_masks(length, window=window, global_tokens=int(global_tokens), stride=stride,
                          dilation=int(dilation), real_length=real_length)
    full_cells, causal_cells = length * length, length * (length + 1) // 2
    own = own_patterns(lm)
    per_cell = 4 * c.n_heads * c.head_dim
    patterns = []
    for key in PATTERNS:
        cells = int(masks[key].sum())
        patterns.append({
            "key": key, "mask": masks[key], "cells": cells, "fraction_of_full": cells / full_cells,
            "fraction_of_causal": cells / causal_cells, "flops_per_layer": per_cell * cells, "own": own.get(key),
        })
    is_models = models_window is not None and window == models_window
    return {"length": length, "window": window, "window_is_models": is_models,
            "global_tokens": int(global_tokens), "stride": stride, "dilation": int(dilation),
            "real_length": real_length, "patterns": patterns, "n_heads": c.n_heads, "head_dim": c.head_dim}


def own_pattern_weights(
    lm: LoadedModel, result: GenerationResult, layer: int, head: int, kind: str = "self", *,
    cache: RunCache | None = None,
) -> dict[str, Any]:
    """The model's real weights (T, S) of one head under its own mask, over the run's final sequence.

    kind: "self" (the decoder's causal / sliding-window mask) or, for seq2seq, "encoder" (full).
    Returns weights, mask, mask_kind, query_labels, key_labels, layer, head, kind, and hidden_mass
    (the largest weight on a hidden cell: 0 when the mask is honoured).
    """
    data = attention_matrix(lm, result, layer, kind, cache=cache)
    w = data["weights"][int(head)]
    return {**data, "weights": w, "layer": int(layer), "head": int(head), "kind": kind,
            "hidden_mass": float(np.abs(w[~data["mask"]]).max()) if (~data["mask"]).any() else 0.0}
