"""Attention-pattern gallery: masks with their cost, and the model's real weights under its
own mask (from `playground.analysis.patterns`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import PROB_SCALE, display_token, finish, pair_text, token_ticks
from playground.viz._language import Texts

MASK_COLOURS = [[0.0, "#f0f0f0"], [1.0, "#3182bd"]]
OWN_COLOUR = "#d62728"

TEXT = {
    "title": "Attention patterns at {T} tokens<br><sup>blue: the key is scored; the share is of full T × T</sup>",
    "names": {
        "full": "full", "causal": "causal", "sliding_window": "window {window}", "local_global": "local+global",
        "strided": "strided {stride}", "dilated": "dilated ×{dilation}", "padding": "padding {real}/{T}",
    },
    "panel": "{name}{own} {share:.0%}",
    "own": " ★",
    "weights_title": "Real weights under the mask<br><sup>{kind}, layer {layer}, head {head}; grey: hidden (−∞)</sup>",
    "kinds": {"self": "decoder self-attention", "encoder": "encoder self-attention"},
    "caption": (
        "Each panel is a T × T mask (query down, key across). Full attention scores all {full} cells; the causal "
        "mask {causal} ({causal_share:.0%}); a sliding window of {window} keeps {window_cells} ({window_share:.0%}) "
        "and grows only linearly with T. FLOPs per layer at this length: {flops}. ★ marks this model's own "
        "mask{window_note}. Local+global: the window plus the first {g} tokens, which every query sees. "
        "Strided: the last {stride} tokens, then one token in {stride} before them. Dilated: one token in "
        "{dilation} within the last {span}. Padding: a {real}-token sequence padded to {T}; the padding is hidden."
    ),
    "window_note": " (its window of {window} tokens comes from the config)",
    "weights_caption": (
        "The real weights of {kind} over this run's {T} tokens: every row sums to 1 over its visible keys, and the "
        "hidden cells carry {hidden:.1g}."
    ),
    # Each pattern's short name in hover and the caption's FLOPs list (English: the analysis' own keys).
    "keys": {"full": "full", "causal": "causal", "sliding_window": "sliding_window", "local_global": "local_global",
             "strided": "strided", "dilated": "dilated", "padding": "padding"},
    "flops_item": "{name} {mflops:.2f} M",
    "flops_sep": ", ",
    "hover_mask": "query %{{y}} → key %{{x}}<extra>{name}</extra>",
    "weight": "weight",
    "key": "key",
    "query": "query",
    "hover_pair": "%{text}: %{z:.3f}<extra></extra>",
    "hover_position": "query %{y} → key %{x}: %{z:.3f}<extra></extra>",
}
TEXT_ZH = {
    "title": "{T} 个 token 时的注意力模式<br><sup>蓝色:该键参与计算;百分比是相对完整 T × T 的比例</sup>",
    "names": {
        "full": "完整", "causal": "因果", "sliding_window": "滑动窗口 {window}", "local_global": "局部+全局",
        "strided": "跨步 {stride}", "dilated": "空洞 ×{dilation}", "padding": "填充 {real}/{T}",
    },
    "panel": "{name}{own} {share:.0%}",
    "own": " ★",
    "weights_title": "掩码下的真实权重<br><sup>{kind},第 {layer} 层,头 {head};灰色:被遮住 (−∞)</sup>",
    "kinds": {"self": "解码器自注意力", "encoder": "编码器自注意力"},
    "caption": (
        "每个面板是一个 T × T 的掩码(查询在纵轴,键在横轴)。完整注意力计算全部 {full} 个格子;因果掩码保留 "
        "{causal} 个({causal_share:.0%});大小为 {window} 的滑动窗口保留 {window_cells} 个({window_share:.0%}),"
        "且只随 T 线性增长。在这个长度下每层的 FLOPs:{flops}。★ 标出本模型自己的掩码{window_note}。"
        "局部+全局:窗口加上前 {g} 个 token,每个查询都能看到它们。跨步:最近 {stride} 个 token,再往前每 {stride} "
        "个取一个。空洞:在最近 {span} 个 token 内每 {dilation} 个取一个。填充:{real} 个 token 的序列被填充到 "
        "{T};填充部分被遮住。"
    ),
    "window_note": "(窗口大小 {window} 个 token 来自它的配置)",
    "weights_caption": (
        "{kind}在本次运行的 {T} 个 token 上的真实权重:每一行在可见的键上之和为 1,被遮住的格子上是 {hidden:.1g}。"
    ),
    "keys": {"full": "完整", "causal": "因果", "sliding_window": "滑动窗口", "local_global": "局部+全局",
             "strided": "跨步", "dilated": "空洞", "padding": "填充"},
    "flops_item": "{name} {mflops:.2f} M",
    "flops_sep": ",",
    "hover_mask": "查询 %{{y}} → 键 %{{x}}<extra>{name}</extra>",
    "weight": "权重",
    "key": "键 (key)",
    "query": "查询 (query)",
    "hover_pair": "%{text}:%{z:.3f}<extra></extra>",
    "hover_position": "查询 %{y} → 键 %{x}:%{z:.3f}<extra></extra>",
}
_T = Texts(TEXT, TEXT_ZH)


def _name(p: Mapping[str, Any], gallery: Mapping[str, Any]) -> str:
    g = gallery
    return _T["names"][p["key"]].format(window=g["window"], g=g["global_tokens"], stride=g["stride"],
                                          dilation=g["dilation"], span=g["window"] * g["dilation"],
                                          real=g["real_length"], T=g["length"])


def pattern_gallery_figure(gallery: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Every mask as a small heatmap, two per row, each titled with the share of cells it keeps."""
    patterns = gallery["patterns"]
    cols = 2
    rows = (len(patterns) + cols - 1) // cols
    titles = [_T["panel"].format(name=_name(p, gallery), own=_T["own"] if p["own"] else "",
                                   share=p["fraction_of_full"]) for p in patterns]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.06,
                        vertical_spacing=0.3 / rows)
    for n, p in enumerate(patterns):
        row, col = n // cols + 1, n % cols + 1
        hover = _T["hover_mask"].format(name=_T["keys"][p["key"]])
        fig.add_trace(go.Heatmap(z=p["mask"].astype(float), colorscale=MASK_COLOURS, zmin=0, zmax=1, showscale=False,
                                 hovertemplate=hover), row=row, col=col)
        if p["own"]:
            suffix = "" if n == 0 else str(n + 1)
            fig.add_shape(type="rect", xref=f"x{suffix} domain", yref=f"y{suffix} domain", x0=0, x1=1, y0=0, y1=1,
                          line=dict(color=OWN_COLOUR, width=3))
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    return finish(fig, title or _T["title"].format(T=gallery["length"]), height=160 + 230 * rows)


