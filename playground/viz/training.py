"""The training recipe a checkpoint stores: the learning-rate schedule and, when stored, the loss
curves (from `playground.analysis.training.training_view`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import empty_figure, finish
from playground.viz._language import texts

_T = texts("training")  # this module's words, from playground/locales/


def training_figure(view: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """The lr schedule; below it the loss curves (and evaluations) when the checkpoint stores them."""
    if not view.get("available"):
        return empty_figure(_T(lang)[view.get("reason", "no_provenance")], _T(lang)["none_title"], height=220)
    curves = view.get("curves")
    rows = 2 if curves else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(_T(lang)["lr_panel"],) + ((_T(lang)["loss_panel"],) if curves else ()))
    fig.add_trace(go.Scatter(x=view["lr_steps"], y=view["lr"], mode="lines", name=_T(lang)["lr"],
                             line=dict(color="#3182bd"),
                             hovertemplate=_T(lang)["hover_lr"]), row=1, col=1)
    if view["warmup"]:
        fig.add_vline(x=view["warmup"], line=dict(dash="dot", color="grey"), row=1, col=1,
                      annotation_text=_T(lang)["warmup"].format(warmup=view["warmup"]), annotation_position="top right")
    if curves:
        steps = np.asarray(curves["step"])
        fig.add_trace(go.Scatter(x=steps, y=curves["loss"], mode="lines", name=_T(lang)["loss"],
                                 line=dict(color="#fd8d3c", width=1)), row=2, col=1)
        if curves.get("nll"):
            fig.add_trace(go.Scatter(x=steps, y=curves["nll"], mode="lines", name=_T(lang)["nll"],
                                     line=dict(color="#636363", width=1)), row=2, col=1)
        for key in ("held_out_nll", "validation_loss"):
            points = [(e["step"], e[key]) for e in (view.get("evals") or []) if key in e]
            if points:
                fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers+lines",
                                         name=_T(lang)["eval"].format(name=_T(lang)["evals"][key]),
                                         marker=dict(color="#31a354")), row=2, col=1)
    fig.update_xaxes(title_text=_T(lang)["step_axis"], row=rows, col=1)
    title = title or _T(lang)["title"].format(task=view.get("task") or _T(lang)["task_default"], steps=view["steps"],
                                        schedule=_T(lang)["schedules"].get(view["schedule"], view["schedule"]))
    return finish(fig, title, height=340 + 260 * (rows - 1), legend=dict(orientation="h", yanchor="top", y=-0.15, x=0))


def training_caption(view: Mapping[str, Any], lang: str = "en") -> str:
    if not view.get("available"):
        return _T(lang)[view.get("reason", "no_provenance")]
    curves = view.get("curves")
    assumed = _T(lang)["assumed"].format(fields=", ".join(view["assumed"])) if view["assumed"] else ""
    curve_text = _T(lang)["with_curves"].format(final=curves["loss"][-1]) if curves else _T(lang)["no_curves"]
    return _T(lang)["caption"].format(
        lr=view["peak_lr"], warmup=view["warmup"], schedule=_T(lang)["schedules"].get(view["schedule"],
                                                                                      view["schedule"]),
        ls=view["label_smoothing"], clip=view["clip"], optimizer=view.get("optimizer") or "AdamW",
        wd=view["weight_decay"], assumed=assumed, curves=curve_text,
    )
