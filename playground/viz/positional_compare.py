"""Positional encodings compared: RoPE at two bases, RoPE's relative property on real q and k, and
the seeds' five schemes side by side (from `playground.analysis.positional`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import display_token, finish

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
        "⟨R_m q, R_n k⟩ = ⟨q, R_(n−m) k⟩ (seed 003): moving both tokens by the same s leaves the score "
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
}


def rope_base_comparison(data: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Wavelength per pair and the q = k = 1 decay over the positions shown, at the model's and the
    compared base (a `positional_data` dict of a RoPE model)."""
    a, b = float(data["base"]), float(data["compare_base"])
    fig = make_subplots(rows=2, cols=1, subplot_titles=(TEXT["wavelength"], TEXT["decay"]), vertical_spacing=0.16)
    curves = ((data["inv_freq"], data["decay"], TEXT["model_base"].format(b=a), dict(color=OWN_COLOUR)),
              (data["compare_inv_freq"], data["compare_decay"], TEXT["base"].format(b=b),
               dict(color="#1f77b4", dash="dash")))
    for inv, dist_curve, label, line in curves:
        inv = np.asarray(inv)
        fig.add_trace(go.Scatter(x=np.arange(inv.size), y=2 * np.pi / inv, mode="lines+markers", name=label,
                                 legendgroup=label, line=line,
                                 hovertemplate=label + ", pair %{x}: %{y:.4g} tokens<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=data["distances"], y=dist_curve, mode="lines", name=label, legendgroup=label,
                                 showlegend=False, line=line,
                                 hovertemplate=label + ", distance %{x}: %{y:.3f}<extra></extra>"), row=2, col=1)
    fig.add_hline(y=data["context"], line=dict(dash="dot", color="grey"), row=1, col=1)
    fig.update_yaxes(type="log", title_text="tokens", row=1, col=1)
    fig.update_xaxes(title_text=TEXT["pair_axis"], row=1, col=1)
    fig.update_xaxes(title_text=TEXT["distance_axis"], row=2, col=1)
    fig.update_yaxes(title_text="q·k", row=2, col=1)
    last = int(np.asarray(data["distances"])[-1])
    return finish(fig, title or TEXT["base_title"].format(a=a, b=b, last=last), height=640,
                  legend=dict(orientation="h", yanchor="top", y=-0.1, x=0))


def rope_base_caption(data: Mapping[str, Any]) -> str:
    return TEXT["base_caption"].format(a=float(data["base"]), b=float(data["compare_base"]), context=data["context"])


def rope_shift_figure(shift: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Top: the score of one real (q, k) pair at shifted positions (flat). Bottom: the same q, k with the
    key moved away: the score as a function of n − m."""
    if not shift.get("available"):
        raise ValueError("no RoPE in this model: nothing to draw (show rope_shift_caption instead)")
    fig = make_subplots(rows=2, cols=1, subplot_titles=(TEXT["shift_panel"], TEXT["distance_panel"]),
                        vertical_spacing=0.18)
    shifts, scores = np.asarray(shift["shifts"]), np.asarray(shift["scores"])
    pairs = [f"(m, n) = ({m}, {n})" for m, n in shift["positions"]]
    fig.add_trace(go.Scatter(x=shifts, y=scores, mode="lines+markers", name="shifted", customdata=pairs,
                             marker=dict(size=9, color=OWN_COLOUR),
                             hovertemplate="shift %{x}, %{customdata}: %{y:.8f}<extra></extra>"), row=1, col=1)
    rec = TEXT["recorded"].format(m=shift["query_position"], n=shift["key_position"])
    fig.add_hline(y=shift["recorded_score"], line=dict(dash="dot", color="grey"), row=1, col=1,
                  annotation_text=rec, annotation_position="bottom right")
    gap = shift["query_position"] - shift["key_position"]
    fig.add_trace(go.Scatter(x=shift["distances"], y=shift["by_distance"], mode="lines", name="by distance",
                             line=dict(color="#1f77b4"), hovertemplate="m − n = %{x}: %{y:.4f}<extra></extra>"),
                  row=2, col=1)
    fig.add_vline(x=gap, line=dict(dash="dot", color=OWN_COLOUR), row=2, col=1)
    spread = max(abs(float(scores.max() - scores.min())), 1e-9)
    mid = float(np.median(scores))
    fig.update_yaxes(range=[mid - 50 * spread - 1e-3 * abs(mid), mid + 50 * spread + 1e-3 * abs(mid)],
                     title_text=TEXT["score_axis"], row=1, col=1)
    fig.update_xaxes(title_text=TEXT["shift_axis"], row=1, col=1)
    fig.update_xaxes(title_text=TEXT["distance_axis"], row=2, col=1)
    fig.update_yaxes(title_text=TEXT["score_axis"], row=2, col=1)
    return finish(fig, title or TEXT["shift_title"].format(
        layer=shift["layer"], head=shift["head"], q=display_token(shift["query_label"]), m=shift["query_position"],
        k=display_token(shift["key_label"]), n=shift["key_position"]), height=600, showlegend=False)


def rope_shift_caption(shift: Mapping[str, Any]) -> str:
    if not shift.get("available"):
        return TEXT["no_rope"].format(reason=shift.get("reason", ""))
    return TEXT["shift_caption"].format(top=max(shift["shifts"]), count=len(shift["shifts"]), spread=shift["spread"],
                                        recorded=shift["recorded_score"], m=shift["query_position"],
                                        n=shift["key_position"], gap=shift["query_position"] - shift["key_position"])


def pe_schemes_figure(schemes: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Five panels stacked (one column stays legible on a phone), this model's starred and framed."""
    order = ("sinusoidal", "learned", "rope", "relative", "alibi")
    own = schemes["own"]
    def name(k: str) -> str:
        source = schemes["schemes"][k]["source"]
        return TEXT["names"][k] + (TEXT["own"] if k == own else TEXT["formula"] if source == "formula" else "")

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
            fig.add_annotation(text=TEXT["unavailable"], showarrow=False, xref="x domain", yref="y domain", x=0.5,
                               y=0.5, font=dict(color="grey"), row=row, col=col)
        for i, (curve, label) in enumerate(zip(curves, entry["labels"])):
            colour = OWN_COLOUR if key == own and curves.shape[0] == 1 else _COLOURS[i % len(_COLOURS)]
            hover = f"{TEXT['names'][key]}, {label}, δ %{{x}}: %{{y:.3f}}<extra></extra>"
            fig.add_trace(go.Scatter(x=delta, y=curve, mode="lines", name=label, showlegend=False,
                                     line=dict(color=colour, width=3 if key == own else 1.5), hovertemplate=hover),
                          row=row, col=col)
        fig.update_yaxes(title_text=TEXT["y"][key], title_font=dict(size=10), row=row, col=col)
        fig.update_xaxes(title_text=TEXT["delta_axis"] if row == 5 else None, row=row, col=col)
    if own in order:  # frame this model's panel
        fig.add_shape(type="rect", xref="x domain", yref="y domain", x0=-0.01, x1=1.01, y0=-0.06, y1=1.06,
                      line=dict(color=OWN_COLOUR, width=2), row=order.index(own) + 1, col=1)
    return finish(fig, title or TEXT["schemes_title"], height=1050)


def pe_schemes_caption(schemes: Mapping[str, Any]) -> str:
    own = schemes["own"]
    return TEXT["schemes_caption"].format(own=TEXT["names"].get(own, own))
