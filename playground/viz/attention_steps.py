"""Attention step by step: Q, Kᵀ, Q·Kᵀ, × scale, + mask, softmax, × V, and the heads into W_O.

Draws the dict of `playground.analysis.attention_steps` (numpy arrays and labels; no torch here).
Key tokens run along the x axis of every key panel so a column reads top to bottom: that key's
vector, its score, scaled, masked, its weight and its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.steps import step_number
from playground.viz._common import PROB_SCALE, SIGNED_SCALE, display_token, finish, token_ticks
from playground.viz._language import texts

HIDDEN_COLOUR = "#d9d9d9"  # cells a mask hides (−∞) show the plot background through

# Every user-facing string of this analysis, in English and (TEXT_ZH) in 中文.
_T = texts("attention_steps")  # this module's words, from playground/locales/


def _signed(z: np.ndarray, **kwargs: Any) -> go.Heatmap:
    finite = np.abs(z[np.isfinite(z)]) if np.isfinite(z).any() else np.array([1.0])
    bound = float(finite.max()) or 1.0
    return go.Heatmap(z=z, colorscale=SIGNED_SCALE, zmid=0.0, zmin=-bound, zmax=bound, showscale=False, **kwargs)


def _query_text(steps: Mapping[str, Any], lang: str = "en") -> str:
    n = len(steps["query_labels"])
    return _T(lang)["one_query"] if n == 1 else _T(lang)["queries"].format(n=n)


def attention_steps_figure(steps: Mapping[str, Any], title: str | None = None, lang: str = "en",
                           before: int = 0) -> go.Figure:
    """Eight stacked panels sharing the key axis: Q, Kᵀ, scores, scaled, masked, weights, Vᵀ, output."""
    q_labels = [display_token(t) for t in steps["query_labels"]]
    k_labels = [display_token(t) for t in steps["key_labels"]]
    Tq, S, d = len(q_labels), len(k_labels), int(steps["head_dim"])
    kind = steps["kind"]
    rope = kind != "cross" and steps.get("positional", "rope") == "rope"
    bias = steps.get("bias") is not None
    titles = (
        (_T(lang)["q"] if rope else _T(lang)["q_plain"]).format(queries=_query_text(steps, lang=lang)),
        _T(lang)["k"].format(keys=S), _T(lang)["scores"], _T(lang)["scaled"].format(scale=f"{steps['scale']:.4g}"),
        _T(lang)["masked"].format(bias=_T(lang)["bias"] if bias else ""), _T(lang)["weights"], _T(lang)["v"],
        _T(lang)["output"].format(d=d),
    )
    trace = _T(lang)["trace"]
    q_px, d_px = int(np.clip(20 * Tq, 40, 320)), int(min(200, 3 * d + 20))
    row_px = [q_px, d_px, q_px, q_px, q_px, q_px, d_px, q_px]
    fig = make_subplots(rows=8, cols=1, subplot_titles=titles, row_heights=row_px, vertical_spacing=0.065)
    pair = np.asarray(q_labels, dtype=object)[:, None] + " → " + np.asarray(k_labels, dtype=object)[None, :]
    dims = np.arange(d)
    by_query = np.broadcast_to(np.asarray(q_labels, dtype=object)[:, None], (Tq, d))
    fig.add_trace(_signed(steps["q"], x=dims, customdata=by_query,
                          hovertemplate=_T(lang)["hover_query_dim"].format(name="Q")), row=1, col=1)
    # Token names in every K/V cell's hover for short runs; long ones hover by position (the axis names
    # the tokens) so a step change does not ship tens of thousands of strings to the page.
    if S * d <= 20_000:
        keys_by_dim = np.broadcast_to(np.asarray(k_labels, dtype=object)[None, :], (d, S))
        kv_hover, kv_template = dict(customdata=keys_by_dim), _T(lang)["hover_key_dim"]
    else:
        kv_hover, kv_template = {}, _T(lang)["hover_key_position"]
    k_hover = {**kv_hover, "hovertemplate": kv_template.format(name="K")}
    v_hover = {**kv_hover, "hovertemplate": kv_template.format(name="V")}
    fig.add_trace(_signed(np.asarray(steps["k"]).T, **k_hover), row=2, col=1)
    # Small matrices carry their numbers in the cells, as textbook worked examples do.
    numbers = dict(texttemplate="%{z:.2g}", textfont=dict(size=9)) if S <= 12 and Tq <= 8 else {}
    for row, name in ((3, "scores"), (4, "scaled")):
        fig.add_trace(_signed(steps[name], text=pair, hovertemplate=_T(lang)["hover_pair"].format(name=trace[name]),
                              **numbers), row=row, col=1)
    masked = np.where(np.isfinite(steps["masked"]), steps["masked"], np.nan)
    shown = np.where(steps["mask"], np.round(np.nan_to_num(masked), 3).astype(object), _T(lang)["hidden"])
    fig.add_trace(_signed(masked, text=pair, customdata=shown,
                          hovertemplate=_T(lang)["hover_masked"].format(name=trace["masked"]), **numbers), row=5, col=1)
    fig.add_trace(go.Heatmap(z=steps["weights"], text=pair, colorscale=PROB_SCALE, zmin=0.0, zmax=1.0, showscale=False,
                             hovertemplate=_T(lang)["hover_pair"].format(name=trace["weight"]), **numbers), row=6, col=1)
    fig.add_trace(_signed(np.asarray(steps["v"]).T, **v_hover), row=7, col=1)
    fig.add_trace(_signed(steps["output"], x=dims,
                          customdata=np.broadcast_to(np.asarray(q_labels, dtype=object)[:, None], (Tq, d)),
                          hovertemplate=_T(lang)["hover_query_dim"].format(name=trace["output"])), row=8, col=1)
    ticks = token_ticks(k_labels, max_ticks=24)
    for row in range(1, 9):
        fig.update_yaxes(autorange="reversed", showgrid=False, row=row, col=1,
                         showticklabels=row in (2, 7) or Tq <= 12,
                         **({} if row in (2, 7) else token_ticks(q_labels, max_ticks=12)))
        # Key tokens label the bottom key panel (Vᵀ; the columns line up above it, and every cell's hover
        # names its token); dims label Q and the output.
        fig.update_xaxes(showgrid=False, row=row, col=1, **({} if row in (1, 8) else ticks),
                         showticklabels=row in (1, 7, 8), tickangle=0 if row in (1, 8) else -45)
    fig.update_xaxes(title_text=_T(lang)["dim_axis"], row=8, col=1)
    if title is None:
        title = _T(lang)["title"].format(kind=_T(lang)["kind"][kind], layer=steps["layer"], head=steps["head"],
                                     step=step_number(steps["step"], before))
    return finish(fig, title, height=int(sum(row_px) + 8 * 45 + 140), plot_bgcolor=HIDDEN_COLOUR)


def heads_concat_figure(steps: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """For the step's (last) query: the concat of every head's output, this head's slice of W_O, its
    share of the output and the attention output (= Σ of all heads' shares + bias)."""
    h, d, head = int(steps["n_heads"]), int(steps["head_dim"]), int(steps["head"])
    concat = np.asarray(steps["concat"])[-1]
    w_slice = np.asarray(steps["w_o_slice"])
    d_model = w_slice.shape[1]
    bias = " + b" if steps.get("o_bias") is not None else ""
    titles = (
        _T(lang)["concat"].format(h=h, d=d, hd=h * d, head=head),
        _T(lang)["w_o"].format(head=head, start=head * d, stop=(head + 1) * d - 1, d_model=d_model,
                         rows=steps["w_o_shape"][0]),
        _T(lang)["contribution"].format(head=head),
        _T(lang)["projected"].format(bias=bias),
    )
    trace = _T(lang)["trace"]
    fig = make_subplots(rows=4, cols=1, subplot_titles=titles, row_heights=[50, min(220, 3 * d + 20), 50, 50],
                        vertical_spacing=0.09)
    cols = np.arange(h * d)
    fig.add_trace(_signed(concat[None], x=cols, customdata=(cols // d)[None],
                          hovertemplate=_T(lang)["hover_concat"].format(name=trace["concat"])), row=1, col=1)
    fig.add_shape(type="rect", x0=head * d - 0.5, x1=(head + 1) * d - 0.5, y0=-0.5, y1=0.5,
                  line=dict(color="black", width=2), row=1, col=1)
    for i in range(1, h):
        fig.add_vline(x=i * d - 0.5, line=dict(color="white", width=1), row=1, col=1)
    fig.add_trace(_signed(w_slice, hovertemplate=_T(lang)["hover_w_o"].format(name=trace["w_o"])), row=2, col=1)
    fig.add_trace(_signed(np.asarray(steps["head_contribution"])[-1:],
                          hovertemplate=_T(lang)["hover_dim"].format(name=trace["share"])), row=3, col=1)
    fig.add_trace(_signed(np.asarray(steps["attention_output"])[-1:],
                          hovertemplate=_T(lang)["hover_dim"].format(name=trace["attention_output"])), row=4, col=1)
    fig.update_yaxes(showticklabels=False, showgrid=False, autorange="reversed")
    fig.update_xaxes(showgrid=False)
    if title is None:
        title = _T(lang)["concat_title"].format(layer=steps["layer"], last=h - 1, bias=bias)
    return finish(fig, title, height=int(250 + 150 + min(220, 3 * d + 20)))


def attention_steps_caption(steps: Mapping[str, Any], lang: str = "en", before: int = 0) -> str:
    """Markdown explaining what this step's panels show, with its numbers."""
    kind, S, Tq = steps["kind"], len(steps["key_labels"]), len(steps["query_labels"])
    if kind == "cross":
        text = _T(lang)["caption_cross"].format(keys=S)
    elif kind == "encoder":
        text = _T(lang)["caption_encoder"].format(keys=S)
    elif steps["phase"] == "prefill" and Tq > 1:
        text = _T(lang)["caption_prefill"].format(n=Tq, step=step_number(steps["step"], before))
    else:
        text = _T(lang)["caption_decode"].format(step=step_number(steps["step"], before), keys=S)
    hidden = int((~np.asarray(steps["mask"])[-1]).sum())
    if "window" in steps["mask_kind"] and hidden:
        text += _T(lang)["caption_window"].format(window=steps["mask_kind"].rsplit(" ", 1)[-1], hidden=hidden)
    d, scale = int(steps["head_dim"]), float(steps["scale"])
    if abs(scale * d**0.5 - 1.0) < 1e-6:
        text += _T(lang)["caption_scale"].format(d=d, scale=scale)
    else:
        text += _T(lang)["caption_scale_one"].format(scale=scale)
    g = int(steps["n_heads"]) // int(steps["n_kv_heads"])
    if g > 1:
        text += _T(lang)["caption_gqa"].format(head=steps["head"], kv_head=steps["kv_head"], g=g)
    return text + _T(lang)["caption_check"].format(err=float(steps["max_abs_error"]))
