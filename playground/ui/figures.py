"""Figures in the visitor's language: the figure builders write English; this puts their words in 中文.

The builders in `playground.viz` stay pure and English; the page passes translated titles itself,
and `localize` rewrites the rest (axis titles, legends, colour bars, annotations, table headers,
hover text) with the phrases below, longest first. No Gradio here.
"""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go

ZH: dict[str, str] = {
    # candidates and beams
    "candidate token": "候选 token", "probability": "概率", "raw softmax": "原始 softmax",
    "repetition penalty": "重复惩罚", "temperature": "温度", "removed by": "被过滤:", "chosen": "选中",
    "no candidates yet: run a generation step": "还没有候选词:先生成一步",
    "beam rank": "束排名", "score (nats)": "得分 (nats)", "winning beam": "获胜的束", "extends": "延伸",
    "hypothesis": "假设序列", "finished": "已完成", "open": "进行中", "status": "状态", "rank": "排名",
    "score": "得分", "step": "步", "no beams yet: run beam search (num_beams > 1)": "还没有束:请用束搜索(束宽 > 1)",
    # attention
    "attention weight": "注意力权重", "key token": "键 token", "weight": "权重", "key": "键 (key)",
    "query": "查询 (query)", "entropy (nats)": "熵 (nats)", "mean distance (tokens)": "平均距离 (token)",
    "mean distance": "平均距离", "entropy": "熵", "layer": "层", "head": "头", "tokens": "token",
    # KV cache and timing
    "KV cache used": "已用 KV Cache", "allocated (static buffer)": "已分配(静态缓冲区)", "MHA equivalent": "MHA 等价",
    "smaller than MHA": "比 MHA 小", "memory": "显存", "step (tokens in cache)": "步(缓存中的 token 数)",
    "with KV cache": "使用 KV Cache", "without KV cache": "不使用 KV Cache", "faster decode with cache": "使用缓存解码更快",
    "slower decode with cache": "使用缓存解码更慢", "tokens / s": "token/秒", "decode per token": "每个 token 解码",
    "prefill": "Prefill",
    # positional encodings
    "position i": "位置 i", "position j": "位置 j", "position": "位置", "dimension pair i": "维度对 i",
    "dimension": "维度", "PE value": "PE 值", "value": "值", "cosine": "余弦", "wavelength": "波长",
    "frequency": "频率", "unit circle": "单位圆", "positions": "位置", "relative distance (key − query)": "相对距离(键 − 查询)",
    "relative distance (tokens)": "相对距离 (token)", "bias added to logit": "加到 logit 上的偏置",
    "q·k score": "q·k 得分", "rad / token": "弧度 / token",
}
# Whole words only: "step" must not turn "steps" into half a translation.
_PATTERN = re.compile(r"(?<![A-Za-z])(" + "|".join(re.escape(k) for k in sorted(ZH, key=len, reverse=True))
                      + r")(?![A-Za-z])")


def translate(text: Any) -> Any:
    if not isinstance(text, str) or not text:
        return text
    return _PATTERN.sub(lambda m: ZH[m.group(0)], text)


def _title(obj: Any) -> None:
    if obj is not None and getattr(obj, "title", None) is not None and obj.title.text:
        obj.title.text = translate(obj.title.text)


def localize(fig: go.Figure, lang: str) -> go.Figure:
    """`fig` with its English phrases in `lang` (a no-op for English); changes `fig` in place."""
    if lang != "zh" or not isinstance(fig, go.Figure):
        return fig
    layout = fig.layout
    for name in layout:
        if name.startswith(("xaxis", "yaxis")):
            _title(layout[name])
    if layout.coloraxis is not None and layout.coloraxis.colorbar is not None:
        _title(layout.coloraxis.colorbar)
    for annotation in layout.annotations or ():
        annotation.text = translate(annotation.text)
    for trace in fig.data:
        if getattr(trace, "name", None):
            trace.name = translate(trace.name)
        if getattr(trace, "hovertemplate", None):
            trace.hovertemplate = translate(trace.hovertemplate)
        if getattr(trace, "marker", None) is not None and getattr(trace.marker, "colorbar", None) is not None:
            _title(trace.marker.colorbar)
        if getattr(trace, "colorbar", None) is not None:
            _title(trace.colorbar)
        if trace.type == "table":
            trace.header.values = [translate(v) for v in trace.header.values]
            trace.cells.values = [[translate(v) if isinstance(v, str) and v in ("finished", "open") else v for v in col]
                                  for col in trace.cells.values]
        if trace.type == "bar" and trace.text is not None and not isinstance(trace.text, str):
            trace.text = [translate(v) for v in trace.text]
    return fig
