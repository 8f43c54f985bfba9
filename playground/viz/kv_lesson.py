"""The KV-cache lesson: cost per step by formula, prefill vs decode shapes, the measured
comparison and the memory what-if. Draws the dicts of `playground.analysis.kv_lesson` / `kv_memory`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import display_text, finish
from playground.viz._language import Texts
from playground.viz.cache import WITH_CACHE_COLOUR, WITHOUT_CACHE_COLOUR, format_bytes

GB = 10**9

TEXT = {
    "cost_title": "Cost of one step, by formula<br><sup>with and without the KV cache; x: keys attended (T + 1)</sup>",
    "flops_panel": "FLOPs per step (log scale)",
    "bytes_panel": "bytes per step",
    "attn_cached": "attention, with cache (1 × (T+1))",
    "attn_uncached": "attention, no cache ((T+1) × (T+1))",
    "total_cached": "whole step, with cache",
    "total_uncached": "whole step, no cache",
    "kv_read": "K/V read from the cache (with cache)",
    "weights": "weights read (both)",
    "keys_axis": "keys attended (T + 1)",
    "cost_caption": (
        "At T + 1 = {keys} keys a decode step with the cache computes {attn_c} attention FLOPs (1 query) instead "
        "of {attn_u} ((T + 1)² scores, every position again), and {total_c} instead of {total_u} FLOPs in all, "
        "{ratio:.0f}× less. The price is memory traffic: every step reads the whole cache, {kv} at this length, "
        "next to {weights} of weights. Attention work without the cache grows with T², with it only with T."
    ),
    "shapes_title": "Prefill vs decode<br><sup>one head's scores: L_p × L_p once, then 1 × (T + 1) per step</sup>",
    "prefill": "prefill: {n} × {n}  (Q {q} · Kᵀ → {s})",
    "decode": "decode step {step}: 1 × {keys}  (Q {q} · Kᵀ → {s})",
    "encoder": "encoder (once): {n} × {n}  (Q {q} · Kᵀ → {s})",
    "visible": "computed",
    "masked": "masked (−∞)",
    "shapes_caption": (
        "The prefill scores all {n} prompt tokens against each other at once ({pf} FLOPs per layer, "
        "compute-bound). Each decode step scores one query against the T + 1 = {keys} cached keys ({df} FLOPs "
        "per layer) but must read the whole cache: memory-bound."
    ),
    "shapes_caption_seq2seq": (
        "The encoder reads the {s} source tokens once, {s} × {s} ({ef} FLOPs per layer); the decoder's prefill is "
        "just its start token. Each decode step then scores one query against the T + 1 = {keys} cached keys "
        "({df} FLOPs per layer) and reads the whole cache, plus the source's cross-attention K/V."
    ),
    "timing_title": (
        "Measured time per step<br><sup>with and without the cache; median of {repeats} runs each, after warm-up</sup>"
    ),
    "cached": "with KV cache",
    "uncached": "without KV cache",
    "fit": "{mode}: {fixed:.2f} ms + {slope:.4f} ms × keys",
    "ms_axis": "ms per step",
    "verdict_cache_wins": (
        "**The cache wins: {speedup:.2f}× faster decode** (median {c:.2f} ms vs {u:.2f} ms per token, "
        "spread {c_lo:.2f}–{c_hi:.2f} vs {u_lo:.2f}–{u_hi:.2f} ms). Without the cache a step costs "
        "{u_fixed:.2f} ms + {u_slope:.4f} ms per token of context, so it grows as the text gets longer; with the "
        "cache it stays near {c_fixed:.2f} ms."
    ),
    "verdict_overhead": (
        "**Per-step overhead dominates here: {speedup:.2f}×** (median {c:.2f} ms with the cache vs {u:.2f} ms "
        "without, spread {c_lo:.2f}–{c_hi:.2f} vs {u_lo:.2f}–{u_hi:.2f} ms). This model has {params} parameters: "
        "every step pays a fixed ≈{c_fixed:.2f} ms (Python, one kernel launch per operation in every layer, reading "
        "the weights) whatever the context, while recomputing a token of context costs only ≈{u_slope:.4f} ms. At "
        "{keys} keys the cache saves ≈{saved:.2f} ms of work per step, too little to show through the noise."
    ),
    "verdict_slower": (
        "**The cache is slower here: {speedup:.2f}×** (median {c:.2f} ms with vs {u:.2f} ms without, spread "
        "{c_lo:.2f}–{c_hi:.2f} vs {u_lo:.2f}–{u_hi:.2f} ms). With only {params} parameters the attention work the "
        "cache saves (≈{u_slope:.4f} ms per token of context) is smaller than what a cached step adds (writing K/V "
        "into the cache, the masks and views of a longer buffer): a fixed {c_fixed:.2f} ms vs {u_fixed:.2f} ms."
    ),
    "crossover": " The fitted lines cross at ≈{cross:.0f} keys: beyond that the cache wins{limit}.",
    "crossover_inside": (
        " The fitted lines cross at ≈{cross:.0f} keys: below that a cached step costs more than the work it "
        "saves; every further key saves ≈{gain:.4f} ms."
    ),
    "crossover_limit": " (this model holds at most {limit} positions)",
    "no_crossover": (
        " Without the cache the cost per step grows faster with the context; the cache wins from the start."
    ),
    "flops_note": (
        " By formula the last step attends {keys} keys: {attn_c} attention FLOPs with the cache vs {attn_u} without."
    ),
    "memory_title": "KV-cache memory<br><sup>2 · N · B · h_kv · T · d_h · s · {name}</sup>",
    "memory_axis": "memory (GB = 10⁹ bytes, log scale)",
    "tokens_axis": "tokens in the cache T (log scale)",
    "here": "these settings",
    "live": "this run (real cache)",
    "memory_caption": (
        "**2 · N · B · h_kv · T · d_h · s** = 2 · {N} · {B} · {hkv} · {T} · {d} · {s:g} = **{bytes:,} bytes** = "
        "{decimal} ({binary}). {kind}: {hkv} K/V head(s) for {q} query heads; MHA would need {mha}, MQA {mqa}."
    ),
    "memory_seed": " The worked example this preset comes from gives {expected} GB: reproduced.",
    "memory_live": (
        " This run's cache holds {tokens} tokens: {bytes:,} bytes, exactly what the formula gives ({formula_bytes:,})."
    ),
    "hover_flops": "{name}, %{{x}} keys: %{{customdata}}FLOPs<extra></extra>",
    "hover_bytes": "{name}, %{{x}} keys: %{{customdata}}<extra></extra>",
    "flops_axis": "FLOPs",
    "bytes_axis": "bytes",
    "hover_prefill": "query %{y} → key %{x}: %{customdata}<extra>prefill</extra>",
    "hover_decode": "new token → key %{x}<extra>decode</extra>",
    "hover_ms": "{name}, %{{x}} keys: %{{y:.2f}} ms<extra></extra>",
    "variant_one": "{kind} ({heads} KV head)",
    "variant_many": "{kind} ({heads} KV heads)",
    "hover_variant": "{label}, T = %{{x:,}}: %{{y:.3f}} GB<extra></extra>",
    "hover_here": "%{x:,} tokens: %{y:.4f} GB<extra></extra>",
    "hover_live": "%{{x:,}} tokens: {bytes:,} bytes<extra></extra>",
}
TEXT_ZH = {
    "cost_title": "每一步的计算量(按公式)<br><sup>使用与不使用 KV Cache;x 轴:参与注意力的键数 (T + 1)</sup>",
    "flops_panel": "每步 FLOPs(对数坐标)",
    "bytes_panel": "每步读取的字节数",
    "attn_cached": "注意力,使用缓存 (1 × (T+1))",
    "attn_uncached": "注意力,不使用缓存 ((T+1) × (T+1))",
    "total_cached": "整步,使用缓存",
    "total_uncached": "整步,不使用缓存",
    "kv_read": "从缓存读取的 K/V(使用缓存时)",
    "weights": "读取的权重(两种情况相同)",
    "keys_axis": "参与注意力的键数 (T + 1)",
    "cost_caption": (
        "在 T + 1 = {keys} 个键时,使用缓存的一个 Decode 步的注意力计算量为 {attn_c} FLOPs(1 个查询),"
        "不用缓存则为 {attn_u}((T + 1)² 个分数,每个位置都重算一遍);整步合计 {total_c} 对 {total_u} FLOPs,"
        "少了 {ratio:.0f}×。代价是显存访问:每一步都要读取整个缓存,在这个长度下是 {kv},另外还要读取 {weights} "
        "的权重。不用缓存时注意力的计算量随 T² 增长,使用缓存时只随 T 增长。"
    ),
    "shapes_title": "Prefill 与 Decode<br><sup>一个头的分数矩阵:先算一次 L_p × L_p,之后每步 1 × (T + 1)</sup>",
    "prefill": "Prefill:{n} × {n}  (Q {q} · Kᵀ → {s})",
    "decode": "Decode 第 {step} 步:1 × {keys}  (Q {q} · Kᵀ → {s})",
    "encoder": "编码器(只算一次):{n} × {n}  (Q {q} · Kᵀ → {s})",
    "visible": "已计算",
    "masked": "被掩码 (−∞)",
    "shapes_caption": (
        "Prefill 一次性让全部 {n} 个提示词 token 两两计算分数(每层 {pf} FLOPs,计算密集型)。每个 Decode 步只用"
        "一个查询与 T + 1 = {keys} 个缓存的键计算分数(每层 {df} FLOPs),但必须读取整个缓存:显存带宽密集型。"
    ),
    "shapes_caption_seq2seq": (
        "编码器只读一次 {s} 个源 token,{s} × {s}(每层 {ef} FLOPs);解码器的 Prefill 只有它的起始 token。"
        "之后每个 Decode 步用一个查询与 T + 1 = {keys} 个缓存的键计算分数(每层 {df} FLOPs),并读取整个缓存,"
        "外加源文本的交叉注意力 K/V。"
    ),
    "timing_title": "实测每步耗时<br><sup>使用与不使用缓存;预热后各运行 {repeats} 次,取中位数</sup>",
    "cached": "使用 KV Cache",
    "uncached": "不使用 KV Cache",
    "fit": "{mode}:{fixed:.2f} ms + {slope:.4f} ms × 键数",
    "ms_axis": "每步耗时 (ms)",
    "verdict_cache_wins": (
        "**缓存胜出:Decode 快 {speedup:.2f}×**(每 token 中位数 {c:.2f} ms 对 {u:.2f} ms,"
        "波动范围 {c_lo:.2f}–{c_hi:.2f} 对 {u_lo:.2f}–{u_hi:.2f} ms)。不用缓存时每步耗时为 "
        "{u_fixed:.2f} ms + 每个上下文 token {u_slope:.4f} ms,文本越长越慢;使用缓存时则保持在 {c_fixed:.2f} ms 左右。"
    ),
    "verdict_overhead": (
        "**这里每步的固定开销占主导:{speedup:.2f}×**(中位数:使用缓存 {c:.2f} ms,不使用 {u:.2f} ms,"
        "波动范围 {c_lo:.2f}–{c_hi:.2f} 对 {u_lo:.2f}–{u_hi:.2f} ms)。这个模型有 {params} 个参数:无论上下文多长,"
        "每一步都有 ≈{c_fixed:.2f} ms 的固定开销(Python、每层每个运算一次 kernel 启动、读取权重),而重算一个"
        "上下文 token 只需 ≈{u_slope:.4f} ms。在 {keys} 个键时,缓存每步只省下 ≈{saved:.2f} ms 的计算,被噪声淹没了。"
    ),
    "verdict_slower": (
        "**这里缓存反而更慢:{speedup:.2f}×**(中位数:使用缓存 {c:.2f} ms,不使用 {u:.2f} ms,波动范围 "
        "{c_lo:.2f}–{c_hi:.2f} 对 {u_lo:.2f}–{u_hi:.2f} ms)。模型只有 {params} 个参数,缓存省下的注意力计算"
        "(每个上下文 token ≈{u_slope:.4f} ms)比使用缓存的一步额外增加的开销(把 K/V 写入缓存、在更长的缓冲区上"
        "做掩码和视图)还少:固定开销为 {c_fixed:.2f} ms 对 {u_fixed:.2f} ms。"
    ),
    "crossover": "两条拟合直线在 ≈{cross:.0f} 个键处相交:超过这个长度,缓存就会胜出{limit}。",
    "crossover_inside": (
        "两条拟合直线在 ≈{cross:.0f} 个键处相交:在此之前,使用缓存的一步比它省下的计算更费时;"
        "之后每多一个键就多省 ≈{gain:.4f} ms。"
    ),
    "crossover_limit": "(这个模型最多只能容纳 {limit} 个位置)",
    "no_crossover": "不用缓存时每步耗时随上下文增长得更快;缓存从一开始就胜出。",
    "flops_note": "按公式,最后一步关注 {keys} 个键:注意力计算量使用缓存为 {attn_c} FLOPs,不使用为 {attn_u}。",
    "memory_title": "KV Cache 显存<br><sup>2 · N · B · h_kv · T · d_h · s · {name}</sup>",
    "memory_axis": "显存(GB = 10⁹ 字节,对数坐标)",
    "tokens_axis": "缓存中的 token 数 T(对数坐标)",
    "here": "当前设置",
    "live": "本次运行(真实缓存)",
    "memory_caption": (
        "**2 · N · B · h_kv · T · d_h · s** = 2 · {N} · {B} · {hkv} · {T} · {d} · {s:g} = **{bytes:,} 字节** = "
        "{decimal}({binary})。{kind}:{q} 个查询头对应 {hkv} 个 K/V 头;MHA 需要 {mha},MQA 需要 {mqa}。"
    ),
    "memory_seed": "这个预设所取自的经典算例给出的是 {expected} GB:结果一致。",
    "memory_live": "本次运行的缓存中有 {tokens} 个 token:{bytes:,} 字节,与公式的结果({formula_bytes:,})完全一致。",
    "hover_flops": "{name},%{{x}} 个键:%{{customdata}}FLOPs<extra></extra>",
    "hover_bytes": "{name},%{{x}} 个键:%{{customdata}}<extra></extra>",
    "flops_axis": "FLOPs",
    "bytes_axis": "字节",
    "hover_prefill": "查询 %{y} → 键 %{x}:%{customdata}<extra>Prefill</extra>",
    "hover_decode": "新 token → 键 %{x}<extra>Decode</extra>",
    "hover_ms": "{name},%{{x}} 个键:%{{y:.2f}} ms<extra></extra>",
    "variant_one": "{kind}({heads} 个 KV 头)",
    "variant_many": "{kind}({heads} 个 KV 头)",
    "hover_variant": "{label},T = %{{x:,}}:%{{y:.3f}} GB<extra></extra>",
    "hover_here": "%{x:,} 个 token:%{y:.4f} GB<extra></extra>",
    "hover_live": "%{{x:,}} 个 token:{bytes:,} 字节<extra></extra>",
}
_T = Texts(TEXT, TEXT_ZH)


def decimal_bytes(n: float) -> str:
    """Bytes in decimal units: 4294967296 -> '4.29 GB', 393216 -> '393 kB'."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _human_flops(x: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.0f}"


