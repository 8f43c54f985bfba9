"""Positional encodings compared: RoPE at two bases, RoPE's relative property on real q and k, and
five positional schemes side by side (from `playground.analysis.positional`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import display_token, finish
from playground.viz._language import Texts

_COLOURS = plotly.colors.qualitative.Plotly
OWN_COLOUR = "#d62728"

TEXT = {
    "base_title": "RoPE at base {a:g} vs base {b:g}<br><sup>positions 0–{last}</sup>",
    "wavelength": "wavelength 2π/θᵢ per dimension pair (tokens)",
    "decay": "q·k for q = k = 1 vs distance (long-term decay)",
    "base": "base {b:g}",
    "model_base": "base {b:g} (this model)",
    "pair_axis": "dimension pair i",
    "distance_axis": "relative distance (tokens)",
    "base_caption": (
        "θᵢ = base^(−2i/d_h): a smaller base turns every pair faster, so wavelengths shrink and the score of "
        "q = k = 1 decays and ripples within fewer tokens. This model uses base {a:g}; the dashed lines show "
        "base {b:g}. Pairs whose wavelength exceeds the context ({context}) never complete a turn."
    ),
    "shift_title": "RoPE: only the distance counts<br><sup>layer {layer}, head {head}: query “{q}” (position {m}), "
                   "key “{k}” (position {n})</sup>",
    "shift_panel": "the same pair moved to (m + s, n + s): one score",
    "distance_panel": "the same q and k, the key δ tokens back: the score depends on δ = m − n",
    "shift_axis": "shift s (tokens)",
    "score_axis": "scaled score q·k/√d",
    "recorded": "what the model computed at ({m}, {n})",
    "shift_caption": (
        "⟨R_m q, R_n k⟩ = ⟨q, R_(n−m) k⟩ (RoPE's relative-position property): moving both tokens by the same s leaves the score "
        "unchanged. Over shifts up to {top}, the {count} scores agree to {spread:.1e} (floating-point error); "
        "the model itself computed {recorded:.6f} at ({m}, {n}). Moving only the key changes m − n and the "
        "score (lower panel; the dotted line marks m − n = {gap})."
    ),
    "no_rope": "This model does not use RoPE ({reason}); the relative property is RoPE's.",
    "schemes_title": (
        "Positional schemes side by side<br><sup>what position adds at relative distance δ; ★ = this model</sup>"
    ),
    "names": {"sinusoidal": "sinusoidal (2017)", "learned": "learned (GPT-2, BART)", "rope": "RoPE (LLaMA)",
              "relative": "T5 relative bias", "alibi": "ALiBi"},
    "y": {"sinusoidal": "PE(0)·PE(δ) / PE(0)·PE(0)", "learned": "cosine(P_p, P_p+δ)",
          "rope": "score / d_h", "relative": "bias (or bucket)", "alibi": "bias −m_h·δ"},
    "own": " ★",
    "formula": " (formula)",
    "unavailable": "a trained table: none in this model",
    "delta_axis": "δ (tokens)",
    "schemes_caption": (
        "Sinusoidal and learned schemes add a vector to each token's embedding; RoPE rotates q and k so their "
        "score depends on the distance; T5 and ALiBi add a bias to the score that depends on the distance only "
        "(T5 learns one number per distance bucket and head, ALiBi fixes a slope per head). This model uses "
        "**{own}**, drawn from the model itself (its table, frequencies or learned weights); the others come from "
        "their formulas."
    ),
    "hover_pair": "{label}, pair %{{x}}: %{{y:.4g}} tokens<extra></extra>",
    "hover_distance": "{label}, distance %{{x}}: %{{y:.3f}}<extra></extra>",
    "tokens_axis": "tokens",
    "qk_axis": "q·k",
    "shifted": "shifted",
    "hover_shift": "shift %{x}, %{customdata}: %{y:.8f}<extra></extra>",
    "by_distance": "by distance",
    "hover_scheme": "{name}, {label}, δ %{{x}}: %{{y:.3f}}<extra></extra>",
    # Curve labels and the no-RoPE reason as `playground.analysis.positional` writes them.
    "labels": {"head": "head {i}", "bucket": "bucket of δ"},
    "reason": "this model's positions are {positional}, not RoPE",
    "positional": {"sinusoidal": "sinusoidal", "learned": "learned", "relative": "relative", "none": "none"},
}
TEXT_ZH = {
    "base_title": "RoPE:基数 {a:g} 与基数 {b:g} 对比<br><sup>位置 0–{last}</sup>",
    "wavelength": "每个维度对的波长 2π/θᵢ (token)",
    "decay": "q = k = 1 时 q·k 随距离的变化(远程衰减)",
    "base": "基数 {b:g}",
    "model_base": "基数 {b:g}(本模型)",
    "pair_axis": "维度对 i",
    "distance_axis": "相对距离 (token)",
    "base_caption": (
        "θᵢ = base^(−2i/d_h):基数越小,每个维度对转得越快,波长随之变短,q = k = 1 的得分在更少的 token 内就"
        "衰减并起伏。本模型使用基数 {a:g};虚线是基数 {b:g}。波长超过上下文长度({context})的维度对在上下文内"
        "转不满一圈。"
    ),
    "shift_title": "RoPE:只有距离起作用<br><sup>第 {layer} 层,头 {head}:查询“{q}”(位置 {m}),"
                   "键“{k}”(位置 {n})</sup>",
    "shift_panel": "把同一对 q、k 移到 (m + s, n + s):得分不变",
    "distance_panel": "同样的 q 和 k,键在 δ 个 token 之前:得分取决于 δ = m − n",
    "shift_axis": "平移量 s (token)",
    "score_axis": "缩放后的得分 q·k/√d",
    "recorded": "模型在 ({m}, {n}) 处实际算出的值",
    "shift_caption": (
        "⟨R_m q, R_n k⟩ = ⟨q, R_(n−m) k⟩(RoPE 的相对位置性质):两个 token 平移相同的 s,得分不变。在不超过 {top} 的平移下,"
        "{count} 个得分的差异在 {spread:.1e} 以内(浮点误差);模型自己在 ({m}, {n}) 处算出的是 {recorded:.6f}。"
        "只移动键会改变 m − n,得分也随之改变(下图;点线标出 m − n = {gap})。"
    ),
    "no_rope": "这个模型不使用 RoPE({reason});这一相对性质是 RoPE 特有的。",
    "schemes_title": "几种位置编码方案对比<br><sup>相对距离为 δ 时位置带来的影响;★ = 本模型</sup>",
    "names": {"sinusoidal": "正弦位置编码 (2017)", "learned": "可学习的绝对位置 (GPT-2, BART)",
              "rope": "RoPE (LLaMA)", "relative": "T5 相对位置偏置", "alibi": "ALiBi"},
    "y": {"sinusoidal": "PE(0)·PE(δ) / PE(0)·PE(0)", "learned": "余弦(P_p, P_p+δ)",
          "rope": "得分 / d_h", "relative": "偏置(或桶编号)", "alibi": "偏置 −m_h·δ"},
    "own": " ★",
    "formula": " · 按公式",
    "unavailable": "需要训练得到的表:本模型没有",
    "delta_axis": "δ (token)",
    "schemes_caption": (
        "正弦和可学习的方案把一个向量加到每个 token 的嵌入上;RoPE 旋转 q 和 k,使它们的得分取决于距离;T5 和 "
        "ALiBi 在得分上加一个只取决于距离的偏置(T5 为每个距离桶和每个头学习一个数,ALiBi 为每个头固定一个斜率)。"
        "本模型使用 **{own}**,它的曲线取自模型本身(它的表、频率或学到的权重);其他方案的曲线来自公式。"
    ),
    "hover_pair": "{label},维度对 %{{x}}:%{{y:.4g}} token<extra></extra>",
    "hover_distance": "{label},距离 %{{x}}:%{{y:.3f}}<extra></extra>",
    "tokens_axis": "token",
    "qk_axis": "q·k",
    "shifted": "平移后",
    "hover_shift": "平移 %{x},%{customdata}:%{y:.8f}<extra></extra>",
    "by_distance": "随距离变化",
    "hover_scheme": "{name},{label},δ %{{x}}:%{{y:.3f}}<extra></extra>",
    "labels": {"head": "头 {i}", "bucket": "δ 所在的桶"},
    "reason": "它的位置编码:{positional}",
    "positional": {"sinusoidal": "正弦位置编码", "learned": "可学习的绝对位置编码", "relative": "T5 相对位置偏置",
                   "none": "无"},
}
_T = Texts(TEXT, TEXT_ZH)


def _curve_label(label: str) -> str:
    """A curve label of `pe_schemes` ("head 3", "bucket of δ") in the current language."""
    if label == TEXT["labels"]["bucket"]:
        return _T["labels"]["bucket"]
    kind, _, index = label.partition(" ")
    return _T["labels"]["head"].format(i=int(index)) if kind == "head" and index.isdigit() else label


def _reason(reason: str) -> str:
    """The analysis' "this model's positions are X, not RoPE" in the current language; others as given."""
    prefix, suffix = TEXT["reason"].split("{positional}")
    if reason.startswith(prefix) and reason.endswith(suffix):
        kind = reason[len(prefix):len(reason) - len(suffix)]
        return _T["reason"].format(positional=_T["positional"].get(kind, kind))
    return reason


