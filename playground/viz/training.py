"""The training recipe a checkpoint stores: the learning-rate schedule and, when stored, the loss
curves (from `playground.analysis.training.training_view`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import empty_figure, finish

TEXT = {
    "title": "How this checkpoint was trained<br><sup>{task}: {steps} steps, {schedule} schedule</sup>",
    "lr_panel": "learning rate (the trainer's own schedule)",
    "loss_panel": "training loss per step",
    "loss": "loss (label-smoothed)",
    "nll": "NLL",
    "eval": "held-out {name}",
    "step_axis": "optimiser step",
    "warmup": "warm-up ends ({warmup})",
    "schedules": {"cosine": "warm-up + cosine", "inverse_sqrt": "warm-up + inverse square root (noam)"},
    "none_title": "Training view",
    "no_provenance": (
        "This checkpoint carries no training recipe: only checkpoints trained here (`python -m playground.train`) "
        "store one in their metadata. Imported models are described on their own model cards."
    ),
    "no_recipe": "This checkpoint's metadata has provenance but no recipe.",
    "caption": (
        "Recipe stored in the checkpoint: peak learning rate {lr:g}, {warmup} warm-up steps, {schedule}, label "
        "smoothing ε = {ls:g} (the loss is (1 − ε)·NLL + ε·mean over the vocabulary of −log p), gradients clipped "
        "at global norm {clip:g}, {optimizer}, weight decay {wd:g}. {assumed}{curves}"
    ),
    "assumed": "Not stored, so the trainer's default is shown: {fields}. ",
    "no_curves": (
        "Its metadata has no loss curve (it was trained before training stored one); checkpoints trained from now "
        "on carry loss, NLL, learning rate and gradient norm per step."
    ),
    "with_curves": "Loss per step from the metadata; the final training loss was {final:.3f}.",
}


def training_figure(view: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """The lr schedule; below it the loss curves (and evaluations) when the checkpoint stores them."""
    if not view.get("available"):
        return empty_figure(TEXT[view.get("reason", "no_provenance")], TEXT["none_title"], height=220)
    curves = view.get("curves")
    rows = 2 if curves else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(TEXT["lr_panel"],) + ((TEXT["loss_panel"],) if curves else ()))
    fig.add_trace(go.Scatter(x=view["lr_steps"], y=view["lr"], mode="lines", name="lr", line=dict(color="#3182bd"),
                             hovertemplate="step %{x}: lr %{y:.3g}<extra></extra>"), row=1, col=1)
    if view["warmup"]:
        fig.add_vline(x=view["warmup"], line=dict(dash="dot", color="grey"), row=1, col=1,
                      annotation_text=TEXT["warmup"].format(warmup=view["warmup"]), annotation_position="top right")
    if curves:
        steps = np.asarray(curves["step"])
        fig.add_trace(go.Scatter(x=steps, y=curves["loss"], mode="lines", name=TEXT["loss"],
                                 line=dict(color="#fd8d3c", width=1)), row=2, col=1)
        if curves.get("nll"):
            fig.add_trace(go.Scatter(x=steps, y=curves["nll"], mode="lines", name=TEXT["nll"],
                                     line=dict(color="#636363", width=1)), row=2, col=1)
        for key in ("held_out_nll", "validation_loss"):
            points = [(e["step"], e[key]) for e in (view.get("evals") or []) if key in e]
            if points:
                fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers+lines",
                                         name=TEXT["eval"].format(name=key.replace("_", " ")),
                                         marker=dict(color="#31a354")), row=2, col=1)
    fig.update_xaxes(title_text=TEXT["step_axis"], row=rows, col=1)
    title = title or TEXT["title"].format(task=view.get("task") or "training", steps=view["steps"],
                                          schedule=TEXT["schedules"].get(view["schedule"], view["schedule"]))
    return finish(fig, title, height=340 + 260 * (rows - 1), legend=dict(orientation="h", yanchor="top", y=-0.15, x=0))


def training_caption(view: Mapping[str, Any]) -> str:
    if not view.get("available"):
        return TEXT[view.get("reason", "no_provenance")]
    curves = view.get("curves")
    assumed = TEXT["assumed"].format(fields=", ".join(view["assumed"])) if view["assumed"] else ""
    curve_text = TEXT["with_curves"].format(final=curves["loss"][-1]) if curves else TEXT["no_curves"]
    return TEXT["caption"].format(
        lr=view["peak_lr"], warmup=view["warmup"], schedule=TEXT["schedules"].get(view["schedule"], view["schedule"]),
        ls=view["label_smoothing"], clip=view["clip"], optimizer=view.get("optimizer") or "AdamW",
        wd=view["weight_decay"], assumed=assumed, curves=curve_text,
    )