def kv_cost_chart(costs: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """FLOPs (log) and bytes per decode step against T + 1, with and without the cache."""
    keys = np.asarray(costs["keys"])[1:]
    if keys.size == 0:
        raise ValueError("costs need at least one decode step (new_tokens >= 2)")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(_T["flops_panel"], _T["bytes_panel"]))
    series = (
        ("attention_flops_cached", "attn_cached", WITH_CACHE_COLOUR, "dot"),
        ("attention_flops_uncached", "attn_uncached", WITHOUT_CACHE_COLOUR, "dot"),
        ("total_flops_cached", "total_cached", WITH_CACHE_COLOUR, "solid"),
        ("total_flops_uncached", "total_uncached", WITHOUT_CACHE_COLOUR, "solid"),
    )
    for key, name, colour, dash in series:
        y = np.asarray(costs[key])[1:].astype(np.float64)
        fig.add_trace(go.Scatter(x=keys, y=y, name=_T[name], mode="lines", line=dict(color=colour, dash=dash),
                                 customdata=[_human_flops(v) for v in y],
                                 hovertemplate=_T["hover_flops"].format(name=_T[name])),
                      row=1, col=1)
    kv = np.asarray(costs["kv_bytes_read_cached"])[1:]
    weights = np.asarray(costs["weight_bytes"])[1:]
    for y, name, colour in ((kv, "kv_read", WITH_CACHE_COLOUR), (weights, "weights", "#636363")):
        fig.add_trace(go.Scatter(x=keys, y=y, name=_T[name], mode="lines", line=dict(color=colour),
                                 customdata=[format_bytes(v) for v in y],
                                 hovertemplate=_T["hover_bytes"].format(name=_T[name])), row=2, col=1)
    fig.update_yaxes(type="log", title_text=_T["flops_axis"], row=1, col=1)
    fig.update_yaxes(title_text=_T["bytes_axis"], rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=_T["keys_axis"], row=2, col=1)
    return finish(fig, title or _T["cost_title"], height=620,
                  legend=dict(orientation="h", yanchor="top", y=-0.12, x=0))


