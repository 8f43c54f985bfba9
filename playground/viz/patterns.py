"""Attention-pattern gallery: masks with their cost, and the model's real weights under its
own mask (from `playground.analysis.patterns`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import PROB_SCALE, display_token, finish, pair_text, token_ticks
from playground.viz._language import texts

MASK_COLOURS = [[0.0, "#f0f0f0"], [1.0, "#3182bd"]]
OWN_COLOUR = "#d62728"

_T = texts("patterns")  # this module's words, from playground/locales/


def _name(p: Mapping[str, Any], gallery: Mapping[str, Any], lang: str = "en") -> str:
    g = gallery
    return _T(lang)["names"][p["key"]].format(window=g["window"], g=g["global_tokens"], stride=g["stride"],
                                          dilation=g["dilation"], span=g["window"] * g["dilation"],
                                          real=g["real_length"], T=g["length"])


def pattern_gallery_figure(gallery: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """Every mask as a small heatmap, two per row, each titled with the share of cells it keeps."""
    patterns = gallery["patterns"]
    cols = 2
    rows = (len(patterns) + cols - 1) // cols
    titles = [_T(lang)["panel"].format(name=_name(p, gallery, lang=lang), own=_T(lang)["own"] if p["own"] else "",
                                   share=p["fraction_of_full"]) for p in patterns]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.06,
                        vertical_spacing=0.3 / rows)
    for n, p in enumerate(patterns):
        row, col = n // cols + 1, n % cols + 1
        hover = _T(lang)["hover_mask"].format(name=_T(lang)["keys"][p["key"]])
        fig.add_trace(go.Heatmap(z=p["mask"].astype(float), colorscale=MASK_COLOURS, zmin=0, zmax=1, showscale=False,
                                 hovertemplate=hover), row=row, col=col)
        if p["own"]:
            suffix = "" if n == 0 else str(n + 1)
            fig.add_shape(type="rect", xref=f"x{suffix} domain", yref=f"y{suffix} domain", x0=0, x1=1, y0=0, y1=1,
                          line=dict(color=OWN_COLOUR, width=3))
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    return finish(fig, title or _T(lang)["title"].format(T=gallery["length"]), height=160 + 230 * rows)


def pattern_gallery_caption(gallery: Mapping[str, Any], lang: str = "en") -> str:
    by = {p["key"]: p for p in gallery["patterns"]}
    flops = _T(lang)["flops_sep"].join(_T(lang)["flops_item"].format(name=_T(lang)["keys"][k],
                                                                     mflops=by[k]["flops_per_layer"] / 1e6)
                                 for k in ("full", "causal", "sliding_window"))
    return _T(lang)["caption"].format(
        full=by["full"]["cells"], causal=by["causal"]["cells"], causal_share=by["causal"]["fraction_of_full"],
        window=gallery["window"], window_cells=by["sliding_window"]["cells"],
        window_share=by["sliding_window"]["fraction_of_full"], flops=flops,
        window_note=_T(lang)["window_note"].format(window=gallery["window"]) if gallery["window_is_models"] else "",
        g=gallery["global_tokens"], stride=gallery["stride"], dilation=gallery["dilation"],
        span=gallery["window"] * gallery["dilation"], real=gallery["real_length"], T=gallery["length"],
    )


def own_weights_figure(data: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """One head's (T, S) weights with the hidden cells left grey."""
    w = np.where(data["mask"], data["weights"], np.nan)
    q = [display_token(t) for t in data["query_labels"]]
    k = [display_token(t) for t in data["key_labels"]]
    # Token pairs in the hover for short runs; beyond that the axes carry the tokens (a 500 × 500 map
    # would send a quarter of a million strings to the page).
    hover = dict(text=pair_text(q, k), hovertemplate=_T(lang)["hover_pair"]) if len(q) * len(k) <= 20_000 \
        else dict(hovertemplate=_T(lang)["hover_position"])
    fig = go.Figure(go.Heatmap(z=w, colorscale=PROB_SCALE, zmin=0.0, zmax=1.0,
                               colorbar=dict(title=dict(text=_T(lang)["weight"])), **hover))
    fig.update_xaxes(title_text=_T(lang)["key"], tickangle=-60, showgrid=False, **token_ticks(k))
    fig.update_yaxes(title_text=_T(lang)["query"], autorange="reversed", showgrid=False, **token_ticks(q))
    kind = _T(lang)["kinds"].get(data["kind"], data["kind"])
    return finish(fig, title or _T(lang)["weights_title"].format(kind=kind, layer=data["layer"], head=data["head"]),
                  height=int(min(720, max(360, 200 + 14 * len(q)))), plot_bgcolor="#d9d9d9")


def own_weights_caption(data: Mapping[str, Any], lang: str = "en") -> str:
    return _T(lang)["weights_caption"].format(kind=_T(lang)["kinds"].get(data["kind"], data["kind"]),
                                          T=len(data["query_labels"]), hidden=data["hidden_mass"])
