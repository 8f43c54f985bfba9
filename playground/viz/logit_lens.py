"""Logit lens figures: each layer's top next tokens at one step, and the chosen token's rank per
layer × step (from `playground.analysis.logit_lens` / `logit_lens_ranks`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from playground.steps import step_number
from playground.viz._common import PROB_SCALE, display_token, finish, layer_name, short_label, token_ticks
from playground.viz._language import texts

_T = texts("logit_lens")  # this module's words, from playground/locales/


def logit_lens_figure(entries: Sequence[Mapping[str, Any]], step: int, title: str | None = None, lang: str = "en",
                      before: int = 0) -> go.Figure:
    """Layers down, top-k candidates across (shaded by probability), plus the chosen token's rank column."""
    if not entries:
        raise ValueError("entries is empty; pass logit_lens(...) of a run with a residual stream")
    k = len(entries[0]["probs"])
    probs = np.array([list(e["probs"]) + [e["prob"]] for e in entries])  # (L + 1, k + 1)
    text = [[_T(lang)["cell"].format(token=short_label(display_token(t), 10), prob=p)
             for t, p in zip(e["token_texts"], e["probs"])]
            + [_T(lang)["chosen_cell"].format(rank=e["rank"], prob=e["prob"])] for e in entries]
    hover = [[_T(lang)["hover_top"].format(token=display_token(t), id=i, prob=p)
              for t, i, p in zip(e["token_texts"], e["token_ids"], e["probs"])]
             + [_T(lang)["hover_chosen"].format(rank=e["rank"], prob=e["prob"])] for e in entries]
    columns = [_T(lang)["top_col"].format(i=i + 1) for i in range(k)] + [_T(lang)["rank_col"]]
    names = [layer_name(e["name"], lang=lang) for e in entries]
    fig = go.Figure(go.Heatmap(
        z=probs, x=columns, y=list(range(len(entries))), text=text, customdata=hover, texttemplate="%{text}",
        textfont=dict(size=10), colorscale=PROB_SCALE, zmin=0.0, zmax=1.0, xgap=2, ygap=2,
        showscale=False, hovertemplate="%{customdata}<extra></extra>",  # cells print p: no colour bar
    ))
    fig.update_yaxes(title_text=_T(lang)["layer_axis"], autorange="reversed", tickmode="array",
                     tickvals=list(range(len(names))), ticktext=names, showgrid=False)
    fig.update_xaxes(side="top", showgrid=False)
    height = int(min(1400, max(300, 150 + 34 * len(entries))))
    # `step` indexes the run's tokens from 0; it is shown counted from 1, as the live screen counts steps
    return finish(fig, title or _T(lang)["title"].format(step=step_number(step, before)), height=height)


def lens_rank_strip(
    ranks: np.ndarray,
    layer_names: Sequence[str],
    steps: Sequence[int],
    token_texts: Sequence[str],
    selected: int | None = None,
    title: str | None = None, lang: str = "en", before: int = 0,
) -> go.Figure:
    """(L + 1, n) ranks as a heat strip on a log scale (bright = rank 1); the selected step is boxed;
    NaN columns (not computed yet) stay grey."""
    r = np.asarray(ranks, dtype=np.float64)
    if r.ndim != 2 or r.shape != (len(layer_names), len(steps)):
        raise ValueError(f"ranks must be (layers, steps) = ({len(layer_names)}, {len(steps)}), got {r.shape}")
    labels = [f"{step_number(s, before)}: {display_token(t)}" for s, t in zip(steps, token_texts)]  # as the page counts
    custom = np.broadcast_to(np.asarray(labels, dtype=object)[None, :], r.shape)
    shown = np.where(np.isnan(r), _T(lang)["not_yet"], np.nan_to_num(r).astype(int).astype(str)).astype(object)
    top = max(1.0, float(np.nanmax(r))) if np.isfinite(r).any() else 10.0
    fig = go.Figure(go.Heatmap(
        z=np.log10(r), x=list(range(len(steps))), customdata=np.stack([custom, shown], -1),
        colorscale=PROB_SCALE, reversescale=True, zmin=0.0, zmax=max(np.log10(top), 1.0),
        colorbar=dict(title=dict(text=_T(lang)["rank_bar"]), tickvals=[0, 1, 2, 3, 4],
                      ticktext=["1", "10", "100", "1k", "10k"]),
        hovertemplate=_T(lang)["strip_hover"], y=[layer_name(n, lang=lang) for n in layer_names],
    ))
    if selected is not None and selected in steps:
        i = list(steps).index(selected)
        fig.add_shape(type="rect", x0=i - 0.5, x1=i + 0.5, y0=-0.5, y1=len(layer_names) - 0.5,
                      line=dict(color="red", width=2))
    fig.update_xaxes(title_text=_T(lang)["step_axis"], tickangle=-60, showgrid=False, **token_ticks(labels,
                                                                                                    max_ticks=24))
    fig.update_yaxes(autorange="reversed", showgrid=False)
    return finish(fig, title or _T(lang)["strip_title"], height=int(min(900, max(300, 170 + 16 * len(layer_names)))),
                  plot_bgcolor="#d9d9d9")


def logit_lens_caption(entries: Sequence[Mapping[str, Any]], step: int, chosen_text: str, lang: str = "en",
                       before: int = 0) -> str:
    last = entries[-1]
    first = next((e["name"] for e in entries if e["rank"] == 1), None)
    if first is None:
        note = _T(lang)["never_top_last"]
    elif first == last["name"]:
        note = _T(lang)["never_top"]
    else:
        note = _T(lang)["first_top"].format(layer=layer_name(first, lang=lang))
    return _T(lang)["caption"].format(step=step_number(step, before), chosen=display_token(chosen_text),
                                      prob=last["prob"], first=note)
