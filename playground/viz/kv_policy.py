"""The KV-cache lab's figures: the bytes a cache policy holds per step against the plain cache's, and the
attention-sink mass on the first token per layer and head. Pure functions of plain numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from playground.viz import causal
from playground.viz._common import PROB_SCALE, as_array, finish, legend_below, wrap_title
from playground.viz._language import texts

_T = texts("kv_policy")  # this module's words, from playground/locales/


def bytes_figure(series: Mapping[str, Sequence[int]], label: str, lang: str = "en") -> go.Figure:
    """KV bytes per step: the plain cache's (what the formula gives at that length) and the policy's (what its
    cache really holds), from `playground.app.experiments.kv.bytes_series`; `label` names the policy."""
    steps, held, plain = list(series["steps"]), list(series["held"]), list(series["plain"])
    if not (len(steps) == len(held) == len(plain)):
        raise ValueError(f"{len(steps)} steps need as many held and plain byte counts")
    kib = 1024.0
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=[b / kib for b in plain], name=_T(lang)["plain"], mode="lines+markers",
                             line=dict(color="#7f8c8d", dash="dash"), hovertemplate=_T(lang)["hover"]))
    fig.add_trace(go.Scatter(x=steps, y=[b / kib for b in held], name=label or _T(lang)["policy"], mode="lines+markers",
                             line=dict(color="#2e86c1"), customdata=list(series.get("kept", [0] * len(steps))),
                             hovertemplate=_T(lang)["hover_kept"]))
    fig.update_xaxes(title_text=_T(lang)["step"])
    fig.update_yaxes(title_text=_T(lang)["kib"], rangemode="tozero")
    return finish(fig, _T(lang)["bytes_title"], height=380, legend=legend_below(380))


def sink_figure(mass: Any, lang: str = "en") -> go.Figure:
    """Layer × head heat map of the attention weight each head puts on the first token (0..1)."""
    m = as_array(mass, 2, "mass")
    layers, heads = m.shape
    fig = go.Figure(go.Heatmap(z=m, x=list(range(heads)), y=list(range(layers)), zmin=0, zmax=1,
                               colorscale=PROB_SCALE, colorbar=dict(title=_T(lang)["weight"]), hovertemplate=_T(lang)["sink_hover"]))
    fig.update_xaxes(title_text=_T(lang)["head"], dtick=1 if heads <= 16 else None)
    fig.update_yaxes(title_text=_T(lang)["layer"], autorange="reversed", dtick=1 if layers <= 16 else None)
    mean = float(np.mean(m)) if m.size else 0.0
    return finish(fig, _T(lang)["sink_title"].format(mean=mean), height=max(280, min(620, 60 + 18 * layers)))


def divergence_figure(data: Mapping[str, Any], token_texts: Sequence[str], lang: str = "en",
                      before: int = 0) -> go.Figure:
    """The causal lab's divergence figure (`Divergence.to_dict()` along the plain run's tokens), its names saying
    the policy cache where the lab says the edit."""
    fig = causal.divergence_figure(data, token_texts, lang=lang, before=before)
    fig.data[0].name, fig.data[1].name = _T(lang)["div_kl"], _T(lang)["div_prob"]
    return fig.update_layout(title_text=wrap_title(_T(lang)["div_title"]))