def kv_cost_caption(costs: Mapping[str, Any]) -> str:
    i = -1
    tc, tu = float(costs["total_flops_cached"][i]), float(costs["total_flops_uncached"][i])
    return _T["cost_caption"].format(
        keys=int(costs["keys"][i]), attn_c=_human_flops(costs["attention_flops_cached"][i]),
        attn_u=_human_flops(costs["attention_flops_uncached"][i]), total_c=_human_flops(tc),
        total_u=_human_flops(tu), ratio=tu / max(tc, 1.0), kv=format_bytes(float(costs["kv_bytes_read_cached"][i])),
        weights=format_bytes(float(costs["weight_bytes"][i])),
    )


def prefill_decode_figure(shapes: Mapping[str, Any], title: str | None = None, max_cells: int = 64) -> go.Figure:
    """The prefill's causal L_p × L_p matrix above the decode step's 1 × (T + 1) row (cells shown to scale
    up to `max_cells` per side)."""
    seq2seq = shapes.get("kind") == "seq2seq"
    pf, dc = shapes["encoder" if seq2seq else "prefill"], shapes["decode"]  # seq2seq: the source is the big pass
    n, keys = int(pf["queries"]), int(dc["keys"])
    shown_n, shown_k = min(n, max_cells), min(keys, max_cells)
    tri = np.ones((shown_n, shown_n)) if seq2seq else np.tril(np.ones((shown_n, shown_n)))
    row = np.ones((1, shown_k))
    fmt = lambda s: "(" + ", ".join(str(v) for v in s) + ")"  # noqa: E731
    first = _T["encoder"] if seq2seq else _T["prefill"]
    titles = (first.format(n=n, q=fmt(pf["q_shape"]), s=fmt(pf["scores_shape"])),
              _T["decode"].format(step=shapes["step"], keys=keys, q=fmt(dc["q_shape"]), s=fmt(dc["scores_shape"])))
    fig = make_subplots(rows=2, cols=1, subplot_titles=titles, row_heights=[0.85, 0.15], vertical_spacing=0.12)
    scale = [[0.0, "#f0f0f0"], [1.0, WITH_CACHE_COLOUR]]
    fig.add_trace(go.Heatmap(z=tri, colorscale=scale, zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
                             customdata=np.where(tri > 0, _T["visible"], _T["masked"]),
                             hovertemplate=_T["hover_prefill"]), row=1, col=1)
    fig.add_trace(go.Heatmap(z=row, colorscale=scale, zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
                             hovertemplate=_T["hover_decode"]), row=2, col=1)
    fig.update_yaxes(autorange="reversed", showgrid=False, scaleanchor="x", row=1, col=1)
    fig.update_yaxes(showticklabels=False, showgrid=False, row=2, col=1)
    fig.update_xaxes(showgrid=False, range=[-0.5, max(shown_n, shown_k) - 0.5])
    return finish(fig, title or _T["shapes_title"], height=560)


