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
    token_axis,
)
from playground.viz._language import texts

_T = texts("attention")  # this module's words, from playground/locales/

_MAX_GROUP_COLS = 6  # a KV group wider than this no longer fits one row of a 1280-px page
LOG_FLOOR = 1e-4  # the log colour scale shows weights from this (relative to the largest) up
# Below this typical row peak, most rows would use less than half of a 0-1 colour scale: cap it there.
CAP_BELOW = 0.5


def typical_peak(w: np.ndarray) -> float:
    """The median over query rows of each row's largest weight outside the first key, in (0, 1].

    On a real model with a long text the first token takes most of every row (an "attention sink"),
    and a row spreads the rest over hundreds of keys, so its strongest other key holds ~0.1: a colour
    scale up to 1 leaves all of that dark. Rows that see only the first key (the first query) and
    masked keys (0) have no say. A map of one key gives 1.
    """
    w = np.asarray(w, dtype=np.float64)
    if w.shape[-1] < 2:
        return 1.0
    rest = w[..., 1:].reshape(-1, w.shape[-1] - 1)
    peaks = rest.max(axis=1)
    peaks = peaks[peaks > 0]
    return float(min(1.0, np.median(peaks))) if peaks.size else 1.0


def _at_least_bar(cmax: float, lang: str = "en") -> dict:
    """A colour bar from 0 whose top tick says the colour saturates there: '≥ 0.12'."""
    ticks = [0.0, cmax / 2, cmax]
    text = ["0", f"{cmax / 2:.2g}", _T(lang)["at_least"].format(v=f"{cmax:.2g}")]
    # The title along the bar: above it, it would touch the "≥" of the top tick.
    return dict(title=dict(text=_T(lang)["weight"], side="right"), tickvals=ticks, ticktext=text, thickness=14)


