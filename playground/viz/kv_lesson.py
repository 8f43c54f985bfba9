"""The KV-cache lesson (seed 002): cost per step by formula, prefill vs decode shapes, the measured
comparison and the memory what-if. Draws the dicts of `playground.analysis.kv_lesson` / `kv_memory`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import display_text, finish
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
    "seed": "seed 002: {gb} GB",
    "memory_caption": (
        "**2 · N · B · h_kv · T · d_h · s** = 2 · {N} · {B} · {hkv} · {T} · {d} · {s:g} = **{bytes:,} bytes** = "
        "{decimal} ({binary}). {kind}: {hkv} K/V head(s) for {q} query heads; MHA would need {mha}, MQA {mqa}."
    ),
    "memory_seed": " Seed 002 gives {expected} GB: reproduced.",
    "memory_live": (
        " This run's cache holds {tokens} tokens: {bytes:,} bytes, exactly what the formula gives ({formula_bytes:,})."
    ),
}


def decimal_bytes(n: float) -> str:
    """Bytes in the seed's decimal units: 4294967296 -> '4.29 GB', 393216 -> '393 kB'."""
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
                        subplot_titles=(TEXT["flops_panel"], TEXT["bytes_panel"]))
    series = (
        ("attention_flops_cached", "attn_cached", WITH_CACHE_COLOUR, "dot"),
        ("attention_flops_uncached", "attn_uncached", WITHOUT_CACHE_COLOUR, "dot"),
        ("total_flops_cached", "total_cached", WITH_CACHE_COLOUR, "solid"),
        ("total_flops_uncached", "total_uncached", WITHOUT_CACHE_COLOUR, "solid"),
    )
    for key, name, colour, dash in series:
        y = np.asarray(costs[key])[1:].astype(np.float64)
        fig.add_trace(go.Scatter(x=keys, y=y, name=TEXT[name], mode="lines", line=dict(color=colour, dash=dash),
                                 customdata=[_human_flops(v) for v in y],
                                 hovertemplate=TEXT[name] + ", %{x} keys: %{customdata}FLOPs<extra></extra>"),
                      row=1, col=1)
    kv = np.asarray(costs["kv_bytes_read_cached"])[1:]
    weights = np.asarray(costs["weight_bytes"])[1:]
    for y, name, colour in ((kv, "kv_read", WITH_CACHE_COLOUR), (weights, "weights", "#636363")):
        fig.add_trace(go.Scatter(x=keys, y=y, name=TEXT[name], mode="lines", line=dict(color=colour),
                                 customdata=[format_bytes(v) for v in y],
                                 hovertemplate=TEXT[name] + ", %{x} keys: %{customdata}<extra></extra>"), row=2, col=1)
    fig.update_yaxes(type="log", title_text="FLOPs", row=1, col=1)
    fig.update_yaxes(title_text="bytes", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=TEXT["keys_axis"], row=2, col=1)
    return finish(fig, title or TEXT["cost_title"], height=620,
                  legend=dict(orientation="h", yanchor="top", y=-0.12, x=0))