def prefill_decode_caption(shapes: Mapping[str, Any]) -> str:
    if shapes.get("kind") == "seq2seq":
        return _T["shapes_caption_seq2seq"].format(s=shapes["encoder"]["queries"], keys=shapes["decode"]["keys"],
                                                     ef=_human_flops(shapes["encoder"]["flops_per_layer"]),
                                                     df=_human_flops(shapes["decode"]["flops_per_layer"]))
    return _T["shapes_caption"].format(n=shapes["prefill"]["queries"], keys=shapes["decode"]["keys"],
                                         pf=_human_flops(shapes["prefill"]["flops_per_layer"]),
                                         df=_human_flops(shapes["decode"]["flops_per_layer"]))


def cache_timing_figure(timing: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Median ms per step against keys for both modes, with each mode's fitted line."""
    keys = np.asarray(timing["keys"], dtype=np.float64)[1:]
    fig = go.Figure()
    for mode, colour in (("cached", WITH_CACHE_COLOUR), ("uncached", WITHOUT_CACHE_COLOUR)):
        ms = np.asarray(timing[mode]["step_ms"])[1:]
        fit = timing[mode]["fit"]
        fig.add_trace(go.Scatter(x=keys, y=ms, mode="markers", name=_T[mode], marker=dict(color=colour, size=5),
                                 hovertemplate=_T["hover_ms"].format(name=_T[mode])))
        fig.add_trace(go.Scatter(x=keys, y=fit["fixed_ms"] + fit["per_key_ms"] * keys, mode="lines",
                                 line=dict(color=colour, dash="dash"), hoverinfo="skip",
                                 name=_T["fit"].format(mode=_T[mode], fixed=fit["fixed_ms"],
                                                         slope=fit["per_key_ms"])))
    fig.update_xaxes(title_text=_T["keys_axis"])
    fig.update_yaxes(title_text=_T["ms_axis"], rangemode="tozero")
    return finish(fig, title or _T["timing_title"].format(repeats=timing["repeats"]), height=420,
                  legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))