def scaled_weights(w: np.ndarray, scale: str = "linear", hide_first: bool = False,
                   lang: str = "en") -> tuple[np.ndarray, dict]:
    """Weights as drawn, and the colour-axis settings that go with them.

    `scale="linear"` colours weights from 0 to 1, unless the typical row's strongest key
    (`typical_peak`) is below CAP_BELOW: then from 0 up to that peak (~0.1 on a long text), and
    everything above it (the first token's sink, short early rows) saturates, as the colour bar's
    "≥" says.
    `hide_first` blanks the first key's column. `scale="log"` colours log10(weight) from LOG_FLOOR
    × the largest weight up. Hover always shows the weight itself.
    """
    z = np.array(w, dtype=np.float64, copy=True)
    if hide_first and z.shape[-1] > 1:
        z[..., 0] = np.nan
    top = float(np.nanmax(z)) if np.isfinite(z).any() else 1.0
    top = top if top > 0 else 1.0
    if scale == "linear":
        cmax = typical_peak(w)
        if cmax < CAP_BELOW and cmax < top:
            return z, dict(cmin=0.0, cmax=cmax, colorbar=_at_least_bar(cmax, lang=lang))
        # Rows peak high enough: the plain probability scale (with the sink hidden, up to the largest shown).
        return z, dict(cmin=0.0, cmax=top if hide_first else 1.0, colorbar=dict(title=dict(text=_T(lang)["weight"]),
                                                                                thickness=14))
    if scale == "log":
        floor = top * LOG_FLOOR
        z = np.log10(np.clip(z, floor, None))
        lo, hi = np.log10(floor), np.log10(top)
        ticks = np.arange(np.ceil(lo), np.floor(hi) + 1)
        bar = dict(title=dict(text=_T(lang)["weight"]), tickvals=ticks.tolist(),
                   ticktext=[f"1e{int(v)}" for v in ticks])
        return z, dict(cmin=float(lo), cmax=float(hi), colorbar=bar)
    raise ValueError(f"scale {scale!r}: use 'linear' or 'log'")


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
    hide_first: bool = False, lang: str = "en",
) -> go.Figure:
    """All heads of one layer as small-multiple heatmaps on one shared colour scale (see
    `scaled_weights` for `scale` and `hide_first`); hover names the query and key tokens.

    weights: (h, T, S). kv_groups: query heads per KV head (GQA); when > 1 each subplot title
    names its KV head and, if the group fits, each row of the grid is one KV head.
    """
    w = as_array(weights, 3, "weights (h, T, S)")
    raw = w
    w, axis = scaled_weights(w, scale, hide_first, lang=lang)
    h, T, S = w.shape
    if kv_groups < 1 or h % kv_groups:
        raise ValueError(f"kv_groups ({kv_groups}) must be a positive divisor of the head count ({h})")
    q = labels_or_index(query_labels, T, "query_labels")
    k = labels_or_index(key_labels, S, "key_labels")
    rows, cols = _grid_shape(h, kv_groups)
    # The KV head on a second line: one line of "head 0 · KV 0" overlaps its neighbour at 400 px.
    titles = [_T(lang)["head"].format(i=i) + ("<br>" + _T(lang)["kv"].format(kv=i // kv_groups) if kv_groups > 1 else "")
              for i in range(h)]
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
                hovertemplate=f"{titles[i].replace('<br>', ' · ')}<br>%{{text}}: %{{customdata:.4f}}<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    # Token labels do not fit small multiples; hover carries them instead.
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    fig.update_xaxes(title_text=_T(lang)["key"], row=rows, col=1)
    fig.update_yaxes(title_text=_T(lang)["query"], row=rows, col=1)
    fig.update_annotations(font_size=12)  # the subplot titles
    panel = 190 if cols <= 4 else 160
    return finish(
        fig,
        _T(lang)["grid_title"] if title is None else title,
        height=140 + rows * panel,
        coloraxis=dict(colorscale=PROB_SCALE, **axis),
        margin=dict(t=90),  # the first row's two-line subplot titles stay clear of the figure's title
    )


def attention_heatmap(
    weights: np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str | None = None,
    scale: str = "linear",
    hide_first: bool = False,
    highlight_row: int | None = None, lang: str = "en",
) -> go.Figure:
    """One head in detail: (T, S) heatmap with tokens on both axes, as many as fit the drawn size
    (`token_axis`; hover names every 'query → key: weight'); `scale` and `hide_first` as in
    `scaled_weights`; `highlight_row` outlines one query's row (the selected step)."""
    w = as_array(weights, 2, "weights (T, S)")
    T, S = w.shape
    q = labels_or_index(query_labels, T, "query_labels")
    k = labels_or_index(key_labels, S, "key_labels")
    z, axis = scaled_weights(w, scale, hide_first, lang=lang)
    x, x_axis = token_axis(k)
    y, y_axis = token_axis(q)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=x,
            y=y,
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
    font = dict(size=12 if x is None and y is None else 10)
    fig.update_xaxes(title_text=_T(lang)["key"], tickangle=-60, showgrid=False, tickfont=font, **x_axis)
    fig.update_yaxes(title_text=_T(lang)["query"], autorange="reversed", showgrid=False, tickfont=font, **y_axis)
    # Square-ish cells for short sequences; long ones grow to fit a screen (labels are thinned, not squeezed).
    return finish(fig, _T(lang)["heatmap_title"] if title is None else title, height=int(min(900, max(380,
                                                                                                      200 + 6 * T))))


def row_top(w: np.ndarray) -> float:
    """The bar height one query's row is drawn up to: its largest weight, unless the first key (a sink)
    holds more than twice every other key's weight; then the largest other weight, and the sink's bar
    is clipped (so the other keys are not flattened to a line)."""
    w = np.asarray(w, dtype=np.float64)
    rest = float(w[1:].max()) if w.shape[0] > 1 else 0.0
    if rest > 0 and w[0] > 2 * rest:
        return rest
    return max(1e-6, float(w.max()))


def attention_row(
    weights: np.ndarray,
    key_labels: Sequence[str] | None = None,
    title: str | None = None, lang: str = "en",
) -> go.Figure:
    """One query's attention over all keys as bars. weights: (S,)"""
    w = as_array(weights, 1, "weights (S,)")
    k = labels_or_index(key_labels, w.shape[0], "key_labels")
    x, x_axis = token_axis(k)
    top = row_top(w)
    fig = go.Figure(
        go.Bar(
            x=np.arange(w.shape[0]) if x is None else x,
            y=w,
            customdata=k,
            # Shaded relative to the drawn top, starting from a visible blue (small bars stay legible).
            marker=dict(color=w, colorscale="Blues", cmin=-0.3 * top, cmax=top),
            hovertemplate=_T(lang)["row_hover"],
        )
    )
    fig.update_xaxes(title_text=_T(lang)["key_token"], tickangle=-60, **x_axis)
    fig.update_yaxes(title_text=_T(lang)["attention_weight"], range=[0, top * 1.1])
    if w.shape[0] > 1 and w[0] > top:  # the first token's sink, clipped: its weight written above the bar
        fig.add_annotation(x=0 if x is None else x[0], y=top * 1.1, text=f"{w[0]:.2f} ↑", showarrow=False,
                           yanchor="bottom", xanchor="left", font=dict(size=11, color="#08519c"))
    return finish(fig, _T(lang)["row_title"] if title is None else title, height=340)


def head_summary(entropy: np.ndarray, mean_distance: np.ndarray, title: str | None = None,
                 lang: str = "en") -> go.Figure:
    """Layers × heads maps of attention entropy (nats) and mean attention distance (tokens).

    entropy, mean_distance: (L, h), e.g. from `attention_stats`. Low entropy = focused head;
    small distance = local head.
    """
    ent = as_array(entropy, 2, "entropy (L, h)")
    dist = as_array(mean_distance, 2, "mean_distance (L, h)")
    if ent.shape != dist.shape:
        raise ValueError(f"entropy {ent.shape} and mean_distance {dist.shape} must have the same (L, h) shape")
    L, h = ent.shape
    # Side by side on one shared layer axis (ticks on the left only), each colour bar lying under its own
    # panel and titled with what it measures: nothing overlaps however narrow the page (400 px included).
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06)
    bar = dict(orientation="h", y=-0.1, yanchor="top", len=0.47, thickness=12, title=dict(side="top"))
    for col, (z, scale, panel, hover, name) in enumerate((
        (ent, PROB_SCALE, "entropy_panel", "entropy_hover", "entropy"),
        (dist, "Cividis", "distance_panel", "distance_hover", "distance"),
    ), start=1):
        fig.add_trace(
            go.Heatmap(z=z, colorscale=scale, hovertemplate=_T(lang)[hover], name=_T(lang)[name],
                       colorbar={**bar, "x": 0.0 if col == 1 else 1.0, "xanchor": "left" if col == 1 else "right",
                                 "title": dict(text=_T(lang)[panel], side="top")}),
            row=1, col=col,
        )
    fig.update_xaxes(title_text=_T(lang)["head_axis"], dtick=1 if h <= 32 else None, showgrid=False, side="top")
    fig.update_yaxes(autorange="reversed", dtick=1 if L <= 32 else None, showgrid=False)
    fig.update_yaxes(title_text=_T(lang)["layer_axis"], row=1, col=1)
    # Every layer gets a row at least 14 px tall (30 layers: 620 px), plus the colour bars below.
    return finish(fig, _T(lang)["summary_title"] if title is None else title, height=int(max(340, 200 + 14 * L)),
                  margin=dict(l=60, r=20, t=100, b=110))