def kv_cost_caption(costs: Mapping[str, Any]) -> str:
    i = -1
    tc, tu = float(costs["total_flops_cached"][i]), float(costs["total_flops_uncached"][i])
    return TEXT["cost_caption"].format(
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
    first = TEXT["encoder"] if seq2seq else TEXT["prefill"]
    titles = (first.format(n=n, q=fmt(pf["q_shape"]), s=fmt(pf["scores_shape"])),
              TEXT["decode"].format(step=shapes["step"], keys=keys, q=fmt(dc["q_shape"]), s=fmt(dc["scores_shape"])))
    fig = make_subplots(rows=2, cols=1, subplot_titles=titles, row_heights=[0.85, 0.15], vertical_spacing=0.12)
    scale = [[0.0, "#f0f0f0"], [1.0, WITH_CACHE_COLOUR]]
    fig.add_trace(go.Heatmap(z=tri, colorscale=scale, zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
                             customdata=np.where(tri > 0, TEXT["visible"], TEXT["masked"]),
                             hovertemplate="query %{y} → key %{x}: %{customdata}<extra>prefill</extra>"), row=1, col=1)
    fig.add_trace(go.Heatmap(z=row, colorscale=scale, zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
                             hovertemplate="new token → key %{x}<extra>decode</extra>"), row=2, col=1)
    fig.update_yaxes(autorange="reversed", showgrid=False, scaleanchor="x", row=1, col=1)
    fig.update_yaxes(showticklabels=False, showgrid=False, row=2, col=1)
    fig.update_xaxes(showgrid=False, range=[-0.5, max(shown_n, shown_k) - 0.5])
    return finish(fig, title or TEXT["shapes_title"], height=560)


def prefill_decode_caption(shapes: Mapping[str, Any]) -> str:
    if shapes.get("kind") == "seq2seq":
        return TEXT["shapes_caption_seq2seq"].format(s=shapes["encoder"]["queries"], keys=shapes["decode"]["keys"],
                                                     ef=_human_flops(shapes["encoder"]["flops_per_layer"]),
                                                     df=_human_flops(shapes["decode"]["flops_per_layer"]))
    return TEXT["shapes_caption"].format(n=shapes["prefill"]["queries"], keys=shapes["decode"]["keys"],
                                         pf=_human_flops(shapes["prefill"]["flops_per_layer"]),
                                         df=_human_flops(shapes["decode"]["flops_per_layer"]))


def cache_timing_figure(timing: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Median ms per step against keys for both modes, with each mode's fitted line."""
    keys = np.asarray(timing["keys"], dtype=np.float64)[1:]
    fig = go.Figure()
    for mode, colour in (("cached", WITH_CACHE_COLOUR), ("uncached", WITHOUT_CACHE_COLOUR)):
        ms = np.asarray(timing[mode]["step_ms"])[1:]
        fit = timing[mode]["fit"]
        fig.add_trace(go.Scatter(x=keys, y=ms, mode="markers", name=TEXT[mode], marker=dict(color=colour, size=5),
                                 hovertemplate=TEXT[mode] + ", %{x} keys: %{y:.2f} ms<extra></extra>"))
        fig.add_trace(go.Scatter(x=keys, y=fit["fixed_ms"] + fit["per_key_ms"] * keys, mode="lines",
                                 line=dict(color=colour, dash="dash"), hoverinfo="skip",
                                 name=TEXT["fit"].format(mode=TEXT[mode], fixed=fit["fixed_ms"],
                                                         slope=fit["per_key_ms"])))
    fig.update_xaxes(title_text=TEXT["keys_axis"])
    fig.update_yaxes(title_text=TEXT["ms_axis"], rangemode="tozero")
    return finish(fig, title or TEXT["timing_title"].format(repeats=timing["repeats"]), height=420,
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
    text = TEXT[key].format(**values)
    cross = timing.get("crossover_keys")
    if cross is not None and cross > keys:
        limit = timing.get("context_limit")
        text += TEXT["crossover"].format(cross=cross, limit=TEXT["crossover_limit"].format(limit=limit)
                                         if limit and cross > limit else "")
    elif cross is not None and cross > 0:
        text += TEXT["crossover_inside"].format(cross=cross, gain=fu["per_key_ms"] - fc["per_key_ms"])
    elif cross is not None and timing["verdict"] == "cache_wins":
        text += TEXT["no_crossover"]
    f = timing["flops_last_step"]
    return text + TEXT["flops_note"].format(keys=f["keys"], attn_c=_human_flops(f["attention_cached"]),
                                            attn_u=_human_flops(f["attention_uncached"]))


def kv_memory_chart(what_if: Mapping[str, Any], name: str = "", title: str | None = None) -> go.Figure:
    """Bytes against T (log x) for MHA, GQA and MQA at the chosen B, d_h, N, s; the current setting,
    the seed's number and this run's real cache marked."""
    curve = what_if["curve"]
    t = np.asarray(curve["tokens"], dtype=np.float64)
    fig = go.Figure()
    colours = {"MHA": "#fd8d3c", "GQA": "#3182bd", "MQA": "#31a354"}
    for kind in ("MHA", "GQA", "MQA"):
        y = np.asarray(curve[kind], dtype=np.float64) / GB
        heads = {"MHA": what_if["query_heads"], "GQA": what_if["gqa_kv_heads"], "MQA": 1}[kind]
        label = f"{kind} ({heads} KV head{'s' if heads > 1 else ''})"
        fig.add_trace(go.Scatter(x=t, y=y, mode="lines", name=label, line=dict(color=colours[kind],
                                 width=4 if kind == what_if["attention"] else 2),
                                 hovertemplate=label + ", T = %{x:,}: %{y:.3f} GB<extra></extra>"))
    fig.add_trace(go.Scatter(x=[max(what_if["tokens"], 1)], y=[what_if["bytes"] / GB], mode="markers+text",
                             name=TEXT["here"], marker=dict(size=12, color="black", symbol="x"),
                             text=[decimal_bytes(what_if["bytes"])], textposition="top left",
                             hovertemplate="%{x:,} tokens: %{y:.4f} GB<extra></extra>"))
    live = what_if.get("live")
    if live:
        fig.add_trace(go.Scatter(x=[max(live["tokens"], 1)], y=[live["bytes"] / GB], mode="markers",
                                 name=TEXT["live"], marker=dict(size=12, color="red", symbol="diamond"),
                                 hovertemplate="%{x:,} tokens: " + f"{live['bytes']:,} bytes<extra></extra>"))
    fig.update_xaxes(type="log", title_text=TEXT["tokens_axis"])
    fig.update_yaxes(title_text=TEXT["memory_axis"], type="log")  # log-log: linear growth is a straight line
    return finish(fig, title or TEXT["memory_title"].format(name=display_text(name)), height=440,
                  legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))


def kv_memory_caption(what_if: Mapping[str, Any]) -> str:
    w = what_if
    text = TEXT["memory_caption"].format(
        N=w["layers"], B=w["batch"], hkv=w["kv_heads"], T=w["tokens"], d=w["head_dim"], s=w["bytes_per_element"],
        bytes=w["bytes"], decimal=decimal_bytes(w["bytes"]), binary=format_bytes(w["bytes"]), kind=w["attention"],
        q=w["query_heads"], mha=decimal_bytes(w["variants"]["MHA"]), mqa=decimal_bytes(w["variants"]["MQA"]),
    )
    if w.get("expected_gb") is not None and round(w["gb"], 1) == w["expected_gb"]:
        text += TEXT["memory_seed"].format(expected=w["expected_gb"])
    if w.get("live"):
        text += TEXT["memory_live"].format(**w["live"])
    return text