def cache_timing_caption(timing: Mapping[str, Any]) -> str:
    """The plain verdict: who wins, by how much, and why (fixed per-step cost vs work per token)."""
    c, u = timing["cached"], timing["uncached"]
    keys = int(timing["keys"][-1])
    fc, fu = c["fit"], u["fit"]
    saved = (fu["fixed_ms"] + fu["per_key_ms"] * keys) - (fc["fixed_ms"] + fc["per_key_ms"] * keys)
    values = dict(
        speedup=timing["speedup"], c=c["decode_ms"]["median"], u=u["decode_ms"]["median"],
        c_lo=c["decode_ms"]["min"], c_hi=c["decode_ms"]["max"], u_lo=u["decode_ms"]["min"],
        u_hi=u["decode_ms"]["max"], c_fixed=fc["fixed_ms"], u_fixed=fu["fixed_ms"], u_slope=fu["per_key_ms"],
        params=f"{timing['parameters'] / 1e6:.1f}M", keys=keys, saved=max(saved, 0.0),
    )
    key = {"cache_wins": "verdict_cache_wins", "overhead_dominates": "verdict_overhead",
           "cache_slower": "verdict_slower"}[timing["verdict"]]
    text = _T[key].format(**values)
    cross = timing.get("crossover_keys")
    if cross is not None and cross > keys:
        limit = timing.get("context_limit")
        text += _T["crossover"].format(cross=cross, limit=_T["crossover_limit"].format(limit=limit)
                                         if limit and cross > limit else "")
    elif cross is not None and cross > 0:
        text += _T["crossover_inside"].format(cross=cross, gain=fu["per_key_ms"] - fc["per_key_ms"])
    elif cross is not None and timing["verdict"] == "cache_wins":
        text += _T["no_crossover"]
    f = timing["flops_last_step"]
    return text + _T["flops_note"].format(keys=f["keys"], attn_c=_human_flops(f["attention_cached"]),
                                            attn_u=_human_flops(f["attention_uncached"]))


