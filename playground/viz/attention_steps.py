"""Attention step by step: Q, Kᵀ, Q·Kᵀ, × scale, + mask, softmax, × V, and the heads into W_O.

Draws the dict of `playground.analysis.attention_steps` (numpy arrays and labels; no torch here).
Key tokens run along the x axis of every key panel so a column reads top to bottom: that key's
vector, its score, scaled, masked, its weight and its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import PROB_SCALE, SIGNED_SCALE, display_token, finish, token_ticks
from playground.viz._language import Texts

HIDDEN_COLOUR = "#d9d9d9"  # cells a mask hides (−∞) show the plot background through

# Every user-facing string of this analysis, in English and (TEXT_ZH) in 中文.
TEXT = {
    "kind": {"self": "decoder self-attention", "cross": "cross-attention (decoder queries, encoder keys)",
             "encoder": "encoder self-attention"},
    "title": "Attention step by step<br><sup>{kind} · layer {layer} · head {head} · step {step}</sup>",
    "q": "Q: {queries} (after RoPE)",
    "q_plain": "Q: {queries}",
    "k": "Kᵀ: {keys} visible keys",
    "scores": "Q·Kᵀ (scores)",
    "scaled": "× scale {scale}",
    "masked": "+ mask (grey = −∞){bias}",
    "bias": " + T5 bias",
    "weights": "softmax → weights",
    "v": "Vᵀ: values",
    "output": "weights·V = head output",
    "one_query": "1 query",
    "queries": "{n} queries",
    "key_axis": "key token",
    "dim_axis": "dimension",
    "hidden": "−∞ (hidden by the mask)",
    "concat_title": (
        "Heads → concat → W_O<br><sup>layer {layer}: concat(o₀ … o_{last}) · W_O{bias} = Σ_h o_h · W_O[h]{bias}</sup>"
    ),
    "concat": "concat: {h} heads × {d} = {hd} (head {head} boxed)",
    "w_o": "W_O[{head}]: rows {start}–{stop} of {rows} × {d_model}",
    "contribution": "head {head}'s share o_h · W_O[h]",
    "projected": "attention output (all heads{bias})",
    "caption_prefill": (
        "**Prefill (step 0):** the {n} prompt tokens are processed at once, so Q has {n} rows and the score "
        "matrix is {n} × {n} (L_p × L_p: every prompt token is a query). The causal mask puts −∞ above the diagonal: a token never "
        "sees the tokens after it."
    ),
    "caption_decode": (
        "**Decode (step {step}):** one new query against T + 1 = {keys} keys (the decode step's asymmetry: Q_t is "
        "1 × d_h, K_all is (T + 1) × d_h). The causal mask hides nothing here: every cached key lies in the "
        "past of the newest token."
    ),
    "caption_window": " The sliding window of {window} tokens hides {hidden} older key(s) (−∞).",
    "caption_cross": (
        "**Cross-attention:** the decoder's query reads every one of the {keys} source tokens; K and V come "
        "from the encoder output, projected once per source and cached."
    ),
    "caption_encoder": (
        "**Encoder:** every source token attends to every other one (no causal mask), {keys} × {keys}."
    ),
    "caption_scale": " Scores are multiplied by 1/√d_h = 1/√{d} = {scale:.4g} so their spread does not grow with d_h.",
    "caption_scale_one": " The scale is {scale:g} (T5 folds 1/√d_h into its weights).",
    "caption_gqa": " Query head {head} reads KV head {kv_head}: {g} query heads share each K/V head (GQA).",
    "caption_check": (
        " Putting the stages back together (softmax · V for every head, concat, · W_O) gives the model's own "
        "attention output to {err:.1e}."
    ),
    "hover_query_dim": "%{{customdata}}, dim %{{x}}: %{{z:.3f}}<extra>{name}</extra>",
    "hover_key_dim": "%{{customdata}}, dim %{{y}}: %{{z:.3f}}<extra>{name}</extra>",
    "hover_key_position": "key %{{x}}, dim %{{y}}: %{{z:.3f}}<extra>{name}</extra>",
    "hover_pair": "%{{text}}: %{{z:.3f}}<extra>{name}</extra>",
    "hover_masked": "%{{text}}: %{{customdata}}<extra>{name}</extra>",
    "hover_concat": "head %{{customdata}}, dim %{{x}}: %{{z:.3f}}<extra>{name}</extra>",
    "hover_w_o": "row %{{y}}, col %{{x}}: %{{z:.3f}}<extra>{name}</extra>",
    "hover_dim": "dim %{{x}}: %{{z:.3f}}<extra>{name}</extra>",
    "trace": {"scores": "scores", "scaled": "scaled", "masked": "masked", "weight": "weight", "output": "output",
              "concat": "concat", "w_o": "W_O slice", "share": "head share", "attention_output": "attention output"},
}
TEXT_ZH = {
    "kind": {"self": "解码器自注意力", "cross": "交叉注意力(解码器的查询,编码器的键)", "encoder": "编码器自注意力"},
    "title": "注意力逐步计算<br><sup>{kind} · 第 {layer} 层 · 头 {head} · 第 {step} 步</sup>",
    "q": "Q:{queries}(已施加 RoPE)",
    "q_plain": "Q:{queries}",
    "k": "Kᵀ:{keys} 个可见的键",
    "scores": "Q·Kᵀ(注意力分数)",
    "scaled": "× 缩放因子 {scale}",
    "masked": "+ 掩码(灰色 = −∞){bias}",
    "bias": " + T5 偏置",
    "weights": "softmax → 注意力权重",
    "v": "Vᵀ:值 (value)",
    "output": "权重·V = 该头的输出",
    "one_query": "1 个查询",
    "queries": "{n} 个查询",
    "key_axis": "键 token",
    "dim_axis": "维度",
    "hidden": "−∞(被掩码遮住)",
    "concat_title": (
        "多头 → 拼接 → W_O<br><sup>第 {layer} 层:concat(o₀ … o_{last}) · W_O{bias} = Σ_h o_h · W_O[h]{bias}</sup>"
    ),
    "concat": "拼接:{h} 个头 × {d} = {hd}(方框为头 {head})",
    "w_o": "W_O[{head}]:{rows} × {d_model} 中的第 {start}–{stop} 行",
    "contribution": "头 {head} 的贡献 o_h · W_O[h]",
    "projected": "注意力输出(所有头{bias})",
    "caption_prefill": (
        "**Prefill(第 0 步)**:提示词的 {n} 个 token 一次性处理,所以 Q 有 {n} 行,分数矩阵为 {n} × {n}"
        "(L_p × L_p:每个提示词 token 都是一个查询)。因果掩码把对角线以上的位置设为 −∞:一个 token 永远看不到它后面的 token。"
    ),
    "caption_decode": (
        "**Decode(第 {step} 步)**:一个新的查询与 T + 1 = {keys} 个键计算注意力(解码步的不对称:Q_t 是 "
        "1 × d_h,K_all 是 (T + 1) × d_h)。这里因果掩码不遮住任何键:缓存里的每个键都在最新 token 之前。"
    ),
    "caption_window": "滑动窗口为 {window} 个 token,遮住了 {hidden} 个更早的键(−∞)。",
    "caption_cross": (
        "**交叉注意力**:解码器的查询读取全部 {keys} 个源 token;K 和 V 来自编码器的输出,"
        "每个源文本只投影一次并缓存。"
    ),
    "caption_encoder": "**编码器**:每个源 token 关注所有其他源 token(没有因果掩码),{keys} × {keys}。",
    "caption_scale": "分数乘以 1/√d_h = 1/√{d} = {scale:.4g},使其分布范围不随 d_h 增大。",
    "caption_scale_one": "缩放因子为 {scale:g}(T5 把 1/√d_h 并入了权重)。",
    "caption_gqa": "查询头 {head} 读取 KV 头 {kv_head}:每 {g} 个查询头共享一组 K/V 头(分组查询注意力,GQA)。",
    "caption_check": (
        "把各阶段重新组合(每个头的 softmax · V,拼接,再 · W_O),与模型自己的注意力输出相差 {err:.1e}。"
    ),
    "hover_query_dim": "%{{customdata}},维度 %{{x}}:%{{z:.3f}}<extra>{name}</extra>",
    "hover_key_dim": "%{{customdata}},维度 %{{y}}:%{{z:.3f}}<extra>{name}</extra>",
    "hover_key_position": "键 %{{x}},维度 %{{y}}:%{{z:.3f}}<extra>{name}</extra>",
    "hover_pair": "%{{text}}:%{{z:.3f}}<extra>{name}</extra>",
    "hover_masked": "%{{text}}:%{{customdata}}<extra>{name}</extra>",
    "hover_concat": "头 %{{customdata}},维度 %{{x}}:%{{z:.3f}}<extra>{name}</extra>",
    "hover_w_o": "第 %{{y}} 行,第 %{{x}} 列:%{{z:.3f}}<extra>{name}</extra>",
    "hover_dim": "维度 %{{x}}:%{{z:.3f}}<extra>{name}</extra>",
    "trace": {"scores": "分数", "scaled": "缩放后", "masked": "加掩码后", "weight": "权重", "output": "输出",
              "concat": "拼接", "w_o": "W_O 切片", "share": "该头的贡献", "attention_output": "注意力输出"},
}
_T = Texts(TEXT, TEXT_ZH)


def _signed(z: np.ndarray, **kwargs: Any) -> go.Heatmap:
    finite = np.abs(z[np.isfinite(z)]) if np.isfinite(z).any() else np.array([1.0])
    bound = float(finite.max()) or 1.0
    return go.Heatmap(z=z, colorscale=SIGNED_SCALE, zmid=0.0, zmin=-bound, zmax=bound, showscale=False, **kwargs)


def _query_text(steps: Mapping[str, Any]) -> str:
    n = len(steps["query_labels"])
    return _T["one_query"] if n == 1 else _T["queries"].format(n=n)


def attention_steps_figure(steps: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Eight stacked panels sharing the key axis: Q, Kᵀ, scores, scaled, masked, weights, Vᵀ, output."""
    q_labels = [display_token(t) for t in steps["query_labels"]]
    k_labels = [display_token(t) for t in steps["key_labels"]]
    Tq, S, d = len(q_labels), len(k_labels), int(steps["head_dim"])
    kind = steps["kind"]
    rope = kind != "cross" and steps.get("positional", "rope") == "rope"
    bias = steps.get("bias") is not None
    titles = (
        (_T["q"] if rope else _T["q_plain"]).format(queries=_query_text(steps)),
        _T["k"].format(keys=S), _T["scores"], _T["scaled"].format(scale=f"{steps['scale']:.4g}"),
        _T["masked"].format(bias=_T["bias"] if bias else ""), _T["weights"], _T["v"],
        _T["output"].format(d=d),
    )
    trace = _T["trace"]
    q_px, d_px = int(np.clip(20 * Tq, 40, 320)), int(min(200, 3 * d + 20))
    row_px = [q_px, d_px, q_px, q_px, q_px, q_px, d_px, q_px]
    fig = make_subplots(rows=8, cols=1, subplot_titles=titles, row_heights=row_px, vertical_spacing=0.065)
    pair = np.asarray(q_labels, dtype=object)[:, None] + " → " + np.asarray(k_labels, dtype=object)[None, :]
    dims = np.arange(d)
    by_query = np.broadcast_to(np.asarray(q_labels, dtype=object)[:, None], (Tq, d))
    fig.add_trace(_signed(steps["q"], x=dims, customdata=by_query,
                          hovertemplate=_T["hover_query_dim"].format(name="Q")), row=1, col=1)
    # Token names in every K/V cell's hover for short runs; long ones hover by position (the axis names
    # the tokens) so a step change does not ship tens of thousands of strings to the page.
    if S * d <= 20_000:
        keys_by_dim = np.broadcast_to(np.asarray(k_labels, dtype=object)[None, :], (d, S))
        kv_hover, kv_template = dict(customdata=keys_by_dim), _T["hover_key_dim"]
    else:
        kv_hover, kv_template = {}, _T["hover_key_position"]
    k_hover = {**kv_hover, "hovertemplate": kv_template.format(name="K")}
    v_hover = {**kv_hover, "hovertemplate": kv_template.format(name="V")}
    fig.add_trace(_signed(np.asarray(steps["k"]).T, **k_hover), row=2, col=1)
    # Small matrices carry their numbers in the cells, as textbook worked examples do.
    numbers = dict(texttemplate="%{z:.2g}", textfont=dict(size=9)) if S <= 12 and Tq <= 8 else {}
    for row, name in ((3, "scores"), (4, "scaled")):
        fig.add_trace(_signed(steps[name], text=pair, hovertemplate=_T["hover_pair"].format(name=trace[name]),
                              **numbers), row=row, col=1)
    masked = np.where(np.isfinite(steps["masked"]), steps["masked"], np.nan)
    shown = np.where(steps["mask"], np.round(np.nan_to_num(masked), 3).astype(object), _T["hidden"])
    fig.add_trace(_signed(masked, text=pair, customdata=shown,
                          hovertemplate=_T["hover_masked"].format(name=trace["masked"]), **numbers), row=5, col=1)
    fig.add_trace(go.Heatmap(z=steps["weights"], text=pair, colorscale=PROB_SCALE, zmin=0.0, zmax=1.0, showscale=False,
                             hovertemplate=_T["hover_pair"].format(name=trace["weight"]), **numbers), row=6, col=1)
    fig.add_trace(_signed(np.asarray(steps["v"]).T, **v_hover), row=7, col=1)
    fig.add_trace(_signed(steps["output"], x=dims,
                          customdata=np.broadcast_to(np.asarray(q_labels, dtype=object)[:, None], (Tq, d)),
                          hovertemplate=_T["hover_query_dim"].format(name=trace["output"])), row=8, col=1)
    ticks = token_ticks(k_labels, max_ticks=24)
    for row in range(1, 9):
        fig.update_yaxes(autorange="reversed", showgrid=False, row=row, col=1,
                         showticklabels=row in (2, 7) or Tq <= 12,
                         **({} if row in (2, 7) else token_ticks(q_labels, max_ticks=12)))
        # Key tokens label the bottom key panel (Vᵀ; the columns line up above it, and every cell's hover
        # names its token); dims label Q and the output.
        fig.update_xaxes(showgrid=False, row=row, col=1, **({} if row in (1, 8) else ticks),
                         showticklabels=row in (1, 7, 8), tickangle=0 if row in (1, 8) else -45)
    fig.update_xaxes(title_text=_T["dim_axis"], row=8, col=1)
    if title is None:
        title = _T["title"].format(kind=_T["kind"][kind], layer=steps["layer"], head=steps["head"],
                                     step=steps["step"] + 1)  # counted from 1, as the live screen
    return finish(fig, title, height=int(sum(row_px) + 8 * 45 + 140), plot_bgcolor=HIDDEN_COLOUR)


