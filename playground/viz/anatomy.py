"""Anatomy of the loaded model as a diagram with real parameter counts, and the residual stream's norm
per layer (from `playground.analysis.anatomy`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go

from playground.viz._common import display_text, finish, layer_name
from playground.viz._language import Texts

BOX = {"embedding": "#c6dbef", "positions": "#e5f5e0", "relative_bias": "#e5f5e0", "embed_norm": "#fdd0a2",
       "attn_norm": "#fdd0a2", "cross_norm": "#fdd0a2", "mlp_norm": "#fdd0a2", "final_norm": "#fdd0a2",
       "attn": "#9ecae1", "cross": "#bcbddc", "mlp": "#a1d99b", "head": "#c6dbef", "final_logits_bias": "#f0f0f0",
       "tokens": "#ffffff", "add": "#ffffff"}

TEXT = {
    "title": "Anatomy of this model<br><sup>{family}, {params} parameters (counted from its own modules)</sup>",
    "names": {
        "embedding": "token embedding", "positions": "positions", "relative_bias": "T5 relative bias",
        "embed_norm": "embedding norm", "attn_norm": "norm", "attn": "self-attention", "cross_norm": "norm",
        "cross": "cross-attention", "mlp_norm": "norm", "mlp": "MLP", "final_norm": "final norm",
        "head": "LM head", "final_logits_bias": "logits bias",
    },
    "add": "⊕ add the residual",
    "shared": " (shared)",
    "tokens_in": "token ids",
    "source_in": "source ids",
    "target_in": "target ids",
    "logits": "logits (V = {V})",
    "repeat": "× {n} blocks ({pre})",
    "pre": "pre-LN",
    "post": "post-LN",
    "params": "{n} params",
    "tied": "tied to the embedding: 0 new params",
    "no_params": "no parameters",
    "positions_note": {"rope": "RoPE: rotates q and k in every layer", "sinusoidal": "fixed sin/cos table",
                       "learned": "learned table", "relative": "bias added to scores", "none": ""},
    "residual_title": "Residual stream norm per layer<br><sup>‖x‖ at step {step} (red); blue: every step</sup>",
    "all_max": "max over steps",
    "all_min": "min over steps",
    "all_median": "median over steps",
    "layer_axis": "after",
    "norm_axis": "‖x‖₂",
    "caption": (
        "{wiring_text} The residual stream's norm {trend} from {first:.3g} after the embedding to {last:.3g} after "
        "the last block at step {step} ({growth:.2g}×). {why}"
    ),
    "pre_text": "Blocks are **pre-LN**: {eq}.",
    "post_text": "Blocks are **post-LN** (as in the 2017 paper): {eq}.",
    "grows": "grows",
    "stays": "changes",
    "why_pre": (
        "Pre-LN never normalises the stream itself: each block adds its output, so the norm grows with depth, "
        "while the identity path carries the gradient to every block unchanged. That is why pre-LN models train "
        "stably without a long warm-up, where post-LN models need one; the final norm rescales the stream before the head."
    ),
    "why_post": (
        "Post-LN normalises the stream after every sub-layer, so its norm stays near √d_model × the norm's gain; "
        "the gradient has to pass through every norm on its way down, which is why the original Transformer needs "
        "a learning-rate warm-up."
    ),
    "name_note": "{name}: {note}",
    "name_paren": "{name} ({note})",
    "each": " ({n} each)",
    "mlp_kinds": {"gated": "gated", "plain": "plain"},
    "norm_kinds": {"none": "none"},
    "hover_max": "%{x}: max %{y:.3f}<extra></extra>",
    "hover_min": "%{x}: min %{y:.3f}<extra></extra>",
    "hover_median": "%{x}: median %{y:.3f}<extra></extra>",
    "step": "step {step}",
}
TEXT_ZH = {
    "title": "本模型的结构<br><sup>{family} · {params} 个参数(按模型自己的模块统计)</sup>",
    "names": {
        "embedding": "token 嵌入", "positions": "位置编码", "relative_bias": "T5 相对位置偏置",
        "embed_norm": "嵌入归一化", "attn_norm": "归一化", "attn": "自注意力", "cross_norm": "归一化",
        "cross": "交叉注意力", "mlp_norm": "归一化", "mlp": "前馈网络 MLP", "final_norm": "最终归一化",
        "head": "LM Head", "final_logits_bias": "logits 偏置",
    },
    "add": "⊕ 加上残差",
    "shared": "(共享)",
    "tokens_in": "token id",
    "source_in": "源文本 token id",
    "target_in": "目标 token id",
    "logits": "logits (V = {V})",
    "repeat": "× {n} 个块 ({pre})",
    "pre": "Pre-LN",
    "post": "Post-LN",
    "params": "{n} 个参数",
    "tied": "与嵌入层共享权重:0 个新参数",
    "no_params": "没有参数",
    "positions_note": {"rope": "RoPE:在每一层旋转 q 和 k", "sinusoidal": "固定的 sin/cos 表",
                       "learned": "可学习的表", "relative": "加到分数上的偏置", "none": ""},
    "residual_title": "每层残差流的范数<br><sup>第 {step} 步的 ‖x‖(红色);蓝色:所有步</sup>",
    "all_max": "各步的最大值",
    "all_min": "各步的最小值",
    "all_median": "各步的中位数",
    "layer_axis": "在此之后",
    "norm_axis": "‖x‖₂",
    "caption": (
        "{wiring_text}在第 {step} 步,残差流的范数从嵌入层之后的 {first:.3g} {trend}到最后一个块之后的 {last:.3g}"
        "({growth:.2g}×)。{why}"
    ),
    "pre_text": "各块采用 **Pre-LN**:{eq}。",
    "post_text": "各块采用 **Post-LN**(与 2017 年的论文相同):{eq}。",
    "grows": "增长",
    "stays": "变化",
    "why_pre": (
        "Pre-LN 从不对残差流本身做归一化:每个块把自己的输出加上去,所以范数随深度增长,而恒等路径把梯度原样"
        "传给每个块。这就是 Pre-LN 模型不需要很长的预热也能稳定训练的原因,而 Post-LN 模型需要预热;最终归一化层在输出头"
        "之前重新缩放残差流。"
    ),
    "why_post": (
        "Post-LN 在每个子层之后都对残差流做归一化,所以它的范数保持在 √d_model × 归一化增益附近;梯度在反向传播时"
        "要穿过每一个归一化层,这就是原始 Transformer 需要学习率预热的原因。"
    ),
    "name_note": "{name}:{note}",
    "name_paren": "{name} ({note})",
    "each": "(每个 {n})",
    "mlp_kinds": {"gated": "门控", "plain": "普通"},
    "norm_kinds": {"none": "无"},
    "hover_max": "%{x}:最大 %{y:.3f}<extra></extra>",
    "hover_min": "%{x}:最小 %{y:.3f}<extra></extra>",
    "hover_median": "%{x}:中位数 %{y:.3f}<extra></extra>",
    "step": "第 {step} 步",
}
_T = Texts(TEXT, TEXT_ZH)


def _fmt(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else (f"{n / 1e3:.1f}k" if n >= 1e3 else str(n))


def _shapes(part: Mapping[str, Any]) -> str:
    shown = [f"{name or 'w'} {'×'.join(str(s) for s in shape)}" for name, shape in part["tensors"]
             if not name.endswith("bias")][:3]
    return ", ".join(shown)


def _label(part: Mapping[str, Any], positional: str) -> str:
    key = part["key"]
    name = _T["names"].get(key, key)
    if key == "positions":
        name = _T["name_note"].format(name=name, note=_T["positions_note"].get(part["note"], part["note"]))
    elif key.endswith("norm"):
        name = _T["name_paren"].format(name=name, note=_T["norm_kinds"].get(part["note"], part["note"]))
    elif key == "mlp":
        kind = part["note"].replace("MLP", "").lower() or "plain"
        name = _T["name_paren"].format(name=name, note=_T["mlp_kinds"].get(kind, kind))
    if key == "head" and part["note"] == "tied":
        detail = _T["tied"]
    elif part["params"] == 0:
        detail = _T["no_params"]
    else:
        detail = _T["params"].format(n=_fmt(part["params"]))
        if part["repeat"] > 1:
            detail += _T["each"].format(n=_fmt(part["params_each"]))
        shapes = _shapes(part)
        if shapes:
            detail += f"<br>{shapes}"
    return f"<b>{name}</b><br>{detail}"


def _column(fig: go.Figure, x: float, boxes: list[tuple[str, str]], block: tuple[int, int] | None, repeat: str,
            width: float, skips: list[tuple[int, int]] = ()) -> list[float]:
    """Stack boxes top to bottom at x; frame the block range; draw each residual skip (from the input of
    a sub-layer to its ⊕) on the left; return each box's centre y."""
    ys = []
    for i, (key, label) in enumerate(boxes):
        y = -i
        ys.append(y)
        half = width / 2 if key != "add" else width / 5
        fig.add_shape(type="rect", x0=x - half, x1=x + half, y0=y - (0.38 if key != "add" else 0.22),
                      y1=y + (0.38 if key != "add" else 0.22), fillcolor=BOX.get(key, "#ffffff"),
                      line=dict(color="#636363", width=1), layer="below")
        fig.add_annotation(x=x, y=y, text=label, showarrow=False, font=dict(size=10))
        if i:
            top = y + (0.38 if key != "add" else 0.22)
            fig.add_annotation(x=x, y=top, ax=x, ay=-(i - 1) - 0.38, xref="x", yref="y", axref="x", ayref="y",
                               showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1, text="")
    side = x - width / 2 - 0.1
    for start, add in skips:
        y0, y1 = ys[start] + 0.5, ys[add]
        fig.add_shape(type="path", path=f"M {x} {y0} L {side} {y0} L {side} {y1}",
                      line=dict(color="#252525", width=1.2))
        fig.add_annotation(x=x - width / 5, y=y1, ax=side, ay=y1, xref="x", yref="y", axref="x", ayref="y",
                           showarrow=True, arrowhead=2, arrowwidth=1.2, text="")
    if block is not None:
        top, bottom = -block[0] + 0.55, -block[1] - 0.5
        fig.add_shape(type="rect", x0=x - width / 2 - 0.18, x1=x + width / 2 + 0.06, y0=bottom, y1=top,
                      line=dict(color="#252525", width=2, dash="dot"))
        fig.add_annotation(x=x + width / 2 + 0.04, y=top, text=repeat, showarrow=False, xanchor="right",
                           yanchor="bottom", font=dict(size=11, color="#252525"))
    return ys


