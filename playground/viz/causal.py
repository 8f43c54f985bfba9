"""The causal lab's figures: why a token won (direct logit attribution), what an edit changed per
step (divergence), and which heads of a layer matter (the head sweep). Pure functions of the data
that `playground.analysis.attribution` / `divergence` return (their `to_dict()` forms)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import SIGNED_SCALE, as_array, display_token, finish, short_label
from playground.viz._language import Texts

TEXT = {
    "title": "Why {token}<br><sup>each part's share of its logit ({logit:.3f})</sup>",
    "title_versus": "Why {token} and not {versus}<br><sup>each part's share of the logit difference ({logit:.3f})</sup>",
    "self_heads": "attention heads (layer × head)",
    "cross_heads": "cross-attention heads (layer × head)",
    "mlps_and_rest": "MLPs and the rest",
    "head_axis": "head",
    "layer_axis": "layer",
    "mlp": "MLP {i}",
    "share": "logit share",
    "head_hover": "layer %{y}, head %{x}: %{z:+.4f}<extra></extra>",
    "bar_hover": "%{y}: %{x:+.4f}<extra></extra>",
    "other": {
        "embeddings": "token embedding", "positions": "position embedding", "attention biases": "attention biases",
        "MLP biases": "MLP biases", "norm biases": "norm biases", "head biases": "output biases",
        "steering": "steering vector", "patch": "patched value",
    },
    "caption": (
        "The residual stream that chose **{token}** is a sum of parts; each norm, frozen at the scale it had "
        "at this step, is a straight line, so each part's share of the logit adds up exactly: the parts sum "
        "to {total:.4f} and the logit is {logit:.4f}. Largest push up: **{top}** ({top_value:+.3f}); largest "
        "push down: **{bottom}** ({bottom_value:+.3f}). A head's share here is direct only: what it writes "
        "straight into the stream, not what later layers make of it (ablate it to see that)."
    ),
    "head_name": "head {layer}.{head}",
    "cross_name": "cross-attention head {layer}.{head}",
    "div_title": "What the edit changed, step by step",
    "div_kl": "KL(original ‖ edited)",
    "div_prob": "edited p(original token)",
    "div_step": "step (original token)",
    "div_kl_axis": "KL (nats)",
    "div_prob_axis": "probability",
    "div_first": "texts part here",
    "div_hover": "step %{x}: %{customdata[0]}<br>KL %{y:.4f} nats<br>rank %{customdata[1]}<extra></extra>",
    "div_prob_hover": "step %{x}: p = %{y:.4f}<extra></extra>",
    "sweep_title": "Ablating each head of layer {layer} alone<br><sup>the fall of log p({token})</sup>",
    "sweep_axis": "log-probability lost (nats)",
    "sweep_head": "head {head}",
    "sweep_hover": "%{y}: %{x:+.4f} nats<extra></extra>",
    "sweep_pending": "not run",
}
TEXT_ZH = {
    "title": "为什么是 {token}<br><sup>各部分在它的 logit({logit:.3f})中所占的份额</sup>",
    "title_versus": "为什么是 {token} 而不是 {versus}<br><sup>各部分在 logit 差({logit:.3f})中所占的份额</sup>",
    "self_heads": "注意力头(层 × 头)",
    "cross_heads": "交叉注意力头(层 × 头)",
    "mlps_and_rest": "MLP 与其余部分",
    "head_axis": "头",
    "layer_axis": "层",
    "mlp": "第 {i} 层 MLP",
    "share": "logit 份额",
    "head_hover": "第 %{y} 层,第 %{x} 个头:%{z:+.4f}<extra></extra>",
    "bar_hover": "%{y}:%{x:+.4f}<extra></extra>",
    "other": {
        "embeddings": "词元嵌入", "positions": "位置嵌入", "attention biases": "注意力偏置",
        "MLP biases": "MLP 偏置", "norm biases": "归一化偏置", "head biases": "输出偏置",
        "steering": "引导向量", "patch": "替换进去的值",
    },
    "caption": (
        "选中 **{token}** 的残差流是若干部分之和;每个归一化层按它在这一步的缩放冻结后就是一条直线,"
        "所以各部分在 logit 中的份额恰好相加:各部分之和为 {total:.4f},logit 为 {logit:.4f}。"
        "向上推得最多的是 **{top}**({top_value:+.3f});向下推得最多的是 **{bottom}**({bottom_value:+.3f})。"
        "这里一个头的份额只算直接作用:它直接写进残差流的部分,不算后面的层对它的再加工(要看那个,就消融它)。"
    ),
    "head_name": "第 {layer} 层第 {head} 个头",
    "cross_name": "第 {layer} 层第 {head} 个交叉注意力头",
    "div_title": "编辑逐步改变了什么",
    "div_kl": "KL(原始 ‖ 编辑后)",
    "div_prob": "编辑后 p(原始 token)",
    "div_step": "步(原始 token)",
    "div_kl_axis": "KL(nats)",
    "div_prob_axis": "概率",
    "div_first": "文本从这里分开",
    "div_hover": "第 %{x} 步:%{customdata[0]}<br>KL %{y:.4f} nats<br>排名 %{customdata[1]}<extra></extra>",
    "div_prob_hover": "第 %{x} 步:p = %{y:.4f}<extra></extra>",
    "sweep_title": "逐个消融第 {layer} 层的每个头<br><sup>log p({token}) 下降多少</sup>",
    "sweep_axis": "损失的对数概率(nats)",
    "sweep_head": "第 {head} 个头",
    "sweep_hover": "%{y}:%{x:+.4f} nats<extra></extra>",
    "sweep_pending": "未运行",
}
_T = Texts(TEXT, TEXT_ZH)


def _part_names(data: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Every part shown, named in the current language, with its value."""
    heads = as_array(data["heads"], 2, "heads")
    named = [(_T["head_name"].format(layer=i, head=h), heads[i, h]) for i, h in np.ndindex(heads.shape)]
    if data.get("cross_heads") is not None:
        cross = as_array(data["cross_heads"], 2, "cross_heads")
        named += [(_T["cross_name"].format(layer=i, head=h), cross[i, h]) for i, h in np.ndindex(cross.shape)]
    named += [(_T["mlp"].format(i=i), v) for i, v in enumerate(as_array(data["mlps"], 1, "mlps"))]
    named += [(_T["other"].get(k, k), v) for k, v in data.get("other", {}).items()]
    return [(n, float(v)) for n, v in named]


