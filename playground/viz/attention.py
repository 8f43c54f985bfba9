"""Attention figures: all heads of a layer, one head in detail, one token's row, per-head summary.

Convention everywhere: queries on y (first token at the top), keys on x, weights in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import (
    PROB_SCALE,
    as_array,
    finish,
    labels_or_index,
    pair_text,
    token_ticks,
)

_MAX_GROUP_COLS = 6  # a KV group wider than this no longer fits one row of a 1280-px page


def _grid_shape(n_heads: int, kv_groups: int) -> tuple[int, int]:
    # One row per KV head when the group fits a row, so heads sharing K/V line up visibly.
    if kv_groups > 1 and kv_groups <= _MAX_GROUP_COLS:
        cols = kv_groups
    else:
        cols = min(n_heads, 4 if n_heads <= 8 else _MAX_GROUP_COLS)
    return math.ceil(n_heads / cols), cols


def attention_heads_grid(
    weights: np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str = "Attention heads",
    kv_groups: int = 1,
) -> go.Figure:
    """All heads of one layer as small-multiple heatmaps on one shared 0..1 colour scale.

    weights: (h, T, S). kv_groups: query heads per KV head (GQA); when > 1 each subplot title
    names its KV head and, if the group fits, each row of the grid is one KV head.
    """
    w = as_array(weights, 3, "weights (h, T, S)")
    h, T, S = w.shape
    if kv_groups < 1 or h % kv_groups:
        raise ValueError(f"kv_groups ({kv_groups}) must be a positive divisor of the head count ({h})")
    q = labels_or_index(query_labels, T, "query_labels")
    k = labels_or_index(key_labels, S, "key_labels")
    rows, cols = _grid_shape(h, kv_groups)
    titles = [f"head {i}" + (f" · KV {i // kv_groups}" if kv_groups > 1 else "") for i in range(h)]
    fig = make_subplots(
        rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.03, vertical_spacing=0.25 / rows
    )
    text = pair_text(q, k)
    for i in range(h):
        fig.add_trace(
            go.Heatmap(
                z=w[i],
                text=text,
                coloraxis="coloraxis",
                name=titles[i],
                hovertemplate=f"{titles[i]}<br>%{{text}}: %{{z:.3f}}<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    # Token labels do not fit small multiples; hover carries them instead.
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    fig.update_xaxes(title_text="key", row=rows, col=1)
    fig.update_yaxes(title_text="query", row=rows, col=1)
    panel = 190 if cols <= 4 else 160
    return finish(
        fig,
        title,
        height=120 + rows * panel,
        coloraxis=dict(colorscale=PROB_SCALE, cmin=0.0, cmax=1.0, colorbar=dict(title=dict(text="weight"))),
    )


def attention_heatmap(
    weights: np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str = "Attention",
) -> go.Figure:
    """One head in detail: (T, S) heatmap with tokens on both axes; hover 'query → key: p'."""
    w = as_array(weights, 2, "weights (T, S)")
    T, S = w.shape
    q = labels_or_index(query_labels, T, "query_labels")
    k = labels_or_index(key_labels, S, "key_labels")
    fig = go.Figure(
        go.Heatmap(
            z=w,
            text=pair_text(q, k),
            colorscale=PROB_SCALE,
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title=dict(text="weight")),
            hovertemplate="%{text}: %{z:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="key", tickangle=-60, showgrid=False, **token_ticks(k))
    fig.update_yaxes(title_text="query", autorange="reversed", showgrid=False, **token_ticks(q))
    # Square-ish cells for short sequences, capped so long prompts stay on one screen.
    return finish(fig, title, height=int(min(720, max(360, 200 + 18 * T))))


def attention_row(
    weights: np.ndarray,
    key_labels: Sequence[str] | None = None,
    title: str = "Attention of the generated token",
) -> go.Figure:
    """One query's attention over all keys as bars. weights: (S,)"""
    w = as_array(weights, 1, "weights (S,)")
    k = labels_or_index(key_labels, w.shape[0], "key_labels")
    fig = go.Figure(
        go.Bar(
            x=np.arange(w.shape[0]),
            y=w,
            customdata=k,
            # Shaded relative to the largest weight, starting from a visible blue (small bars stay legible).
            marker=dict(color=w, colorscale="Blues", cmin=-0.3 * max(float(w.max()), 1e-6),
                        cmax=max(float(w.max()), 1e-6)),
            hovertemplate="%{customdata} (pos %{x}): %{y:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="key token", tickangle=-60, **token_ticks(k))
    fig.update_yaxes(title_text="attention weight", range=[0, max(1e-6, float(w.max())) * 1.1])
    return finish(fig, title, height=340)


def head_summary(entropy: np.ndarray, mean_distance: np.ndarray, title: str = "Heads at a glance") -> go.Figure:
    """Layers × heads maps of attention entropy (nats) and mean attention distance (tokens).

    entropy, mean_distance: (L, h), e.g. from `attention_stats`. Low entropy = focused head;
    small distance = local head.
    """
    ent = as_array(entropy, 2, "entropy (L, h)")
    dist = as_array(mean_distance, 2, "mean_distance (L, h)")
    if ent.shape != dist.shape:
        raise ValueError(f"entropy {ent.shape} and mean_distance {dist.shape} must have the same (L, h) shape")
    L, h = ent.shape
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("entropy (nats)", "mean distance (tokens)"), horizontal_spacing=0.14
    )
    fig.add_trace(
        go.Heatmap(
            z=ent,
            colorscale=PROB_SCALE,
            colorbar=dict(title=dict(text="nats"), x=0.43, len=0.9),
            hovertemplate="layer %{y}, head %{x}: %{z:.3f} nats<extra></extra>",
            name="entropy",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=dist,
            colorscale="Cividis",
            colorbar=dict(title=dict(text="tokens"), x=1.0, len=0.9),
            hovertemplate="layer %{y}, head %{x}: %{z:.2f} tokens<extra></extra>",
            name="mean distance",
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="head", dtick=1 if h <= 32 else None, showgrid=False)
    fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if L <= 32 else None, showgrid=False)
    return finish(fig, title, height=int(min(760, max(320, 140 + 16 * L))))
