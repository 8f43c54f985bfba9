"""The training recipe a checkpoint stores: the learning-rate schedule and, when stored, the loss
curves (from `playground.analysis.training.training_view`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import empty_figure, finish
from playground.viz._language import Texts

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
    "assumed": "Not saved with the checkpoint, so the trainer's defaults are shown: {fields}. ",
    "no_curves": (
        "No loss curve was saved with this checkpoint, so only its learning-rate schedule is drawn. A model you "
        "train here (`python -m playground.train`) saves its loss, NLL, learning rate and gradient norm at every "
        "step, and they are drawn below the schedule."
    ),
    "with_curves": "Loss per step from the metadata; the final training loss was {final:.3f}.",
    "lr": "lr",
    "hover_lr": "step %{x}: lr %{y:.3g}<extra></extra>",
    "task_default": "training",
    "evals": {"held_out_nll": "held out nll", "validation_loss": "validation loss"},
}
TEXT_ZH = {
    "title": "这个检查点是怎样训练的<br><sup>{task}:{steps} 步,学习率调度:{schedule}</sup>",
    "lr_panel": "学习率(训练器自己的调度)",
    "loss_panel": "每步的训练损失",
    "loss": "损失(含标签平滑)",
    "nll": "NLL",
    "eval": "{name}(留出集)",
    "step_axis": "优化器步数",
    "warmup": "预热结束 ({warmup})",
    "schedules": {"cosine": "预热 + 余弦", "inverse_sqrt": "预热 + 平方根倒数 (noam)"},
    "none_title": "训练配方",
    "no_provenance": (
        "这个检查点不带训练配方:只有在这里训练的检查点(`python -m playground.train`)才会把配方存进元数据。"
        "导入的模型请参阅它们自己的模型卡。"
    ),
    "no_recipe": "这个检查点的元数据里有来源信息,但没有训练配方。",
    "caption": (
        "检查点中存储的配方:峰值学习率 {lr:g},{warmup} 步预热,学习率调度为{schedule},标签平滑 ε = {ls:g}(损失为 "
        "(1 − ε)·NLL + ε·(−log p 在整个词表上的平均)),梯度按全局范数 {clip:g} 裁剪,{optimizer},权重衰减 {wd:g}。"
        "{assumed}{curves}"
    ),
    "assumed": "以下字段没有存储,因此显示训练器的默认值:{fields}。",
    "no_curves": (
        "这个检查点没有保存损失曲线,所以这里只画出它的学习率调度。在这里训练的模型(`python -m playground.train`)"
        "会保存每一步的损失、NLL、学习率和梯度范数,并画在调度图下方。"
    ),
    "with_curves": "每步损失来自元数据;最终训练损失为 {final:.3f}。",
    "lr": "学习率",
    "hover_lr": "第 %{x} 步:学习率 %{y:.3g}<extra></extra>",
    "task_default": "训练",
    "evals": {"held_out_nll": "NLL", "validation_loss": "验证损失"},
}
_T = Texts(TEXT, TEXT_ZH)


def training_figure(view: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """The lr schedule; below it the loss curves (and evaluations) when the checkpoint stores them."""
    if not view.get("available"):
        return empty_figure(_T[view.get("reason", "no_provenance")], _T["none_title"], height=220)
    curves = view.get("curves")
    rows = 2 if curves else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(_T["lr_panel"],) + ((_T["loss_panel"],) if curves else ()))
    fig.add_trace(go.Scatter(x=view["lr_steps"], y=view["lr"], mode="lines", name=_T["lr"], line=dict(color="#3182bd"),
                             hovertemplate=_T["hover_lr"]), row=1, col=1)
    if view["warmup"]:
        fig.add_vline(x=view["warmup"], line=dict(dash="dot", color="grey"), row=1, col=1,
                      annotation_text=_T["warmup"].format(warmup=view["warmup"]), annotation_position="top right")
    if curves:
        steps = np.asarray(curves["step"])
        fig.add_trace(go.Scatter(x=steps, y=curves["loss"], mode="lines", name=_T["loss"],
                                 line=dict(color="#fd8d3c", width=1)), row=2, col=1)
        if curves.get("nll"):
            fig.add_trace(go.Scatter(x=steps, y=curves["nll"], mode="lines", name=_T["nll"],
                                     line=dict(color="#636363", width=1)), row=2, col=1)
        for key in ("held_out_nll", "validation_loss"):
            points = [(e["step"], e[key]) for e in (view.get("evals") or []) if key in e]
            if points:
                fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers+lines",
                                         name=_T["eval"].format(name=_T["evals"][key]),
                                         marker=dict(color="#31a354")), row=2, col=1)
    fig.update_xaxes(title_text=_T["step_axis"], row=rows, col=1)
    title = title or _T["title"].format(task=view.get("task") or _T["task_default"], steps=view["steps"],
                                        schedule=_T["schedules"].get(view["schedule"], view["schedule"]))
    return finish(fig, title, height=340 + 260 * (rows - 1), legend=dict(orientation="h", yanchor="top", y=-0.15, x=0))


def training_caption(view: Mapping[str, Any]) -> str:
    if not view.get("available"):
        return _T[view.get("reason", "no_provenance")]
    curves = view.get("curves")
    assumed = _T["assumed"].format(fields=", ".join(view["assumed"])) if view["assumed"] else ""
    curve_text = _T["with_curves"].format(final=curves["loss"][-1]) if curves else _T["no_curves"]
    return _T["caption"].format(
        lr=view["peak_lr"], warmup=view["warmup"], schedule=_T["schedules"].get(view["schedule"], view["schedule"]),
        ls=view["label_smoothing"], clip=view["clip"], optimizer=view.get("optimizer") or "AdamW",
        wd=view["weight_decay"], assumed=assumed, curves=curve_text,
    )