def rope_base_comparison(data: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Wavelength per pair and the q = k = 1 decay over the positions shown, at the model's and the
    compared base (a `positional_data` dict of a RoPE model)."""
    a, b = float(data["base"]), float(data["compare_base"])
    fig = make_subplots(rows=2, cols=1, subplot_titles=(_T["wavelength"], _T["decay"]), vertical_spacing=0.16)
    curves = ((data["inv_freq"], data["decay"], _T["model_base"].format(b=a), dict(color=OWN_COLOUR)),
              (data["compare_inv_freq"], data["compare_decay"], _T["base"].format(b=b),
               dict(color="#1f77b4", dash="dash")))
    for inv, dist_curve, label, line in curves:
        inv = np.asarray(inv)
        fig.add_trace(go.Scatter(x=np.arange(inv.size), y=2 * np.pi / inv, mode="lines+markers", name=label,
                                 legendgroup=label, line=line,
                                 hovertemplate=_T["hover_pair"].format(label=label)), row=1, col=1)
        fig.add_trace(go.Scatter(x=data["distances"], y=dist_curve, mode="lines", name=label, legendgroup=label,
                                 showlegend=False, line=line,
                                 hovertemplate=_T["hover_distance"].format(label=label)), row=2, col=1)
    fig.add_hline(y=data["context"], line=dict(dash="dot", color="grey"), row=1, col=1)
    fig.update_yaxes(type="log", title_text=_T["tokens_axis"], row=1, col=1)
    fig.update_xaxes(title_text=_T["pair_axis"], row=1, col=1)
    fig.update_xaxes(title_text=_T["distance_axis"], row=2, col=1)
    fig.update_yaxes(title_text=_T["qk_axis"], row=2, col=1)
    last = int(np.asarray(data["distances"])[-1])
    return finish(fig, title or _T["base_title"].format(a=a, b=b, last=last), height=640,
                  legend=dict(orientation="h", yanchor="top", y=-0.1, x=0))


def rope_base_caption(data: Mapping[str, Any]) -> str:
    return _T["base_caption"].format(a=float(data["base"]), b=float(data["compare_base"]), context=data["context"])


def rope_shift_figure(shift: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Top: the score of one real (q, k) pair at shifted positions (flat). Bottom: the same q, k with the
    key moved away: the score as a function of n − m."""
    if not shift.get("available"):
        raise ValueError("no RoPE in this model: nothing to draw (show rope_shift_caption instead)")
    fig = make_subplots(rows=2, cols=1, subplot_titles=(_T["shift_panel"], _T["distance_panel"]),
                        vertical_spacing=0.18)
    shifts, scores = np.asarray(shift["shifts"]), np.asarray(shift["scores"])
    pairs = [f"(m, n) = ({m}, {n})" for m, n in shift["positions"]]
    fig.add_trace(go.Scatter(x=shifts, y=scores, mode="lines+markers", name=_T["shifted"], customdata=pairs,
                             marker=dict(size=9, color=OWN_COLOUR), hovertemplate=_T["hover_shift"]), row=1, col=1)
    rec = _T["recorded"].format(m=shift["query_position"], n=shift["key_position"])
    fig.add_hline(y=shift["recorded_score"], line=dict(dash="dot", color="grey"), row=1, col=1,
                  annotation_text=rec, annotation_position="bottom right")
    gap = shift["query_position"] - shift["key_position"]
    fig.add_trace(go.Scatter(x=shift["distances"], y=shift["by_distance"], mode="lines", name=_T["by_distance"],
                             line=dict(color="#1f77b4"), hovertemplate="m − n = %{x}: %{y:.4f}<extra></extra>"),
                  row=2, col=1)
    fig.add_vline(x=gap, line=dict(dash="dot", color=OWN_COLOUR), row=2, col=1)
    spread = max(abs(float(scores.max() - scores.min())), 1e-9)
    mid = float(np.median(scores))
    fig.update_yaxes(range=[mid - 50 * spread - 1e-3 * abs(mid), mid + 50 * spread + 1e-3 * abs(mid)],
                     title_text=_T["score_axis"], row=1, col=1)
    fig.update_xaxes(title_text=_T["shift_axis"], row=1, col=1)
    fig.update_xaxes(title_text=_T["distance_axis"], row=2, col=1)
    fig.update_yaxes(title_text=_T["score_axis"], row=2, col=1)
    return finish(fig, title or _T["shift_title"].format(
        layer=shift["layer"], head=shift["head"], q=display_token(shift["query_label"]), m=shift["query_position"],
        k=display_token(shift["key_label"]), n=shift["key_position"]), height=600, showlegend=False)


def rope_shift_caption(shift: Mapping[str, Any]) -> str:
    if not shift.get("available"):
        return _T["no_rope"].format(reason=_reason(shift.get("reason", "")))
    return _T["shift_caption"].format(top=max(shift["shifts"]), count=len(shift["shifts"]), spread=shift["spread"],
                                        recorded=shift["recorded_score"], m=shift["query_position"],
                                        n=shift["key_position"], gap=shift["query_position"] - shift["key_position"])


def pe_schemes_figure(schemes: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Five panels stacked (one column stays legible on a phone), this model's starred and framed."""
    order = ("sinusoidal", "learned", "rope", "relative", "alibi")
    own = schemes["own"]
    def name(k: str) -> str:
        source = schemes["schemes"][k]["source"]
        return _T["names"][k] + (_T["own"] if k == own else _T["formula"] if source == "formula" else "")

    names = [name(k) for k in order]
    fig = make_subplots(rows=5, cols=1, subplot_titles=names, vertical_spacing=0.07)
    delta = np.asarray(schemes["distances"])
    for n, key in enumerate(order):
        row, col = n + 1, 1
        entry = schemes["schemes"][key]
        curves = np.asarray(entry["curves"])
        if curves.shape[0] == 0:
            fig.add_trace(go.Scatter(x=[delta[0], delta[-1]], y=[0, 0], mode="lines", hoverinfo="skip",
                                     showlegend=False, line=dict(color="rgba(0,0,0,0)")), row=row, col=col)
            fig.add_annotation(text=_T["unavailable"], showarrow=False, xref="x domain", yref="y domain", x=0.5,
                               y=0.5, font=dict(color="grey"), row=row, col=col)
        for i, (curve, label) in enumerate(zip(curves, entry["labels"])):
            colour = OWN_COLOUR if key == own and curves.shape[0] == 1 else _COLOURS[i % len(_COLOURS)]
            label = _curve_label(label)
            hover = _T["hover_scheme"].format(name=_T["names"][key], label=label)
            fig.add_trace(go.Scatter(x=delta, y=curve, mode="lines", name=label, showlegend=False,
                                     line=dict(color=colour, width=3 if key == own else 1.5), hovertemplate=hover),
                          row=row, col=col)
        fig.update_yaxes(title_text=_T["y"][key], title_font=dict(size=10), row=row, col=col)
        fig.update_xaxes(title_text=_T["delta_axis"] if row == 5 else None, row=row, col=col)
    if own in order:  # frame this model's panel
        fig.add_shape(type="rect", xref="x domain", yref="y domain", x0=-0.01, x1=1.01, y0=-0.06, y1=1.06,
                      line=dict(color=OWN_COLOUR, width=2), row=order.index(own) + 1, col=1)
    return finish(fig, title or _T["schemes_title"], height=1050)


def pe_schemes_caption(schemes: Mapping[str, Any]) -> str:
    own = schemes["own"]
    return _T["schemes_caption"].format(own=_T["names"].get(own, own))
