"""The precision what-if's figures: per step the KL between float32's and the precision's next-token distributions
with the steps where their top token differs, and per layer the residual stream's relative error at the step
compared. Pure functions of `PrecisionBranch.to_dict()` numbers."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.steps import step_number
from playground.viz._common import display_token, finish, legend_below, short_label
from playground.viz._language import texts

_T = texts("precision")  # this module's words, from playground/locales/


def steps_figure(kl: Sequence[float], top1: Sequence[bool], token_texts: Sequence[str], label: str, lang: str = "en",
                 before: int = 0) -> go.Figure:
    """KL(float32 ‖ `label`) per step (bars, teacher-forced on float32's tokens) and a mark where the top token
    differs."""
    if not (len(kl) == len(top1) == len(token_texts)):
        raise ValueError(f"{len(kl)} steps need as many top-1 flags and token texts")
    steps = [step_number(i, before) for i in range(len(kl))]
    labels = [display_token(t) for t in token_texts]
    fig = go.Figure(go.Bar(x=steps, y=list(kl), name=_T(lang)["kl"].format(label=label), marker_color="#7d3c98",
                           customdata=labels, hovertemplate=_T(lang)["kl_hover"]))
    flips = [i for i, same in enumerate(top1) if not same]
    if flips:
        fig.add_trace(go.Scatter(x=[steps[i] for i in flips], y=[kl[i] for i in flips], mode="markers",
                                 marker=dict(symbol="x", size=12, color="#e74c3c"), name=_T(lang)["flip"],
                                 hovertemplate=_T(lang)["flip_hover"]))
    fig.update_xaxes(title_text=_T(lang)["step"], tickmode="array", tickvals=steps,
                     ticktext=[f"{i}<br>{short_label(t)}" for i, t in zip(steps, labels)])
    fig.update_yaxes(title_text=_T(lang)["kl_axis"], rangemode="tozero")
    return finish(fig, _T(lang)["steps_title"].format(label=label), height=400, legend=legend_below(400, 140))


def layers_figure(errors: Sequence[float], entry: int | None, step: int, label: str, lang: str = "en",
                  before: int = 0) -> go.Figure:
    """‖h_prec − h_fp32‖ / ‖h_fp32‖ after the embedding and after each block at `step` (0-based), the layer where
    it grows most marked."""
    names = [_T(lang)["embedding"]] + [_T(lang)["block"].format(i=i) for i in range(len(errors) - 1)]
    fig = go.Figure(go.Scatter(x=names, y=list(errors), mode="lines+markers", line=dict(color="#2e86c1"),
                               name=_T(lang)["error"], hovertemplate=_T(lang)["error_hover"]))
    if entry is not None and 0 <= entry < len(errors):
        fig.add_trace(go.Scatter(x=[names[entry]], y=[errors[entry]], mode="markers", name=_T(lang)["entry"],
                                 marker=dict(size=14, color="#e67e22", symbol="diamond")))
    fig.update_xaxes(title_text=_T(lang)["layer"])
    fig.update_yaxes(title_text=_T(lang)["error_axis"], rangemode="tozero")
    return finish(fig, _T(lang)["layers_title"].format(label=label, step=step_number(step, before)), height=380,
                  legend=legend_below(380))
