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
    LABEL_ALL,
    PROB_SCALE,
    as_array,
    finish,
    labels_or_index,
    pair_text,
    token_ticks,
)
from playground.viz._language import Texts

TEXT = {
    "weight": "weight",
    "grid_title": "Attention heads",
    "head": "head {i}",
    "kv": " · KV {kv}",
    "key": "key",
    "query": "query",
    "heatmap_title": "Attention",
    "row_title": "Attention of the generated token",
    "row_hover": "%{customdata} (pos %{x}): %{y:.3f}<extra></extra>",
    "key_token": "key token",
    "attention_weight": "attention weight",
    "summary_title": "Heads at a glance",
    "entropy_panel": "entropy (nats)",
    "distance_panel": "mean distance (tokens)",
    "nats": "nats",
    "tokens": "tokens",
    "entropy_hover": "layer %{y}, head %{x}: %{z:.3f} nats<extra></extra>",
    "distance_hover": "layer %{y}, head %{x}: %{z:.2f} tokens<extra></extra>",
    "entropy": "entropy",
    "distance": "mean distance",
    "head_axis": "head",
    "layer_axis": "layer",
}
TEXT_ZH = {
    "weight": "权重",
    "grid_title": "注意力头",
    "head": "头 {i}",
    "kv": " · KV {kv}",
    "key": "键 (key)",
    "query": "查询 (query)",
    "heatmap_title": "注意力",
    "row_title": "新生成 token 的注意力",
    "row_hover": "%{customdata}(位置 %{x}):%{y:.3f}<extra></extra>",
    "key_token": "键 token",
    "attention_weight": "注意力权重",
    "summary_title": "各注意力头一览",
    "entropy_panel": "熵 (nats)",
    "distance_panel": "平均注意力距离 (token)",
    "nats": "nats",
    "tokens": "token",
    "entropy_hover": "第 %{y} 层,头 %{x}:%{z:.3f} nats<extra></extra>",
    "distance_hover": "第 %{y} 层,头 %{x}:%{z:.2f} token<extra></extra>",
    "entropy": "熵",
    "distance": "平均距离",
    "head_axis": "头",
    "layer_axis": "层",
}
_T = Texts(TEXT, TEXT_ZH)

_MAX_GROUP_COLS = 6  # a KV group wider than this no longer fits one row of a 1280-px page
LOG_FLOOR = 1e-4  # the log colour scale shows weights from this (relative to the largest) up