def heads_concat_figure(steps: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """For the step's (last) query: the concat of every head's output, this head's slice of W_O, its
    share of the output and the attention output (= Σ of all heads' shares + bias)."""
    h, d, head = int(steps["n_heads"]), int(steps["head_dim"]), int(steps["head"])
    concat = np.asarray(steps["concat"])[-1]
    w_slice = np.asarray(steps["w_o_slice"])
    d_model = w_slice.shape[1]
    bias = " + b" if steps.get("o_bias") is not None else ""
    titles = (
        _T["concat"].format(h=h, d=d, hd=h * d, head=head),
        _T["w_o"].format(head=head, start=head * d, stop=(head + 1) * d - 1, d_model=d_model,
                         rows=steps["w_o_shape"][0]),
        _T["contribution"].format(head=head),
        _T["projected"].format(bias=bias),
    )
    trace = _T["trace"]
    fig = make_subplots(rows=4, cols=1, subplot_titles=titles, row_heights=[50, min(220, 3 * d + 20), 50, 50],
                        vertical_spacing=0.09)
    cols = np.arange(h * d)
    fig.add_trace(_signed(concat[None], x=cols, customdata=(cols // d)[None],
                          hovertemplate=_T["hover_concat"].format(name=trace["concat"])), row=1, col=1)
    fig.add_shape(type="rect", x0=head * d - 0.5, x1=(head + 1) * d - 0.5, y0=-0.5, y1=0.5,
                  line=dict(color="black", width=2), row=1, col=1)
    for i in range(1, h):
        fig.add_vline(x=i * d - 0.5, line=dict(color="white", width=1), row=1, col=1)
    fig.add_trace(_signed(w_slice, hovertemplate=_T["hover_w_o"].format(name=trace["w_o"])), row=2, col=1)
    fig.add_trace(_signed(np.asarray(steps["head_contribution"])[-1:],
                          hovertemplate=_T["hover_dim"].format(name=trace["share"])), row=3, col=1)
    fig.add_trace(_signed(np.asarray(steps["attention_output"])[-1:],
                          hovertemplate=_T["hover_dim"].format(name=trace["attention_output"])), row=4, col=1)
    fig.update_yaxes(showticklabels=False, showgrid=False, autorange="reversed")
    fig.update_xaxes(showgrid=False)
    if title is None:
        title = _T["concat_title"].format(layer=steps["layer"], last=h - 1, bias=bias)
    return finish(fig, title, height=int(250 + 150 + min(220, 3 * d + 20)))


def attention_steps_caption(steps: Mapping[str, Any]) -> str:
    """Markdown explaining what this step's panels show, with its numbers."""
    kind, S, Tq = steps["kind"], len(steps["key_labels"]), len(steps["query_labels"])
    if kind == "cross":
        text = _T["caption_cross"].format(keys=S)
    elif kind == "encoder":
        text = _T["caption_encoder"].format(keys=S)
    elif steps["phase"] == "prefill" and Tq > 1:
        text = _T["caption_prefill"].format(n=Tq)
    else:
        text = _T["caption_decode"].format(step=steps["step"] + 1, keys=S)  # counted from 1, as the live screen
    hidden = int((~np.asarray(steps["mask"])[-1]).sum())
    if "window" in steps["mask_kind"] and hidden:
        text += _T["caption_window"].format(window=steps["mask_kind"].rsplit(" ", 1)[-1], hidden=hidden)
    d, scale = int(steps["head_dim"]), float(steps["scale"])
    if abs(scale * d**0.5 - 1.0) < 1e-6:
        text += _T["caption_scale"].format(d=d, scale=scale)
    else:
        text += _T["caption_scale_one"].format(scale=scale)
    g = int(steps["n_heads"]) // int(steps["n_kv_heads"])
    if g > 1:
        text += _T["caption_gqa"].format(head=steps["head"], kv_head=steps["kv_head"], g=g)
    return text + _T["caption_check"].format(err=float(steps["max_abs_error"]))
