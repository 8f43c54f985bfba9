"""SDPA against the explicit softmax: time, peak memory and agreement against sequence length
(from `playground.analysis.sdpa.sdpa_vs_explicit`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import finish
from playground.viz._language import texts
from playground.viz.cache import format_bytes

SDPA_COLOUR = "#3182bd"
EXPLICIT_COLOUR = "#fd8d3c"

_T = texts("sdpa")  # this module's words, from playground/locales/


def sdpa_figure(data: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    rows = data["rows"]
    T = np.array([r["length"] for r in rows])
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.09, row_heights=[0.4, 0.4, 0.2],
                        subplot_titles=(_T(lang)["time"].format(repeats=data["repeats"]), _T(lang)["memory"],
                                        _T(lang)["diff"]))
    for key, name, colour in (("sdpa", "sdpa", SDPA_COLOUR), ("explicit", "explicit", EXPLICIT_COLOUR)):
        ms = np.array([r[f"{key}_ms"] for r in rows])
        err = [np.array([r[f"{key}_ms_max"] - r[f"{key}_ms"] for r in rows]),
               np.array([r[f"{key}_ms"] - r[f"{key}_ms_min"] for r in rows])]
        fig.add_trace(go.Scatter(x=T, y=ms, mode="lines+markers", name=_T(lang)[name], line=dict(color=colour),
                                 legendgroup=name, error_y=dict(type="data", array=err[0], arrayminus=err[1]),
                                 hovertemplate=_T(lang)["hover_ms"].format(name=_T(lang)[name])), row=1, col=1)
        peak = [r.get(f"{key}_peak_bytes") for r in rows]
        if all(p is not None for p in peak):
            fig.add_trace(go.Scatter(x=T, y=peak, mode="lines+markers", name=_T(lang)[name], legendgroup=name,
                                     showlegend=False, line=dict(color=colour),
                                     customdata=[format_bytes(p) for p in peak],
                                     hovertemplate=_T(lang)["hover_bytes"].format(name=_T(lang)[name])),
                          row=2, col=1)
    analytic = [r["explicit_bytes_analytic"] for r in rows]
    fig.add_trace(go.Scatter(x=T, y=analytic, mode="lines", name=_T(lang)["analytic"],
                             line=dict(color=EXPLICIT_COLOUR, dash="dot"),
                             customdata=[format_bytes(b) for b in analytic],
                             hovertemplate="T = %{x}: %{customdata}<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Scatter(x=T, y=[max(r["max_abs_diff"], 1e-12) for r in rows], mode="lines+markers",
                             showlegend=False, line=dict(color="#636363"),
                             hovertemplate="T = %{x}: %{y:.2e}<extra></extra>"), row=3, col=1)
    fig.update_xaxes(type="log", title_text=_T(lang)["length_axis"], row=3, col=1)
    fig.update_yaxes(type="log", title_text=_T(lang)["ms_axis"], row=1, col=1)
    fig.update_yaxes(type="log", title_text=_T(lang)["bytes_axis"], row=2, col=1)
    fig.update_yaxes(type="log", row=3, col=1)
    return finish(fig, title or _T(lang)["title"].format(h=data["n_heads"], hkv=data["n_kv_heads"], d=data["head_dim"],
                                                     dtype=data["dtype"]),
                  height=700, legend=dict(orientation="h", yanchor="top", y=-0.1, x=0))


def sdpa_caption(data: Mapping[str, Any], lang: str = "en") -> str:
    last = data["rows"][-1]
    if data["memory_method"] in ("measured", "measured_cuda"):
        method = _T(lang)[data["memory_method"]].format(s_mem=format_bytes(last["sdpa_peak_bytes"]),
                                                    e_mem=format_bytes(last["explicit_peak_bytes"]),
                                                    device=data.get("device", "cuda"))
    else:
        method = _T(lang)["analytic_only"]
    return _T(lang)["caption"].format(T=last["length"], s_ms=last["sdpa_ms"], e_ms=last["explicit_ms"],
                                  ratio=last["explicit_ms"] / max(last["sdpa_ms"], 1e-9),
                                  score=format_bytes(last["score_bytes"]), diff=last["max_abs_diff"], method=method)


def sdpa_table(data: Mapping[str, Any], lang: str = "en") -> list[dict[str, Any]]:
    """Rows for a plain table next to the figure (T, times, memory, difference), formatted; the column
    names are in the current language."""
    def peak(value: int | None) -> str:
        return "—" if value is None else format_bytes(value)

    c = _T(lang)["columns"]
    out = []
    for r in data["rows"]:
        out.append({
            c["T"]: r["length"], c["sdpa_ms"]: round(r["sdpa_ms"], 3), c["explicit_ms"]: round(r["explicit_ms"], 3),
            c["sdpa_peak"]: peak(r.get("sdpa_peak_bytes")), c["explicit_peak"]: peak(r.get("explicit_peak_bytes")),
            c["scores"]: format_bytes(r["score_bytes"]), c["diff"]: f"{r['max_abs_diff']:.1e}",
        })
    return out
