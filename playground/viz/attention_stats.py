"""Numeric summaries of attention weights (numpy only), used by the head-summary figures.

Weights are softmax rows: shape (..., T, S) with T queries and S keys; each row sums to 1.
With a KV cache the T queries are the last T of S positions, so query i sits at S - T + i.
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def _weights(weights: np.ndarray, min_ndim: int = 2) -> np.ndarray:
    arr = np.asarray(weights, dtype=np.float64)
    if arr.ndim < min_ndim:
        raise ValueError(f"attention weights need at least {min_ndim} dims (..., T, S), got shape {arr.shape}")
    if arr.shape[-2] > arr.shape[-1]:
        raise ValueError(
            f"attention weights have more queries ({arr.shape[-2]}) than keys ({arr.shape[-1]}); "
            "pass (..., T, S) with queries on the second-to-last axis"
        )
    return arr


def attention_entropy(weights: np.ndarray) -> np.ndarray:
    """Entropy in nats of each query's attention row, averaged over queries. (..., T, S) -> (...)

    Zero probabilities (masked keys) contribute nothing, as 0·log 0 = 0. A uniform row over S
    keys gives log(S); a one-hot row gives 0.
    """
    p = _weights(weights)
    logp = np.log(np.where(p > 0, p, 1.0))  # log(1) = 0 where p == 0, so masked keys add nothing
    return -(p * logp).sum(axis=-1).mean(axis=-1)


def mean_attention_distance(weights: np.ndarray) -> np.ndarray:
    """Expected |query position - key position| under the weights, averaged over queries.

    (..., T, S) -> (...). Query i is at absolute position S - T + i (the last T positions), so a
    decode step (T = 1) measures how far back the new token looks.
    """
    p = _weights(weights)
    T, S = p.shape[-2:]
    query_pos = np.arange(S - T, S)[:, None]  # (T, 1)
    key_pos = np.arange(S)[None, :]  # (1, S)
    return (p * np.abs(query_pos - key_pos)).sum(axis=-1).mean(axis=-1)


def aggregate_heads(weights: np.ndarray, how: Literal["mean", "max"] = "mean") -> np.ndarray:
    """Combine all heads of a layer into one (T, S) map. (h, T, S) -> (T, S)"""
    arr = _weights(weights, min_ndim=3)
    if arr.ndim != 3:
        raise ValueError(f"aggregate_heads expects (h, T, S), got shape {arr.shape}")
    if how == "mean":
        return arr.mean(axis=0)
    if how == "max":
        return arr.max(axis=0)
    raise ValueError(f"how must be 'mean' or 'max', got {how!r}")


def group_by_kv_head(weights: np.ndarray, kv_groups: int) -> np.ndarray:
    """Mean over the query heads that share a KV head (GQA). (h, T, S) -> (h // kv_groups, T, S)

    kv_groups is the number of query heads per KV head (config.kv_groups); head i uses KV head
    i // kv_groups, as in the model's attention.
    """
    arr = _weights(weights, min_ndim=3)
    if arr.ndim != 3:
        raise ValueError(f"group_by_kv_head expects (h, T, S), got shape {arr.shape}")
    h = arr.shape[0]
    if kv_groups < 1 or h % kv_groups:
        raise ValueError(f"kv_groups ({kv_groups}) must be a positive divisor of the head count ({h})")
    return arr.reshape(h // kv_groups, kv_groups, *arr.shape[1:]).mean(axis=1)
