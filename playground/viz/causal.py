"""The causal lab's figures: why a token won (direct logit attribution), what an edit changed per
step (divergence), and which heads of a layer matter (the head sweep). Pure functions of the data
that `playground.analysis.attribution` / `divergence` return (their `to_dict()` forms)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.steps import step_number
from playground.viz._common import SIGNED_SCALE, as_array, display_token, finish, short_label
from playground.viz._language import texts

_T = texts("causal")  # this module's words, from playground/locales/


def _part_names(data: Mapping[str, Any], lang: str = "en") -> list[tuple[str, float]]:
    """Every part shown, named in the current language, with its value."""
    heads = as_array(data["heads"], 2, "heads")
    named = [(_T(lang)["head_name"].format(layer=i, head=h), heads[i, h]) for i, h in np.ndindex(heads.shape)]
    if data.get("cross_heads") is not None:
        cross = as_array(data["cross_heads"], 2, "cross_heads")
        named += [(_T(lang)["cross_name"].format(layer=i, head=h), cross[i, h]) for i, h in np.ndindex(cross.shape)]
    named += [(_T(lang)["mlp"].format(i=i), v) for i, v in enumerate(as_array(data["mlps"], 1, "mlps"))]
    named += [(_T(lang)["other"].get(k, k), v) for k, v in data.get("other", {}).items()]
    return [(n, float(v)) for n, v in named]


def attribution_figure(data: Mapping[str, Any], token: str, versus: str | None = None, lang: str = "en") -> go.Figure:
    """Layer × head heat map of each head's share (cross-attention heads beside it for seq2seq), and
    bars for each MLP and the other parts. `data`: `Attribution.to_dict()`; token texts as decoded."""
    heads = as_array(data["heads"], 2, "heads")
    mlps = as_array(data["mlps"], 1, "mlps")
    cross = None if data.get("cross_heads") is None else as_array(data["cross_heads"], 2, "cross_heads")
    if len(mlps) != heads.shape[0]:
        raise ValueError(f"mlps has {len(mlps)} layers but heads has {heads.shape[0]}; pass one MLP per layer")
    maps = [(heads, _T(lang)["self_heads"])] + ([(cross, _T(lang)["cross_heads"])] if cross is not None else [])
    titles = [t for _, t in maps] + [_T(lang)["mlps_and_rest"]]
    # One figure per row (heat maps above the bars), so that it reads the same in a phone's width.
    n_bars = len(mlps) + len(data.get("other", {}))
    rows = [max(heads.shape[0], 3)] * len(maps) + [max(n_bars * 1.2, 3)]  # ≥ 16 px a bar: every bar keeps its label
    height = min(max(160 + 14 * sum(rows) + 90 * len(rows), 460), 1800)
    fig = make_subplots(rows=len(rows), cols=1, subplot_titles=titles, vertical_spacing=min(0.3, 100 / height),
                        row_heights=[r / sum(rows) for r in rows])
    # The heads' own scale: one MLP can push ten times harder than any head, and a scale shared with the bars would
    # leave every head near white. The bars below have their own axis.
    bound = max(float(np.abs(a).max()) if a.size else 0.0 for a in [heads] + ([cross] if cross is not None else []))
    bound = bound or 1.0
    for row, (z, _) in enumerate(maps, start=1):
        fig.add_trace(go.Heatmap(
            z=z, x=list(range(z.shape[1])), y=list(range(z.shape[0])), colorscale=SIGNED_SCALE, zmid=0.0,
            zmin=-bound, zmax=bound, xgap=1, ygap=1, showscale=row == 1,
            colorbar=dict(title=_T(lang)["share"], len=rows[0] / sum(rows), y=1.0, yanchor="top", thickness=12),
            hovertemplate=_T(lang)["head_hover"],
        ), row=row, col=1)
        fig.update_xaxes(title_text=_T(lang)["head_axis"], dtick=1, row=row, col=1)
        fig.update_yaxes(title_text=_T(lang)["layer_axis"], dtick=max(1, z.shape[0] // 10), autorange="reversed",
                         row=row,
                         col=1)
    names = [_T(lang)["mlp"].format(i=i) for i in range(len(mlps))]
    names += [_T(lang)["other"].get(k, k) for k in data.get("other", {})]
    values = list(mlps) + list(data.get("other", {}).values())
    fig.add_trace(go.Bar(
        x=values, y=names, orientation="h", marker_color=["#c0392b" if v < 0 else "#2471a3" for v in values],
        hovertemplate=_T(lang)["bar_hover"], showlegend=False,
    ), row=len(rows), col=1)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=names, ticktext=names, row=len(rows), col=1)
    fig.update_xaxes(title_text=_T(lang)["share"], zeroline=True, row=len(rows), col=1)
    tok = short_label(display_token(token), 16)
    if versus is None:
        title = _T(lang)["title"].format(token=tok, logit=float(data["logit"]))
    else:
        title = _T(lang)["title_versus"].format(token=tok, versus=short_label(display_token(versus), 16),
                                          logit=float(data["logit"]))
    return finish(fig, title, height=height).update_layout(margin=dict(l=110, r=30, t=90, b=50))


def attribution_caption(data: Mapping[str, Any], token: str, lang: str = "en") -> str:
    """Markdown: the sum check, the largest push up and down, and what 'direct' leaves out."""
    named = _part_names(data, lang=lang)
    top = max(named, key=lambda p: p[1])
    bottom = min(named, key=lambda p: p[1])
    return _T(lang)["caption"].format(token=display_token(token), total=float(data["total"]),
                                      logit=float(data["logit"]),
                                top=top[0], top_value=top[1], bottom=bottom[0], bottom_value=bottom[1])


def divergence_figure(data: Mapping[str, Any], token_texts: Sequence[str], lang: str = "en",
                      before: int = 0) -> go.Figure:
    """KL per step (bars) and the edited model's probability of the original token (line), with a marker
    where the texts part. `data`: `Divergence.to_dict()`; token_texts: the original tokens as text."""
    kl = as_array(data["kl"], 1, "kl")
    prob = as_array(data["prob"], 1, "prob")
    rank = list(data["rank"])
    if len(token_texts) != len(kl) or len(prob) != len(kl) or len(rank) != len(kl):
        raise ValueError(f"kl has {len(kl)} steps; pass as many probabilities, ranks and token texts")
    steps = [step_number(i, before) for i in range(len(kl))]  # as the page counts steps
    labels = [display_token(t) for t in token_texts]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=steps, y=kl, name=_T(lang)["div_kl"], marker_color="#7d3c98",
                         customdata=np.array([labels, rank], dtype=object).T, hovertemplate=_T(lang)["div_hover"]))
    fig.add_trace(go.Scatter(x=steps, y=prob, name=_T(lang)["div_prob"], mode="lines+markers",
                             line=dict(color="#e67e22"),
                             hovertemplate=_T(lang)["div_prob_hover"]), secondary_y=True)
    first = data.get("first_difference")
    if first is not None:
        fig.add_vline(x=step_number(first, before) - 0.5, line_dash="dash", line_color="grey")
        fig.add_annotation(x=step_number(first, before) - 0.5, y=1.0, yref="paper", text=_T(lang)["div_first"],
                           showarrow=False,
                           xanchor="left", font=dict(color="grey"))
    ticks = [short_label(t) for t in labels]
    fig.update_xaxes(title_text=_T(lang)["div_step"], tickmode="array", tickvals=steps,
                     ticktext=[f"{i}<br>{t}" for i, t in zip(steps, ticks)])
    fig.update_yaxes(title_text=_T(lang)["div_kl_axis"], rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text=_T(lang)["div_prob_axis"], range=[0, 1.02], secondary_y=True)
    fig = finish(fig, _T(lang)["div_title"], height=400, legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"))
    return fig.update_layout(margin=dict(l=70, r=60, t=100, b=70))


def head_sweep_figure(data: Mapping[str, Any], token: str, lang: str = "en") -> go.Figure:
    """Heads of one layer from the largest fall of the chosen token's log-probability to the smallest.
    `data`: `HeadSweep.to_dict()` (heads not reached yet are listed last as not run)."""
    drops = as_array(data["logprob_drop"], 1, "logprob_drop")
    order = [int(h) for h in data.get("order", range(len(drops)))]
    if sorted(order) != list(range(len(drops))):
        raise ValueError(f"order must list each of the {len(drops)} heads once")
    names = [_T(lang)["sweep_head"].format(head=h) for h in order]
    values = [0.0 if np.isnan(drops[h]) else float(drops[h]) for h in order]
    text = [_T(lang)["sweep_pending"] if np.isnan(drops[h]) else f"{drops[h]:+.3f}" for h in order]
    fig = go.Figure(go.Bar(
        x=values, y=names, orientation="h", text=text, textposition="auto",
        marker_color=["#c0392b" if v > 0 else "#2471a3" for v in values], hovertemplate=_T(lang)["sweep_hover"],
    ))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text=_T(lang)["sweep_axis"], zeroline=True)
    title = _T(lang)["sweep_title"].format(layer=int(data["layer"]), token=short_label(display_token(token), 16))
    return finish(fig, title, height=min(160 + 26 * len(drops), 900))
