"""Speculative decoding's figures: per drafted token the draft's q(x), the model's p(x), the acceptance probability
min(1, p/q) and the coin; and for a rejection the residual max(0, p − q) it resampled from. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from playground.steps import step_number
from playground.viz._common import display_token, finish, legend_below, short_label
from playground.viz._language import texts

_T = texts("speculative")  # this module's words, from playground/locales/


def checks_figure(rows: Sequence[Mapping[str, Any]], lang: str = "en", before: int = 0) -> go.Figure:
    """Each drafted token (rows with a draft, from `playground.app.experiments.speculative.checks`): bars q and p, a line for
    min(1, p/q), the coin as a mark (green kept, red rejected)."""
    drafted = [r for r in rows if "draft" in r]
    x = [f"{step_number(r['step'], before)}<br>{short_label(display_token(r['draft']))}" for r in drafted]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=[r["q"] for r in drafted], name=_T(lang)["q"], marker_color="#95a5a6",
                         hovertemplate=_T(lang)["q_hover"]))
    fig.add_trace(go.Bar(x=x, y=[r["p"] for r in drafted], name=_T(lang)["p"], marker_color="#2e86c1",
                         hovertemplate=_T(lang)["p_hover"]))
    fig.add_trace(go.Scatter(x=x, y=[r["accept"] for r in drafted], name=_T(lang)["accept"], mode="lines+markers",
                             line=dict(color="#e67e22"), hovertemplate=_T(lang)["accept_hover"]))
    coins = [r for r in drafted if r.get("coin") is not None]
    if coins:
        fig.add_trace(go.Scatter(
            x=[xi for xi, r in zip(x, drafted) if r.get("coin") is not None], y=[r["coin"] for r in coins],
            name=_T(lang)["coin"], mode="markers", hovertemplate=_T(lang)["coin_hover"],
            marker=dict(symbol="circle", size=11, line=dict(width=1, color="#333"),
                        color=["#27ae60" if r["accepted"] else "#e74c3c" for r in coins])))
    fig.update_xaxes(title_text=_T(lang)["step"])
    fig.update_yaxes(title_text=_T(lang)["prob"], range=[0, 1.05])
    return finish(fig, _T(lang)["checks_title"], height=440, barmode="group", legend=legend_below(440, 140))


def residual_figure(row: Mapping[str, Any], lang: str = "en", before: int = 0) -> go.Figure:
    """The top of max(0, p − q) (normalised) at a rejected draft, with p and q of each token beside it."""
    top = list(row.get("residual") or [])
    x = [short_label(display_token(r["text"])) for r in top]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=[r["residual"] for r in top], name=_T(lang)["residual"], marker_color="#7d3c98"))
    fig.add_trace(go.Scatter(x=x, y=[r["p"] for r in top], name=_T(lang)["p"], mode="markers",
                             marker=dict(color="#2e86c1")))
    fig.add_trace(go.Scatter(x=x, y=[r["q"] for r in top], name=_T(lang)["q"], mode="markers",
                             marker=dict(color="#95a5a6")))
    fig.update_yaxes(title_text=_T(lang)["prob"], rangemode="tozero")
    title = _T(lang)["residual_title"].format(step=step_number(row["step"], before), draft=display_token(row["draft"]))
    return finish(fig, title, height=360, legend=legend_below(360, 50))