def _stack_boxes(stack: Mapping[str, Any], positional: str, offset: int
                 ) -> tuple[list[tuple[str, str]], tuple[int, int], list[tuple[int, int]]]:
    """The stack's boxes in the order the block computes them, with ⊕ boxes where the residual is added:
    pre-LN norm → f → ⊕; post-LN f → ⊕ → norm. Skips index boxes from `offset` (boxes above the stack)."""
    boxes, skips = [], []
    block = [p for p in stack["parts"] if p["repeat"] > 1]
    for part in stack["parts"]:
        if part["repeat"] == 1:
            boxes.append((part["key"], _label(part, positional)))
    first = len(boxes)
    for norm, sub in zip(block[0::2], block[1::2]):  # (attn_norm, attn), [(cross_norm, cross)], (mlp_norm, mlp)
        start = offset + len(boxes)
        if stack["pre"]:
            boxes += [(norm["key"], _label(norm, positional)), (sub["key"], _label(sub, positional)),
                      ("add", _T["add"])]
            skips.append((start, offset + len(boxes) - 1))
        else:
            boxes += [(sub["key"], _label(sub, positional)), ("add", _T["add"])]
            skips.append((start, offset + len(boxes) - 1))
            boxes.append((norm["key"], _label(norm, positional)))
    last = len(boxes) - 1
    if stack["final_norm"] is not None:
        boxes.append(("final_norm", _label(stack["final_norm"], positional)))
    return boxes, (first, last), skips


