"""The cache-reuse lab's figures: CacheBlend's quality and work against r, naive reuse's K/V deviation per layer, which
positions the blend recomputes, and a cached key moved by one more rotation. Pure functions of plain numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from playground.viz._common import display_token, finish, legend_below, wrap_title
from playground.viz._language import texts

_T = texts("reuse")  # this module's words, from playground/locales/
CHUNK_COLOURS = ("#5dade2", "#58d68d", "#f5b041", "#af7ac5", "#ec7063", "#45b39d")
PICKED = "#c0392b"


def quality_figure(rows: Sequence[Mapping[str, Any]], lang: str = "en") -> go.Figure:
    """Per r (% of positions recomputed): the mean KL(full ‖ blend) along the answer (left axis), the top-1 agreement
    and the share of the prefill's work done (right axis, %)."""
    w = _T(lang)
    rs = [row["r"] for row in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=rs, y=[row["kl_mean"] for row in rows], name=w["kl"], mode="lines+markers",
                             line=dict(color="#2e86c1"), hovertemplate=w["kl_hover"]))
    fig.add_trace(go.Scatter(x=rs, y=[100 * row["top1"] for row in rows], name=w["top1"], mode="lines+markers",
                             yaxis="y2", line=dict(color="#27ae60"), hovertemplate=w["pct_hover"]))
    fig.add_trace(go.Scatter(x=rs, y=[100 * row["share"] for row in rows], name=w["work"], mode="lines+markers",
                             yaxis="y2", line=dict(color="#7f8c8d", dash="dash"), hovertemplate=w["pct_hover"]))
    fig.update_layout(yaxis=dict(title_text=w["kl_axis"], rangemode="tozero"),
                      yaxis2=dict(title_text="%", overlaying="y", side="right", range=[0, 105]))
    fig.update_xaxes(title_text=w["r"], range=[-3, 103])
    return finish(fig, w["quality_title"], height=400, legend=legend_below(400))


def layers_figure(deviation: Sequence[float], lang: str = "en") -> go.Figure:
    """Naive reuse's relative K/V deviation from the full prefill, per layer (0: the same numbers)."""
    w = _T(lang)
    fig = go.Figure(go.Bar(x=list(range(len(deviation))), y=list(deviation), marker_color="#e67e22",
                           hovertemplate=w["layer_hover"]))
    fig.update_xaxes(title_text=w["layer"], dtick=1 if len(deviation) <= 16 else None)
    fig.update_yaxes(title_text=w["deviation"], rangemode="tozero")
    return finish(fig, w["layers_title"], height=320)


def positions_figure(dev: Sequence[float], token_texts: Sequence[str], starts: Sequence[int], picked: Sequence[int],
                     r: float, lang: str = "en") -> go.Figure:
    """Each reused position's K/V deviation at the check layer, coloured by its chunk; the ones the blend at `r` %
    recomputes drawn in red."""
    w = _T(lang)
    n = len(dev)
    chosen = set(picked)
    chunk = [sum(1 for s in starts if s <= i) - 1 for i in range(n)]
    colours = [PICKED if i in chosen else CHUNK_COLOURS[chunk[i] % len(CHUNK_COLOURS)] for i in range(n)]
    labels = [display_token(t) for t in token_texts[:n]]
    fig = go.Figure(go.Bar(x=list(range(n)), y=list(dev), marker_color=colours,
                           customdata=[[labels[i], chunk[i] + 1, w["yes"] if i in chosen else w["no"]] for i in range(n)],
                           hovertemplate=w["position_hover"]))
    for s in starts[1:]:
        fig.add_vline(x=s - 0.5, line_dash="dot", line_color="#555")
    fig.update_xaxes(title_text=w["position"])
    fig.update_yaxes(title_text=w["deviation_sq"], rangemode="tozero")
    return finish(fig, wrap_title(w["positions_title"].format(r=r, k=len(chosen), n=n)), height=340)


def rotation_figure(rotation: Mapping[str, Any], lang: str = "en") -> go.Figure:
    """One cached key's rotary pairs (x_i, x_{i+r/2}) as arrows: as cached at position m, and turned by (n − m)·θ_i to
    position n. Each pair turns by its own angle; lengths never change (a rotation)."""
    w = _T(lang)
    m, n = rotation["from"], rotation["to"]
    fig = go.Figure()
    for j, (pair, theta) in enumerate(zip(rotation["pairs"], rotation["theta"])):
        colour = CHUNK_COLOURS[j % len(CHUNK_COLOURS)]
        x0, y0, x1, y1 = pair
        turn = math.degrees((n - m) * theta) % 360
        for (x, y), dash, at in (((x0, y0), "dot", m), ((x1, y1), "solid", n)):
            fig.add_trace(go.Scatter(x=[0, x], y=[0, y], mode="lines+markers", line=dict(color=colour, dash=dash),
                                     marker=dict(size=[0, 9]),
                                     name=w["pair"].format(i=rotation["index"][j], at=at, turn=turn if at == n else 0),
                                     hovertemplate=w["pair_hover"].format(turn=turn)))
    reach = max(1e-6, *(abs(v) for pair in rotation["pairs"] for v in pair)) * 1.1
    fig.update_xaxes(range=[-reach, reach], zeroline=True, title_text="x_i", constrain="domain")
    fig.update_yaxes(range=[-reach, reach], zeroline=True, scaleanchor="x", title_text="x_{i+r/2}")
    return finish(fig, wrap_title(w["rotation_title"].format(m=m, n=n)), height=420, legend=legend_below(420))
