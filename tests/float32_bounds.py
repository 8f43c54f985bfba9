"""Tolerances from float32 rounding, for tests that compare two computations of the same numbers.

A float32 sum of n terms, rounded at every addition, is off by about eps32 · sqrt(n) · Σ|terms| (the
rounding errors are independent and add like a random walk; n instead of sqrt(n) is the never-reached
worst case). So a tolerance follows the values' own magnitude (Σ|terms|, computed in the test from the
same arrays) and the number of operations, never a constant picked on one CPU.
"""

from __future__ import annotations

import numpy as np

from playground.analysis.attention_steps import attention_module
from playground.loaded import LoadedModel

EPS32 = float(np.finfo(np.float32).eps)


def sum_bound(magnitude: np.ndarray | float, n: int) -> np.ndarray:
    """How far a float32 sum of n terms with Σ|terms| = magnitude may be from the exact one."""
    return EPS32 * np.sqrt(n) * np.asarray(magnitude, dtype=np.float64)


def assert_within(actual: np.ndarray, expected: np.ndarray, bound: np.ndarray, what: str) -> None:
    """Every |actual − expected| at most its own bound; the message names the worst element."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), actual.shape)
    error = np.abs(actual - expected)
    worst = np.unravel_index(np.argmax(error - bound), error.shape) if error.size else ()
    assert np.all(error <= bound), (f"{what}: error {error[worst]:.3g} at {worst} is above its float32 bound "
                                    f"{bound[worst]:.3g} (|value| {abs(expected[worst]):.3g})")


def recompose_bound(lm: LoadedModel, s: dict) -> np.ndarray:
    """For `attention_steps`' recomposed output against the one the model recorded in the same pass.

    The model's float32 output is concat · W_O + b: a sum over h·d terms per element, whose inputs
    (each head's softmax · V) carry float32 errors relative to the same magnitudes. So the bound is
    eps32 · sqrt(h·d) · (|concat| · |W_O| + |b|), element by element.
    """
    module = attention_module(lm, s["kind"], s["layer"])
    w_o = np.abs(module.out.weight.detach().double().cpu().numpy())  # (h·d, d_model), stored (in, out)
    magnitude = np.abs(s["concat"]) @ w_o
    if module.out.bias is not None:
        magnitude = magnitude + np.abs(module.out.bias.detach().double().cpu().numpy())
    return sum_bound(magnitude, w_o.shape[0])


def float32_depth(lm: LoadedModel, kind: str, layer: int) -> int:
    """The float32 operations in series before `layer`'s queries and keys: per block one d_model-long
    reduction (attention) and one d_ff-long one (the MLP), over every block the residual stream
    has passed (the whole encoder first, for a seq2seq decoder)."""
    c = lm.config
    blocks = layer + 1 + (c.n_encoder_layers if kind != "encoder" else 0)
    return blocks * (c.d_model + c.d_ff)


def softmax_bound(w: np.ndarray, q: np.ndarray, k: np.ndarray, scale: float, depth: int) -> np.ndarray:
    """For attention weights w (T, S) = softmax(q (T, d) · k (S, d)ᵀ · scale) computed in two different
    float32 passes (the live step and the whole-sequence pass): their q and k differ by rounding
    accumulated over `depth` operations in series, so each score moves by up to
    Δs = eps32 · sqrt(depth) · Σ|q·k|·|scale|, and a weight by w_i · (Δs_i + Σ_j w_j Δs_j) (the
    softmax's derivative), plus the softmax's own float32 sum over S keys."""
    w = np.asarray(w, dtype=np.float64)
    delta = sum_bound((np.abs(q) @ np.abs(k).T) * abs(scale), depth)  # (T, S)
    return w * (delta + (w * delta).sum(axis=-1, keepdims=True)) + sum_bound(w, w.shape[-1])


def weights_bound(lm: LoadedModel, s: dict, row: int = -1) -> np.ndarray:
    """`softmax_bound` for one query row of `attention_steps` (the live step's row by default)."""
    depth = float32_depth(lm, s["kind"], s["layer"])
    return softmax_bound(s["weights"][row:][:1], s["q"][row:][:1], s["k"], s["scale"], depth)[0]