def pattern_gallery_caption(gallery: Mapping[str, Any]) -> str:
    by = {p["key"]: p for p in gallery["patterns"]}
    flops = _T["flops_sep"].join(_T["flops_item"].format(name=_T["keys"][k], mflops=by[k]["flops_per_layer"] / 1e6)
                                 for k in ("full", "causal", "sliding_window"))
    return _T["caption"].format(
        full=by["full"]["cells"], causal=by["causal"]["cells"], causal_share=by["causal"]["fraction_of_full"],
        window=gallery["window"], window_cells=by["sliding_window"]["cells"],
        window_share=by["sliding_window"]["fraction_of_full"], flops=flops,
        window_note=_T["window_note"].format(window=gallery["window"]) if gallery["window_is_models"] else "",
        g=gallery["global_tokens"], stride=gallery["stride"], dilation=gallery["dilation"],
        span=gallery["window"] * gallery["dilation"], real=gallery["real_length"], T=gallery["length"],
    )


def own_weights_figure(data: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """One head's (T, S) weights with the hidden cells left grey."""
    w = np.where(data["mask"], data["weights"], np.nan)
    q = [display_token(t) for t in data["query_labels"]]
    k = [display_token(t) for t in data["key_labels"]]
    # Token pairs in the hover for short runs; beyond that the axes carry the tokens (a 500 × 500 map
    # would send a quarter of a million strings to the page).
    hover = dict(text=pair_text(q, k), hovertemplate=_T["hover_pair"]) if len(q) * len(k) <= 20_000 \
        else dict(hovertemplate=_T["hover_position"])
    fig = go.Figure(go.Heatmap(z=w, colorscale=PROB_SCALE, zmin=0.0, zmax=1.0,
                               colorbar=dict(title=dict(text=_T["weight"])), **hover))
    fig.update_xaxes(title_text=_T["key"], tickangle=-60, showgrid=False, **token_ticks(k))
    fig.update_yaxes(title_text=_T["query"], autorange="reversed", showgrid=False, **token_ticks(q))
    kind = _T["kinds"].get(data["kind"], data["kind"])
    return finish(fig, title or _T["weights_title"].format(kind=kind, layer=data["layer"], head=data["head"]),
                  height=int(min(720, max(360, 200 + 14 * len(q)))), plot_bgcolor="#d9d9d9")


def own_weights_caption(data: Mapping[str, Any]) -> str:
    return _T["weights_caption"].format(kind=_T["kinds"].get(data["kind"], data["kind"]),
                                          T=len(data["query_labels"]), hidden=data["hidden_mass"])
