"""The KV-cache lesson: cost per step by formula, prefill vs decode shapes, the measured
comparison and the memory what-if. Draws the dicts of `playground.analysis.kv_lesson` / `kv_memory`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.steps import step_number
from playground.viz._common import display_text, finish
from playground.viz._language import texts
from playground.viz.cache import WITH_CACHE_COLOUR, WITHOUT_CACHE_COLOUR, format_bytes

GB = 10**9

_T = texts("kv_lesson")  # this module's words, from playground/locales/


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


def kv_cost_chart(costs: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """FLOPs (log) and bytes per decode step against T + 1, with and without the cache."""
    keys = np.asarray(costs["keys"])[1:]
    if keys.size == 0:
        raise ValueError("costs need at least one decode step (new_tokens >= 2)")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(_T(lang)["flops_panel"], _T(lang)["bytes_panel"]))
    series = (
        ("attention_flops_cached", "attn_cached", WITH_CACHE_COLOUR, "dot"),
        ("attention_flops_uncached", "attn_uncached", WITHOUT_CACHE_COLOUR, "dot"),
        ("total_flops_cached", "total_cached", WITH_CACHE_COLOUR, "solid"),
        ("total_flops_uncached", "total_uncached", WITHOUT_CACHE_COLOUR, "solid"),
    )
    for key, name, colour, dash in series:
        y = np.asarray(costs[key])[1:].astype(np.float64)
        fig.add_trace(go.Scatter(x=keys, y=y, name=_T(lang)[name], mode="lines", line=dict(color=colour, dash=dash),
                                 customdata=[_human_flops(v) for v in y],
                                 hovertemplate=_T(lang)["hover_flops"].format(name=_T(lang)[name])),
                      row=1, col=1)
    kv = np.asarray(costs["kv_bytes_read_cached"])[1:]
    weights = np.asarray(costs["weight_bytes"])[1:]
    for y, name, colour in ((kv, "kv_read", WITH_CACHE_COLOUR), (weights, "weights", "#636363")):
        fig.add_trace(go.Scatter(x=keys, y=y, name=_T(lang)[name], mode="lines", line=dict(color=colour),
                                 customdata=[format_bytes(v) for v in y],
                                 hovertemplate=_T(lang)["hover_bytes"].format(name=_T(lang)[name])), row=2, col=1)
    fig.update_yaxes(type="log", title_text=_T(lang)["flops_axis"], row=1, col=1)
    fig.update_yaxes(title_text=_T(lang)["bytes_axis"], rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=_T(lang)["keys_axis"], row=2, col=1)
    return finish(fig, title or _T(lang)["cost_title"], height=620,
                  legend=dict(orientation="h", yanchor="top", y=-0.12, x=0))


def decode_index(step: int | None, steps: int) -> int:
    """The decode step a caption reads: the selected one, or the first decode step when the selected one is the
    prefill (index 0), or the last step when none is selected."""
    return steps - 1 if step is None else min(max(int(step), 1), steps - 1)


def kv_cost_caption(costs: Mapping[str, Any], lang: str = "en", before: int = 0) -> str:
    """The costs at the selected step (`costs["selected"]`, the engine's index; else the last step), named by its
    step number, so that this paragraph and `prefill_decode_caption` speak of the same step and the same T + 1."""
    i = decode_index(costs.get("selected"), len(costs["keys"]))
    tc, tu = float(costs["total_flops_cached"][i]), float(costs["total_flops_uncached"][i])
    return _T(lang)["cost_caption"].format(
        step=step_number(i,
                         before), keys=int(costs["keys"][i]), attn_c=_human_flops(costs["attention_flops_cached"][i]),
        attn_u=_human_flops(costs["attention_flops_uncached"][i]), total_c=_human_flops(tc),
        total_u=_human_flops(tu), ratio=tu / max(tc, 1.0), kv=format_bytes(float(costs["kv_bytes_read_cached"][i])),
        weights=format_bytes(float(costs["weight_bytes"][i])),
    )


def prefill_decode_figure(shapes: Mapping[str, Any], title: str | None = None, max_cells: int = 64, lang: str = "en",
                          before: int = 0) -> go.Figure:
    """The prefill's causal L_p × L_p matrix above the decode step's 1 × (T + 1) row (cells shown to scale
    up to `max_cells` per side)."""
    seq2seq = shapes.get("kind") == "seq2seq"
    pf, dc = shapes["encoder" if seq2seq else "prefill"], shapes["decode"]  # seq2seq: the source is the big pass
    n, keys = int(pf["queries"]), int(dc["keys"])
    shown_n, shown_k = min(n, max_cells), min(keys, max_cells)
    tri = np.ones((shown_n, shown_n)) if seq2seq else np.tril(np.ones((shown_n, shown_n)))
    row = np.ones((1, shown_k))
    fmt = lambda s: "(" + ", ".join(str(v) for v in s) + ")"  # noqa: E731
    first = _T(lang)["encoder"] if seq2seq else _T(lang)["prefill"]
    titles = (first.format(n=n, q=fmt(pf["q_shape"]), s=fmt(pf["scores_shape"])),
              _T(lang)["decode"].format(step=step_number(max(int(shapes["step"]), 1), before), keys=keys,
                                        q=fmt(dc["q_shape"]), s=fmt(dc["scores_shape"])))
    fig = make_subplots(rows=2, cols=1, subplot_titles=titles, row_heights=[0.85, 0.15], vertical_spacing=0.12)
    scale = [[0.0, "#f0f0f0"], [1.0, WITH_CACHE_COLOUR]]
    fig.add_trace(go.Heatmap(z=tri, colorscale=scale, zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
                             customdata=np.where(tri > 0, _T(lang)["visible"], _T(lang)["masked"]),
                             hovertemplate=_T(lang)["hover_prefill"]), row=1, col=1)
    fig.add_trace(go.Heatmap(z=row, colorscale=scale, zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
                             hovertemplate=_T(lang)["hover_decode"]), row=2, col=1)
    fig.update_yaxes(autorange="reversed", showgrid=False, scaleanchor="x", row=1, col=1)
    fig.update_yaxes(showticklabels=False, showgrid=False, row=2, col=1)
    fig.update_xaxes(showgrid=False, range=[-0.5, max(shown_n, shown_k) - 0.5])
    return finish(fig, title or _T(lang)["shapes_title"], height=560)


def prefill_decode_caption(shapes: Mapping[str, Any], lang: str = "en") -> str:
    if shapes.get("kind") == "seq2seq":
        return _T(lang)["shapes_caption_seq2seq"].format(s=shapes["encoder"]["queries"], keys=shapes["decode"]["keys"],
                                                     ef=_human_flops(shapes["encoder"]["flops_per_layer"]),
                                                     df=_human_flops(shapes["decode"]["flops_per_layer"]))
    return _T(lang)["shapes_caption"].format(n=shapes["prefill"]["queries"], keys=shapes["decode"]["keys"],
                                         pf=_human_flops(shapes["prefill"]["flops_per_layer"]),
                                         df=_human_flops(shapes["decode"]["flops_per_layer"]))


def cache_timing_figure(timing: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """Median ms per step against keys for both modes, with each mode's fitted line."""
    keys = np.asarray(timing["keys"], dtype=np.float64)[1:]
    fig = go.Figure()
    for mode, colour in (("cached", WITH_CACHE_COLOUR), ("uncached", WITHOUT_CACHE_COLOUR)):
        ms = np.asarray(timing[mode]["step_ms"])[1:]
        fit = timing[mode]["fit"]
        fig.add_trace(go.Scatter(x=keys, y=ms, mode="markers", name=_T(lang)[mode], marker=dict(color=colour, size=5),
                                 hovertemplate=_T(lang)["hover_ms"].format(name=_T(lang)[mode])))
        fig.add_trace(go.Scatter(x=keys, y=fit["fixed_ms"] + fit["per_key_ms"] * keys, mode="lines",
                                 line=dict(color=colour, dash="dash"), hoverinfo="skip",
                                 name=_T(lang)["fit"].format(mode=_T(lang)[mode], fixed=fit["fixed_ms"],
                                                         slope=fit["per_key_ms"])))
    fig.update_xaxes(title_text=_T(lang)["keys_axis"])
    fig.update_yaxes(title_text=_T(lang)["ms_axis"], rangemode="tozero")
    return finish(fig, title or _T(lang)["timing_title"].format(repeats=timing["repeats"]), height=420,
                  legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))