def scaled_weights(w: np.ndarray, scale: str = "linear", hide_first: bool = False) -> tuple[np.ndarray, dict]:
    """Weights as drawn, and the colour-axis settings that go with them.

    A long text's first token often takes most of every row (an "attention sink"), which leaves the
    rest of a linear map nearly black. `hide_first` blanks that column and scales to the others;
    `scale="log"` colours log10(weight) from LOG_FLOOR × the largest weight up.
    """
    z = np.array(w, dtype=np.float64, copy=True)
    if hide_first and z.shape[-1] > 1:
        z[..., 0] = np.nan
    top = float(np.nanmax(z)) if np.isfinite(z).any() else 1.0
    top = top if top > 0 else 1.0
    if scale == "log":
        floor = top * LOG_FLOOR
        z = np.log10(np.clip(z, floor, None))
        lo, hi = np.log10(floor), np.log10(top)
        ticks = np.arange(np.ceil(lo), np.floor(hi) + 1)
        bar = dict(title=dict(text=_T["weight"]), tickvals=ticks.tolist(), ticktext=[f"1e{int(v)}" for v in ticks])
        return z, dict(cmin=float(lo), cmax=float(hi), colorbar=bar)
    cmax = top if hide_first else 1.0
    return z, dict(cmin=0.0, cmax=cmax, colorbar=dict(title=dict(text=_T["weight"])))


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
    title: str | None = None,
    kv_groups: int = 1,
    scale: str = "linear",
    hide_first: bool = False,
) -> go.Figure:
    """All heads of one layer as small-multiple heatmaps on one shared colour scale (see
    `scaled_weights` for `scale` and `hide_first`); hover names the query and key tokens.

    weights: (h, T, S). kv_groups: query heads per KV head (GQA); when > 1 each subplot title
    names its KV head and, if the group fits, each row of the grid is one KV head.
    """
    w = as_array(weights, 3, "weights (h, T, S)")
    raw = w
    w, axis = scaled_weights(w, scale, hide_first)
    h, T, S = w.shape
    if kv_groups < 1 or h % kv_groups:
        raise ValueError(f"kv_groups ({kv_groups}) must be a positive divisor of the head count ({h})")
    q = labels_or_index(query_labels, T, "query_labels")
    k = labels_or_index(key_labels, S, "key_labels")
    rows, cols = _grid_shape(h, kv_groups)
    titles = [_T["head"].format(i=i) + (_T["kv"].format(kv=i // kv_groups) if kv_groups > 1 else "") for i in range(h)]
    fig = make_subplots(
        rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.03, vertical_spacing=0.25 / rows
    )
    text = pair_text(q, k)
    for i in range(h):
        fig.add_trace(
            go.Heatmap(
                z=w[i],
                text=text,
                customdata=raw[i],
                coloraxis="coloraxis",
                name=titles[i],
                hovertemplate=f"{titles[i]}<br>%{{text}}: %{{customdata:.4f}}<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    # Token labels do not fit small multiples; hover carries them instead.
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    fig.update_xaxes(title_text=_T["key"], row=rows, col=1)
    fig.update_yaxes(title_text=_T["query"], row=rows, col=1)
    panel = 190 if cols <= 4 else 160
    return finish(
        fig,
        _T["grid_title"] if title is None else title,
        height=120 + rows * panel,
        coloraxis=dict(colorscale=PROB_SCALE, **axis),
    )


def attention_heatmap(
    weights: np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str | None = None,
    scale: str = "linear",
    hide_first: bool = False,
    highlight_row: int | None = None,
) -> go.Figure:
    """One head in detail: (T, S) heatmap with every token labelled on both axes (hover:
    'query → key: weight'); `scale` and `hide_first` as in `scaled_weights`; `highlight_row`
    outlines one query's row (the selected step)."""
    w = as_array(weights, 2, "weights (T, S)")
    T, S = w.shape
    q = labels_or_index(query_labels, T, "query_labels")
    k = labels_or_index(key_labels, S, "key_labels")
    z, axis = scaled_weights(w, scale, hide_first)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=pair_text(q, k),
            customdata=w,
            colorscale=PROB_SCALE,
            zmin=axis["cmin"],
            zmax=axis["cmax"],
            colorbar=axis["colorbar"],
            hovertemplate="%{text}: %{customdata:.4f}<extra></extra>",
        )
    )
    if highlight_row is not None and 0 <= highlight_row < T:
        fig.add_shape(type="rect", x0=-0.5, x1=S - 0.5, y0=highlight_row - 0.5, y1=highlight_row + 0.5,
                      line=dict(color="#e6550d", width=2), fillcolor="rgba(0,0,0,0)")
    font = dict(size=max(7, min(12, int(900 / max(T, S, 1)))))
    fig.update_xaxes(title_text=_T["key"], tickangle=-60, showgrid=False, tickfont=font, **token_ticks(k, LABEL_ALL))
    fig.update_yaxes(title_text=_T["query"], autorange="reversed", showgrid=False, tickfont=font,
                     **token_ticks(q, LABEL_ALL))
    # Square-ish cells for short sequences, taller for long ones so every label has room.
    return finish(fig, _T["heatmap_title"] if title is None else title, height=int(min(1400, max(380, 200 + 11 * T))))


def attention_row(
    weights: np.ndarray,
    key_labels: Sequence[str] | None = None,
    title: str | None = None,
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
            hovertemplate=_T["row_hover"],
        )
    )
    fig.update_xaxes(title_text=_T["key_token"], tickangle=-60, **token_ticks(k))
    fig.update_yaxes(title_text=_T["attention_weight"], range=[0, max(1e-6, float(w.max())) * 1.1])
    return finish(fig, _T["row_title"] if title is None else title, height=340)


def head_summary(entropy: np.ndarray, mean_distance: np.ndarray, title: str | None = None) -> go.Figure:
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
        rows=1, cols=2, subplot_titles=(_T["entropy_panel"], _T["distance_panel"]), horizontal_spacing=0.14
    )
    fig.add_trace(
        go.Heatmap(
            z=ent,
            colorscale=PROB_SCALE,
            colorbar=dict(title=dict(text=_T["nats"]), x=0.43, len=0.9),
            hovertemplate=_T["entropy_hover"],
            name=_T["entropy"],
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=dist,
            colorscale="Cividis",
            colorbar=dict(title=dict(text=_T["tokens"]), x=1.0, len=0.9),
            hovertemplate=_T["distance_hover"],
            name=_T["distance"],
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text=_T["head_axis"], dtick=1 if h <= 32 else None, showgrid=False)
    fig.update_yaxes(title_text=_T["layer_axis"], autorange="reversed", dtick=1 if L <= 32 else None, showgrid=False)
    return finish(fig, _T["summary_title"] if title is None else title, height=int(min(760, max(320, 140 + 16 * L))))