def anatomy_figure(anatomy: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Boxes top to bottom: ids → embedding → [positions] → N × (norm, attention, [cross], norm, MLP) →
    final norm → head → logits; a seq2seq model gets an encoder column beside the decoder column."""
    fig = go.Figure()
    emb = ("embedding", _label(anatomy["embedding"], anatomy["positional"]))
    tail = [("head", _label(anatomy["head"], anatomy["positional"]))]
    tail += [(p["key"], _label(p, anatomy["positional"])) for p in anatomy["extra"]]
    tail.append(("tokens", _T["logits"].format(V=anatomy["vocab_size"])))
    stacks = {s["name"]: s for s in anatomy["stacks"]}
    rows = 0
    if anatomy["kind"] == "decoder":
        s = stacks["decoder"]
        boxes, (b0, b1), skips = _stack_boxes(s, anatomy["positional"], 2)
        column = [("tokens", _T["tokens_in"]), emb] + boxes + tail
        repeat = _T["repeat"].format(n=s["layers"], pre=_T["pre"] if s["pre"] else _T["post"])
        _column(fig, 0.0, column, (b0 + 2, b1 + 2), repeat, width=1.6, skips=skips)
        rows, xs = len(column), (-1.05, 0.9)
    else:
        enc, dec = stacks["encoder"], stacks["decoder"]
        e_boxes, (e0, e1), e_skips = _stack_boxes(enc, anatomy["positional"], 2)
        d_boxes, (d0, d1), d_skips = _stack_boxes(dec, anatomy["positional"], 2)
        e_col = [("tokens", _T["source_in"]), emb] + e_boxes
        shared = ("embedding", _T["names"]["embedding"] + _T["shared"])
        d_col = [("tokens", _T["target_in"]), shared] + d_boxes + tail

        def repeat(stack: Mapping[str, Any]) -> str:
            return _T["repeat"].format(n=stack["layers"], pre=_T["pre"] if stack["pre"] else _T["post"])

        e_ys = _column(fig, 0.0, e_col, (e0 + 2, e1 + 2), repeat(enc), width=1.5, skips=e_skips)
        d_ys = _column(fig, 2.0, d_col, (d0 + 2, d1 + 2), repeat(dec), width=1.5, skips=d_skips)
        cross = next(i for i, (k, _) in enumerate(d_col) if k == "cross")
        fig.add_annotation(x=1.25, y=d_ys[cross], ax=0.75, ay=e_ys[-1], xref="x", yref="y", axref="x", ayref="y",
                           showarrow=True, arrowhead=2, arrowwidth=1.5, arrowcolor="#756bb1", text="")
        rows, xs = max(len(e_col), len(d_col)), (-1.0, 2.85)
    fig.update_xaxes(visible=False, range=list(xs))
    fig.update_yaxes(visible=False, range=[-rows + 0.4, 0.6])
    title = title or _T["title"].format(family=display_text(anatomy["family"]), params=f"{anatomy['parameters']:,}")
    return finish(fig, title, height=int(110 + 58 * rows), showlegend=False)


def residual_norm_figure(norms: Mapping[str, Any], step: int, title: str | None = None) -> go.Figure:
    """‖x‖ per layer: the run's spread over all steps (min–max band and median), the selected step thick."""
    n = np.asarray(norms["norms"])
    names = [layer_name(n) for n in norms["layer_names"]]
    fig = go.Figure()
    band = dict(color="rgba(49,130,189,0.25)", width=0)
    fig.add_trace(go.Scatter(x=names, y=n.max(axis=1), mode="lines", line=band, name=_T["all_max"],
                             hovertemplate=_T["hover_max"]))
    fig.add_trace(go.Scatter(x=names, y=n.min(axis=1), mode="lines", line=band, fill="tonexty",
                             fillcolor="rgba(49,130,189,0.2)", name=_T["all_min"], hovertemplate=_T["hover_min"]))
    fig.add_trace(go.Scatter(x=names, y=np.median(n, axis=1), mode="lines", line=dict(color="#3182bd", dash="dot"),
                             name=_T["all_median"], hovertemplate=_T["hover_median"]))
    if step in norms["steps"]:
        j = list(norms["steps"]).index(step)
        fig.add_trace(go.Scatter(x=names, y=n[:, j], mode="lines+markers", line=dict(color="#d62728", width=3),
                                 name=_T["step"].format(step=step + 1), hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_xaxes(title_text=_T["layer_axis"], tickangle=-45)
    fig.update_yaxes(title_text=_T["norm_axis"], type="log")
    # `step` indexes the run's tokens from 0; it is shown counted from 1, as the live screen counts steps
    return finish(fig, title or _T["residual_title"].format(step=step + 1), height=380, showlegend=False)


def residual_norm_caption(anatomy: Mapping[str, Any], norms: Mapping[str, Any], step: int) -> str:
    dec = next(s for s in anatomy["stacks"] if s["name"] == "decoder")
    j = list(norms["steps"]).index(step)
    col = np.asarray(norms["norms"])[:, j]
    eq = "; ".join(dec["wiring"])
    wiring_text = (_T["pre_text"] if dec["pre"] else _T["post_text"]).format(eq=eq)
    growth = float(col[-1] / max(col[0], 1e-30))
    return _T["caption"].format(wiring_text=wiring_text, trend=_T["grows"] if growth > 1.5 else _T["stays"],
                                first=col[0], last=col[-1], step=step + 1, growth=growth,
                                why=_T["why_pre"] if dec["pre"] else _T["why_post"])