def attribution_figure(data: Mapping[str, Any], token: str, versus: str | None = None) -> go.Figure:
    """Layer × head heat map of each head's share (cross-attention heads beside it for seq2seq), and
    bars for each MLP and the other parts. `data`: `Attribution.to_dict()`; token texts as decoded."""
    heads = as_array(data["heads"], 2, "heads")
    mlps = as_array(data["mlps"], 1, "mlps")
    cross = None if data.get("cross_heads") is None else as_array(data["cross_heads"], 2, "cross_heads")
    if len(mlps) != heads.shape[0]:
        raise ValueError(f"mlps has {len(mlps)} layers but heads has {heads.shape[0]}; pass one MLP per layer")
    maps = [(heads, _T["self_heads"])] + ([(cross, _T["cross_heads"])] if cross is not None else [])
    titles = [t for _, t in maps] + [_T["mlps_and_rest"]]
    # One figure per row (heat maps above the bars), so that it reads the same in a phone's width.
    n_bars = len(mlps) + len(data.get("other", {}))
    rows = [max(heads.shape[0], 3)] * len(maps) + [max(n_bars * 0.7, 3)]
    height = min(max(160 + 14 * sum(rows) + 90 * len(rows), 460), 1800)
    fig = make_subplots(rows=len(rows), cols=1, subplot_titles=titles, vertical_spacing=min(0.3, 100 / height),
                        row_heights=[r / sum(rows) for r in rows])
    every = [heads] + ([cross] if cross is not None else []) + [mlps, np.array(list(data.get("other", {}).values()))]
    bound = max(float(np.abs(a).max()) if a.size else 0.0 for a in every) or 1.0
    for row, (z, _) in enumerate(maps, start=1):
        fig.add_trace(go.Heatmap(
            z=z, x=list(range(z.shape[1])), y=list(range(z.shape[0])), colorscale=SIGNED_SCALE, zmid=0.0,
            zmin=-bound, zmax=bound, xgap=1, ygap=1, showscale=row == 1,
            colorbar=dict(title=_T["share"], len=rows[0] / sum(rows), y=1.0, yanchor="top", thickness=12),
            hovertemplate=_T["head_hover"],
        ), row=row, col=1)
        fig.update_xaxes(title_text=_T["head_axis"], dtick=1, row=row, col=1)
        fig.update_yaxes(title_text=_T["layer_axis"], dtick=max(1, z.shape[0] // 10), autorange="reversed", row=row,
                         col=1)
    names = [_T["mlp"].format(i=i) for i in range(len(mlps))]
    names += [_T["other"].get(k, k) for k in data.get("other", {})]
    values = list(mlps) + list(data.get("other", {}).values())
    fig.add_trace(go.Bar(
        x=values, y=names, orientation="h", marker_color=["#c0392b" if v < 0 else "#2471a3" for v in values],
        hovertemplate=_T["bar_hover"], showlegend=False,
    ), row=len(rows), col=1)
    fig.update_yaxes(autorange="reversed", row=len(rows), col=1)
    fig.update_xaxes(title_text=_T["share"], zeroline=True, row=len(rows), col=1)
    tok = short_label(display_token(token), 16)
    if versus is None:
        title = _T["title"].format(token=tok, logit=float(data["logit"]))
    else:
        title = _T["title_versus"].format(token=tok, versus=short_label(display_token(versus), 16),
                                          logit=float(data["logit"]))
    return finish(fig, title, height=height).update_layout(margin=dict(l=110, r=30, t=90, b=50))


def attribution_caption(data: Mapping[str, Any], token: str) -> str:
    """Markdown: the sum check, the largest push up and down, and what 'direct' leaves out."""
    named = _part_names(data)
    top = max(named, key=lambda p: p[1])
    bottom = min(named, key=lambda p: p[1])
    return _T["caption"].format(token=display_token(token), total=float(data["total"]), logit=float(data["logit"]),
                                top=top[0], top_value=top[1], bottom=bottom[0], bottom_value=bottom[1])


def divergence_figure(data: Mapping[str, Any], token_texts: Sequence[str]) -> go.Figure:
    """KL per step (bars) and the edited model's probability of the original token (line), with a marker
    where the texts part. `data`: `Divergence.to_dict()`; token_texts: the original tokens as text."""
    kl = as_array(data["kl"], 1, "kl")
    prob = as_array(data["prob"], 1, "prob")
    rank = list(data["rank"])
    if len(token_texts) != len(kl) or len(prob) != len(kl) or len(rank) != len(kl):
        raise ValueError(f"kl has {len(kl)} steps; pass as many probabilities, ranks and token texts")
    steps = list(range(1, len(kl) + 1))  # counted from 1, as the page counts steps
    labels = [display_token(t) for t in token_texts]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=steps, y=kl, name=_T["div_kl"], marker_color="#7d3c98",
                         customdata=np.array([labels, rank], dtype=object).T, hovertemplate=_T["div_hover"]))
    fig.add_trace(go.Scatter(x=steps, y=prob, name=_T["div_prob"], mode="lines+markers", line=dict(color="#e67e22"),
                             hovertemplate=_T["div_prob_hover"]), secondary_y=True)
    first = data.get("first_difference")
    if first is not None:
        fig.add_vline(x=float(first) + 0.5, line_dash="dash", line_color="grey")
        fig.add_annotation(x=float(first) + 0.5, y=1.0, yref="paper", text=_T["div_first"], showarrow=False,
                           xanchor="left", font=dict(color="grey"))
    ticks = [short_label(t) for t in labels]
    fig.update_xaxes(title_text=_T["div_step"], tickmode="array", tickvals=steps,
                     ticktext=[f"{i}<br>{t}" for i, t in zip(steps, ticks)])
    fig.update_yaxes(title_text=_T["div_kl_axis"], rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text=_T["div_prob_axis"], range=[0, 1.02], secondary_y=True)
    fig = finish(fig, _T["div_title"], height=400, legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"))
    return fig.update_layout(margin=dict(l=70, r=60, t=100, b=70))


def head_sweep_figure(data: Mapping[str, Any], token: str) -> go.Figure:
    """Heads of one layer from the largest fall of the chosen token's log-probability to the smallest.
    `data`: `HeadSweep.to_dict()` (heads not reached yet are listed last as not run)."""
    drops = as_array(data["logprob_drop"], 1, "logprob_drop")
    order = [int(h) for h in data.get("order", range(len(drops)))]
    if sorted(order) != list(range(len(drops))):
        raise ValueError(f"order must list each of the {len(drops)} heads once")
    names = [_T["sweep_head"].format(head=h) for h in order]
    values = [0.0 if np.isnan(drops[h]) else float(drops[h]) for h in order]
    text = [_T["sweep_pending"] if np.isnan(drops[h]) else f"{drops[h]:+.3f}" for h in order]
    fig = go.Figure(go.Bar(
        x=values, y=names, orientation="h", text=text, textposition="auto",
        marker_color=["#c0392b" if v > 0 else "#2471a3" for v in values], hovertemplate=_T["sweep_hover"],
    ))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text=_T["sweep_axis"], zeroline=True)
    title = _T["sweep_title"].format(layer=int(data["layer"]), token=short_label(display_token(token), 16))
    return finish(fig, title, height=min(160 + 26 * len(drops), 900))
