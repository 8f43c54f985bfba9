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
from playground.viz._language import texts

_COLOURS = plotly.colors.qualitative.Plotly
OWN_COLOUR = "#d62728"

_T = texts("positional_compare")  # this module's words, from playground/locales/


def _curve_label(label: str, lang: str = "en") -> str:
    """A curve label of `pe_schemes` ("head 3", "bucket of δ") in the current language."""
    if label == _T("en")["labels"]["bucket"]:
        return _T(lang)["labels"]["bucket"]
    kind, _, index = label.partition(" ")
    return _T(lang)["labels"]["head"].format(i=int(index)) if kind == "head" and index.isdigit() else label


def _reason(reason: str, lang: str = "en") -> str:
    """The analysis' "this model's positions are X, not RoPE" in the current language; others as given."""
    prefix, suffix = _T("en")["reason"].split("{positional}")
    if reason.startswith(prefix) and reason.endswith(suffix):
        kind = reason[len(prefix):len(reason) - len(suffix)]
        return _T(lang)["reason"].format(positional=_T(lang)["positional"].get(kind, kind))
    return reason


def rope_base_comparison(data: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """Wavelength per pair and the q = k = 1 decay over the positions shown, at the model's and the
    compared base (a `positional_data` dict of a RoPE model)."""
    a, b = float(data["base"]), float(data["compare_base"])
    fig = make_subplots(rows=2, cols=1, subplot_titles=(_T(lang)["wavelength"], _T(lang)["decay"]),
                        vertical_spacing=0.16)
    curves = ((data["inv_freq"], data["decay"], _T(lang)["model_base"].format(b=a), dict(color=OWN_COLOUR)),
              (data["compare_inv_freq"], data["compare_decay"], _T(lang)["base"].format(b=b),
               dict(color="#1f77b4", dash="dash")))
    for inv, dist_curve, label, line in curves:
        inv = np.asarray(inv)
        fig.add_trace(go.Scatter(x=np.arange(inv.size), y=2 * np.pi / inv, mode="lines+markers", name=label,
                                 legendgroup=label, line=line,
                                 hovertemplate=_T(lang)["hover_pair"].format(label=label)), row=1, col=1)
        fig.add_trace(go.Scatter(x=data["distances"], y=dist_curve, mode="lines", name=label, legendgroup=label,
                                 showlegend=False, line=line,
                                 hovertemplate=_T(lang)["hover_distance"].format(label=label)), row=2, col=1)
    fig.add_hline(y=data["context"], line=dict(dash="dot", color="grey"), row=1, col=1)
    fig.update_yaxes(type="log", title_text=_T(lang)["tokens_axis"], row=1, col=1)
    fig.update_xaxes(title_text=_T(lang)["pair_axis"], row=1, col=1)
    fig.update_xaxes(title_text=_T(lang)["distance_axis"], row=2, col=1)
    fig.update_yaxes(title_text=_T(lang)["qk_axis"], row=2, col=1)
    last = int(np.asarray(data["distances"])[-1])
    return finish(fig, title or _T(lang)["base_title"].format(a=a, b=b, last=last), height=640,
                  legend=dict(orientation="h", yanchor="top", y=-0.1, x=0))


def rope_base_caption(data: Mapping[str, Any], lang: str = "en") -> str:
    return _T(lang)["base_caption"].format(a=float(data["base"]), b=float(data["compare_base"]),
                                           context=data["context"])


def rope_shift_figure(shift: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """Top: the score of one real (q, k) pair at shifted positions (flat). Bottom: the same q, k with the
    key moved away: the score as a function of n − m."""
    if not shift.get("available"):
        raise ValueError("no RoPE in this model: nothing to draw (show rope_shift_caption instead)")
    fig = make_subplots(rows=2, cols=1, subplot_titles=(_T(lang)["shift_panel"], _T(lang)["distance_panel"]),
                        vertical_spacing=0.18)
    shifts, scores = np.asarray(shift["shifts"]), np.asarray(shift["scores"])
    pairs = [f"(m, n) = ({m}, {n})" for m, n in shift["positions"]]
    fig.add_trace(go.Scatter(x=shifts, y=scores, mode="lines+markers", name=_T(lang)["shifted"], customdata=pairs,
                             marker=dict(size=9,
                                         color=OWN_COLOUR), hovertemplate=_T(lang)["hover_shift"]), row=1, col=1)
    rec = _T(lang)["recorded"].format(m=shift["query_position"], n=shift["key_position"])
    fig.add_hline(y=shift["recorded_score"], line=dict(dash="dot", color="grey"), row=1, col=1,
                  annotation_text=rec, annotation_position="bottom right")
    gap = shift["query_position"] - shift["key_position"]
    fig.add_trace(go.Scatter(x=shift["distances"], y=shift["by_distance"], mode="lines", name=_T(lang)["by_distance"],
                             line=dict(color="#1f77b4"), hovertemplate="m − n = %{x}: %{y:.4f}<extra></extra>"),
                  row=2, col=1)
    fig.add_vline(x=gap, line=dict(dash="dot", color=OWN_COLOUR), row=2, col=1)
    spread = max(abs(float(scores.max() - scores.min())), 1e-9)
    mid = float(np.median(scores))
    fig.update_yaxes(range=[mid - 50 * spread - 1e-3 * abs(mid), mid + 50 * spread + 1e-3 * abs(mid)],
                     title_text=_T(lang)["score_axis"], row=1, col=1)
    fig.update_xaxes(title_text=_T(lang)["shift_axis"], row=1, col=1)
    fig.update_xaxes(title_text=_T(lang)["distance_axis"], row=2, col=1)
    fig.update_yaxes(title_text=_T(lang)["score_axis"], row=2, col=1)
    return finish(fig, title or _T(lang)["shift_title"].format(
        layer=shift["layer"], head=shift["head"], q=display_token(shift["query_label"]), m=shift["query_position"],
        k=display_token(shift["key_label"]), n=shift["key_position"]), height=600, showlegend=False)


def rope_shift_caption(shift: Mapping[str, Any], lang: str = "en") -> str:
    if not shift.get("available"):
        return _T(lang)["no_rope"].format(reason=_reason(shift.get("reason", ""), lang=lang))
    return _T(lang)["shift_caption"].format(top=max(shift["shifts"]), count=len(shift["shifts"]),
                                            spread=shift["spread"],
                                        recorded=shift["recorded_score"], m=shift["query_position"],
                                        n=shift["key_position"], gap=shift["query_position"] - shift["key_position"])


def pe_schemes_figure(schemes: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """Five panels stacked (one column stays legible on a phone), this model's starred and framed."""
    order = ("sinusoidal", "learned", "rope", "relative", "alibi")
    own = schemes["own"]
    def name(k: str) -> str:
        source = schemes["schemes"][k]["source"]
        return _T(lang)["names"][k] + (_T(lang)["own"] if k == own else _T(lang)["formula"] if source == "formula" else "")

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
            fig.add_annotation(text=_T(lang)["unavailable"], showarrow=False, xref="x domain", yref="y domain", x=0.5,
                               y=0.5, font=dict(color="grey"), row=row, col=col)
        for i, (curve, label) in enumerate(zip(curves, entry["labels"])):
            colour = OWN_COLOUR if key == own and curves.shape[0] == 1 else _COLOURS[i % len(_COLOURS)]
            label = _curve_label(label, lang=lang)
            hover = _T(lang)["hover_scheme"].format(name=_T(lang)["names"][key], label=label)
            fig.add_trace(go.Scatter(x=delta, y=curve, mode="lines", name=label, showlegend=False,
                                     line=dict(color=colour, width=3 if key == own else 1.5), hovertemplate=hover),
                          row=row, col=col)
        fig.update_yaxes(title_text=_T(lang)["y"][key], title_font=dict(size=10), row=row, col=col)
        fig.update_xaxes(title_text=_T(lang)["delta_axis"] if row == 5 else None, row=row, col=col)
    if own in order:  # frame this model's panel
        fig.add_shape(type="rect", xref="x domain", yref="y domain", x0=-0.01, x1=1.01, y0=-0.06, y1=1.06,
                      line=dict(color=OWN_COLOUR, width=2), row=order.index(own) + 1, col=1)
    return finish(fig, title or _T(lang)["schemes_title"], height=1050)


def pe_schemes_caption(schemes: Mapping[str, Any], lang: str = "en") -> str:
    own = schemes["own"]
    return _T(lang)["schemes_caption"].format(own=_T(lang)["names"].get(own, own))
