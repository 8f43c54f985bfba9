"""KV-cache figures: memory as the sequence grows, and prefill / decode timings.

Bytes come from the cache stats (`event.cache`): bytes = 2·layers·batch·kv_heads·tokens·head_dim·
element_size; `allocated` is the static buffer; `mha_equivalent` what full multi-head K/V would use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import finish, legend_below
from playground.viz._language import texts

_T = texts("cache")  # this module's words, from playground/locales/

_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
WITH_CACHE_COLOUR = "#3182bd"
WITHOUT_CACHE_COLOUR = "#fd8d3c"


def byte_unit(largest: float) -> tuple[str, int]:
    """The binary unit that keeps `largest` bytes readable: (name, bytes per unit)."""
    for name, size in _UNITS:
        if largest >= size:
            return name, size
    return "B", 1


def format_bytes(n: float) -> str:
    """1536 -> '1.50 KiB'."""
    name, size = byte_unit(abs(n))
    return f"{n:.0f} B" if size == 1 else f"{n / size:.2f} {name}"


def cache_growth(
    steps: Sequence[int],
    bytes_used: Sequence[int],
    allocated: Sequence[int],
    mha_equivalent: Sequence[int],
    title: str | None = None, lang: str = "en", reused: tuple[int, int] = (0, 0),
) -> go.Figure:
    """Cache bytes per step: used (grows linearly), allocated (static buffer), MHA equivalent.

    The gap between 'used' and 'MHA equivalent' is what grouped KV heads (GQA / MQA) save. `reused`: (tokens,
    bytes) of the cache restored from the server's prefix cache: a dotted line at those bytes, below it the
    positions restored, above it those the run computed.
    """
    series = {"used": bytes_used, "allocated": allocated, "mha_equivalent": mha_equivalent}
    n = len(steps)
    for name, values in series.items():
        if len(values) != n:
            raise ValueError(f"{name} has {len(values)} values but steps has {n}; pass one value per step")
    largest = max([float(max(v)) for v in series.values() if len(v)] or [0.0])
    fig = go.Figure()
    styles = (
        ("used", _T(lang)["used"], dict(color=WITH_CACHE_COLOUR, width=3)),
        ("allocated", _T(lang)["allocated"], dict(color="#636363", dash="dot")),
        ("mha_equivalent", _T(lang)["mha_equivalent"], dict(color=WITHOUT_CACHE_COLOUR, dash="dash")),
    )
    # A static buffer sized for the whole context dwarfs the early growth: hide it behind its legend
    # entry (one click shows it) and put its size in the name instead.
    in_use = max([float(max(v)) for v in (bytes_used, mha_equivalent) if len(v)] or [0.0])
    big_buffer = n > 0 and float(max(allocated)) > 10 * max(in_use, 1.0)
    unit, size = byte_unit(in_use if big_buffer else largest)
    for key, name, line in styles:
        raw = np.asarray(series[key], dtype=np.float64)
        hidden = key == "allocated" and big_buffer
        # the hover says the short name, the step and the size on three short lines: one long line runs past a
        # 400-px phone's edge wherever the point is
        hover = _T(lang)["growth_hover"].format(name=name)
        if hidden:
            name = _T(lang)["hidden_name"].format(name=name, size=format_bytes(float(raw.max())))
        fig.add_trace(
            go.Scatter(
                x=list(steps), y=raw / size, mode="lines+markers" if n <= 64 else "lines", name=name, line=line,
                visible="legendonly" if hidden else True,
                customdata=[_T(lang)["bytes_hover"].format(size=format_bytes(b), n=int(b)) for b in raw],
                hovertemplate=hover,
            )
        )
    if n and float(bytes_used[-1]) > 0 and float(mha_equivalent[-1]) > float(bytes_used[-1]):
        ratio = float(mha_equivalent[-1]) / float(bytes_used[-1])
        fig.add_annotation(x=steps[-1], y=float(bytes_used[-1]) / size, text=_T(lang)["smaller"].format(ratio=ratio),
                           showarrow=True, arrowhead=2, ax=-60, ay=-30)
    if n and reused[1] > 0:  # the prompt's beginning, restored: below the line restored, above it computed
        fig.add_hline(y=reused[1] / size, line=dict(color="#31a354", dash="dot", width=2),
                      annotation_text=_T(lang)["reused_line"].format(tokens=reused[0], size=format_bytes(reused[1])),
                      annotation_position="bottom right")
    fig.update_xaxes(title_text=_T(lang)["step_axis"])
    fig.update_yaxes(title_text=_T(lang)["memory_axis"].format(unit=unit), rangemode="tozero")
    return finish(fig, _T(lang)["growth_title"] if title is None else title, height=420, legend=legend_below(420),
                  hovermode="closest")


def timing_comparison(
    with_cache: Mapping[str, float], without_cache: Mapping[str, float], title: str | None = None, lang: str = "en",
    spreads: tuple[Mapping[str, Mapping[str, float]], Mapping[str, Mapping[str, float]]] | None = None,
) -> go.Figure:
    """Side-by-side bars for two runs. Each dict: prefill_ms, decode_ms_per_token[, tokens_per_s].

    Without a cache every decode step recomputes the whole prefix, so its per-token time grows
    with length; the annotation gives the decode speed-up. `spreads` (with, without: timing key -> min, max)
    draws each bar's range over repeated measurements as a whisker.
    """
    keys = ("prefill_ms", "decode_ms_per_token")
    for name, run in (("with_cache", with_cache), ("without_cache", without_cache)):
        missing = [k for k in keys if k not in run]
        if missing:
            raise ValueError(f"{name} is missing {missing}; pass the CLI's timing dict")
    show_rate = "tokens_per_s" in with_cache and "tokens_per_s" in without_cache
    fig = make_subplots(rows=1, cols=2 if show_rate else 1, horizontal_spacing=0.15,
                        subplot_titles=(_T(lang)["time_panel"],
                                        _T(lang)["rate_panel"]) if show_rate else (_T(lang)["time_panel"],))
    labels = [_T(lang)["prefill"], _T(lang)["decode"]]
    for i, (name, run, colour) in enumerate(((_T(lang)["with"], with_cache, WITH_CACHE_COLOUR),
                                             (_T(lang)["without"], without_cache, WITHOUT_CACHE_COLOUR))):
        ms = [float(run[k]) for k in keys]
        fig.add_trace(go.Bar(x=labels, y=ms, name=name, marker_color=colour, legendgroup=name,
                             text=[f"{v:.1f}" for v in ms], textposition="outside",
                             error_y=_whisker(ms, keys, spreads[i] if spreads else None),
                             hovertemplate=_T(lang)["time_hover"].format(name=name)), row=1, col=1)
        if show_rate:
            rate = float(run["tokens_per_s"])
            fig.add_trace(go.Bar(x=[name], y=[rate], name=name, marker_color=colour, legendgroup=name,
                                 showlegend=False, text=[f"{rate:.1f}"], textposition="outside",
                                 error_y=_whisker([rate], ("tokens_per_s",), spreads[i] if spreads else None),
                                 hovertemplate=_T(lang)["rate_hover"].format(name=name)), row=1, col=2)
    with_decode, without_decode = float(with_cache["decode_ms_per_token"]), float(without_cache["decode_ms_per_token"])
    if with_decode > 0:
        fig.add_annotation(x=_T(lang)["decode"], y=max(with_decode, without_decode), xref="x", yref="y",
                           text=_T(lang)["faster"].format(ratio=without_decode / with_decode),
                           showarrow=False, yshift=30)
    # Headroom above the tallest bar (or whisker) so the value labels printed "outside" the bars stay visible.
    top_ms = max([float(run[k]) for run in (with_cache, without_cache) for k in keys]
                 + [float(s[k]["max"]) for s in spreads or () for k in keys if k in s])
    fig.update_yaxes(title_text="ms", range=[0, 1.3 * top_ms or 1], row=1, col=1)
    if show_rate:
        top_rate = max([float(with_cache["tokens_per_s"]), float(without_cache["tokens_per_s"])]
                       + [float(s["tokens_per_s"]["max"]) for s in spreads or () if "tokens_per_s" in s])
        fig.update_yaxes(title_text=_T(lang)["rate_axis"], range=[0, 1.2 * top_rate or 1], row=1, col=2)
    return finish(fig, _T(lang)["timing_title"] if title is None else title, height=400, barmode="group",
                  legend=dict(orientation="h", yanchor="top", y=-0.12, x=0))


def _whisker(values: list[float], keys: tuple[str, ...], spread: Mapping[str, Mapping[str, float]] | None,
             ) -> dict[str, Any] | None:
    """A bar's range over repeats (min to max around the median drawn) as Plotly's asymmetric error bar."""
    if spread is None or any(k not in spread for k in keys):
        return None
    return dict(type="data", symmetric=False, thickness=1.5, width=6, color="#333",
                array=[max(0.0, float(spread[k]["max"]) - v) for k, v in zip(keys, values)],
                arrayminus=[max(0.0, v - float(spread[k]["min"])) for k, v in zip(keys, values)])


def kv_formula(stats: Mapping[str, int], lang: str = "en") -> str:
    """The KV-cache formula filled with one cache's numbers, as Markdown.

    2 · N_layers · B · h_kv · T · d_head · bytes = total; `stats` is a KV-cache stats dict
    (layers, batch, kv_heads, tokens, head_dim, element_size). When query_heads differs from
    kv_heads, a second line gives the multi-head (MHA) equivalent and the saving.
    """
    keys = ("layers", "batch", "kv_heads", "tokens", "head_dim", "element_size")
    missing = [k for k in keys if k not in stats]
    if missing:
        raise ValueError(f"cache stats are missing {missing}; pass a KVCache.stats() dict")
    L, B, h, T, d, e = (int(stats[k]) for k in keys)
    total = 2 * L * B * h * T * d * e
    lines = [_T(lang)["formula"], _T(lang)["formula_total"].format(L=L, B=B, h=h, T=T, d=d, e=e, total=total,
                                                        size=format_bytes(total))]
    q = int(stats.get("query_heads", h))
    if q != h and h > 0:
        mha = total * q // h
        lines.append(_T(lang)["formula_mha"].format(q=q, L=L, B=B, T=T, d=d, e=e, mha=mha, size=format_bytes(mha),
                                              ratio=q / h))
    return "  \n".join(lines)