def cache_timing_caption(timing: Mapping[str, Any], lang: str = "en") -> str:
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
    text = _T(lang)[key].format(**values)
    cross = timing.get("crossover_keys")
    if cross is not None and cross > keys:
        limit = timing.get("context_limit")
        text += _T(lang)["crossover"].format(cross=cross, limit=_T(lang)["crossover_limit"].format(limit=limit)
                                         if limit and cross > limit else "")
    elif cross is not None and cross > 0:
        text += _T(lang)["crossover_inside"].format(cross=cross, gain=fu["per_key_ms"] - fc["per_key_ms"])
    elif cross is not None and timing["verdict"] == "cache_wins":
        text += _T(lang)["no_crossover"]
    f = timing["flops_last_step"]
    return text + _T(lang)["flops_note"].format(keys=f["keys"], attn_c=_human_flops(f["attention_cached"]),
                                            attn_u=_human_flops(f["attention_uncached"]))


def kv_memory_chart(what_if: Mapping[str, Any], name: str = "", title: str | None = None,
                    lang: str = "en") -> go.Figure:
    """Bytes against T (log x) for MHA, GQA and MQA at the chosen B, d_h, N, s; the current setting,
    the worked example's number and this run's real cache marked."""
    curve = what_if["curve"]
    t = np.asarray(curve["tokens"], dtype=np.float64)
    fig = go.Figure()
    colours = {"MHA": "#fd8d3c", "GQA": "#3182bd", "MQA": "#31a354"}
    for kind in ("MHA", "GQA", "MQA"):
        y = np.asarray(curve[kind], dtype=np.float64) / GB
        heads = {"MHA": what_if["query_heads"], "GQA": what_if["gqa_kv_heads"], "MQA": 1}[kind]
        label = _T(lang)["variant_many" if heads > 1 else "variant_one"].format(kind=kind, heads=heads)
        fig.add_trace(go.Scatter(x=t, y=y, mode="lines", name=label, line=dict(color=colours[kind],
                                 width=4 if kind == what_if["attention"] else 2),
                                 hovertemplate=_T(lang)["hover_variant"].format(label=label)))
    fig.add_trace(go.Scatter(x=[max(what_if["tokens"], 1)], y=[what_if["bytes"] / GB], mode="markers+text",
                             name=_T(lang)["here"], marker=dict(size=12, color="black", symbol="x"),
                             text=[decimal_bytes(what_if["bytes"])], textposition="top left",
                             hovertemplate=_T(lang)["hover_here"]))
    live = what_if.get("live")
    if live:
        fig.add_trace(go.Scatter(x=[max(live["tokens"], 1)], y=[live["bytes"] / GB], mode="markers",
                                 name=_T(lang)["live"], marker=dict(size=12, color="red", symbol="diamond"),
                                 hovertemplate=_T(lang)["hover_live"].format(bytes=live["bytes"])))
    fig.update_xaxes(type="log", title_text=_T(lang)["tokens_axis"])
    fig.update_yaxes(title_text=_T(lang)["memory_axis"], type="log")  # log-log: linear growth is a straight line
    return finish(fig, title or _T(lang)["memory_title"].format(name=display_text(name)), height=440,
                  legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))


def kv_memory_caption(what_if: Mapping[str, Any], lang: str = "en") -> str:
    w = what_if
    text = _T(lang)["memory_caption"].format(
        N=w["layers"], B=w["batch"], hkv=w["kv_heads"], T=w["tokens"], d=w["head_dim"], s=w["bytes_per_element"],
        bytes=w["bytes"], decimal=decimal_bytes(w["bytes"]), binary=format_bytes(w["bytes"]), kind=w["attention"],
        q=w["query_heads"], mha=decimal_bytes(w["variants"]["MHA"]), mqa=decimal_bytes(w["variants"]["MQA"]),
    )
    if w.get("expected_gb") is not None and round(w["gb"], 1) == w["expected_gb"]:
        text += _T(lang)["memory_seed"].format(expected=w["expected_gb"])
    if w.get("live"):
        text += _T(lang)["memory_live"].format(**w["live"])
    return text