def kv_memory_chart(what_if: Mapping[str, Any], name: str = "", title: str | None = None) -> go.Figure:
    """Bytes against T (log x) for MHA, GQA and MQA at the chosen B, d_h, N, s; the current setting,
    the worked example's number and this run's real cache marked."""
    curve = what_if["curve"]
    t = np.asarray(curve["tokens"], dtype=np.float64)
    fig = go.Figure()
    colours = {"MHA": "#fd8d3c", "GQA": "#3182bd", "MQA": "#31a354"}
    for kind in ("MHA", "GQA", "MQA"):
        y = np.asarray(curve[kind], dtype=np.float64) / GB
        heads = {"MHA": what_if["query_heads"], "GQA": what_if["gqa_kv_heads"], "MQA": 1}[kind]
        label = _T["variant_many" if heads > 1 else "variant_one"].format(kind=kind, heads=heads)
        fig.add_trace(go.Scatter(x=t, y=y, mode="lines", name=label, line=dict(color=colours[kind],
                                 width=4 if kind == what_if["attention"] else 2),
                                 hovertemplate=_T["hover_variant"].format(label=label)))
    fig.add_trace(go.Scatter(x=[max(what_if["tokens"], 1)], y=[what_if["bytes"] / GB], mode="markers+text",
                             name=_T["here"], marker=dict(size=12, color="black", symbol="x"),
                             text=[decimal_bytes(what_if["bytes"])], textposition="top left",
                             hovertemplate=_T["hover_here"]))
    live = what_if.get("live")
    if live:
        fig.add_trace(go.Scatter(x=[max(live["tokens"], 1)], y=[live["bytes"] / GB], mode="markers",
                                 name=_T["live"], marker=dict(size=12, color="red", symbol="diamond"),
                                 hovertemplate=_T["hover_live"].format(bytes=live["bytes"])))
    fig.update_xaxes(type="log", title_text=_T["tokens_axis"])
    fig.update_yaxes(title_text=_T["memory_axis"], type="log")  # log-log: linear growth is a straight line
    return finish(fig, title or _T["memory_title"].format(name=display_text(name)), height=440,
                  legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))


def kv_memory_caption(what_if: Mapping[str, Any]) -> str:
    w = what_if
    text = _T["memory_caption"].format(
        N=w["layers"], B=w["batch"], hkv=w["kv_heads"], T=w["tokens"], d=w["head_dim"], s=w["bytes_per_element"],
        bytes=w["bytes"], decimal=decimal_bytes(w["bytes"]), binary=format_bytes(w["bytes"]), kind=w["attention"],
        q=w["query_heads"], mha=decimal_bytes(w["variants"]["MHA"]), mqa=decimal_bytes(w["variants"]["MQA"]),
    )
    if w.get("expected_gb") is not None and round(w["gb"], 1) == w["expected_gb"]:
        text += _T["memory_seed"].format(expected=w["expected_gb"])
    if w.get("live"):
        text += _T["memory_live"].format(**w["live"])
    return text
