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

from playground.viz._common import PROB_SCALE, SIGNED_SCALE, display_token, finish, token_ticks

HIDDEN_COLOUR = "#d9d9d9"  # cells a mask hides (−∞) show the plot background through

# Every user-facing string of this analysis (the UI translates them).
TEXT = {
    "kind": {"self": "decoder self-attention", "cross": "cross-attention (decoder queries, encoder keys)",
             "encoder": "encoder self-attention"},
    "title": "Attention step by step<br><sup>{kind} · layer {layer} · head {head} · step {step}</sup>",
    "q": "Q: {queries} (after RoPE)",
    "q_plain": "Q: {queries}",
    "k": "Kᵀ: {keys} visible keys",
    "scores": "Q·Kᵀ (scores)",
    "scaled": "× scale {scale}",
    "masked": "+ mask (grey = −∞){bias}",
    "bias": " + T5 bias",
    "weights": "softmax → weights",
    "v": "Vᵀ: values",
    "output": "weights·V = head output",
    "one_query": "1 query",
    "queries": "{n} queries",
    "key_axis": "key token",
    "dim_axis": "dimension",
    "hidden": "−∞ (hidden by the mask)",
    "concat_title": (
        "Heads → concat → W_O<br><sup>layer {layer}: concat(o₀ … o_{last}) · W_O{bias} = Σ_h o_h · W_O[h]{bias}</sup>"
    ),
    "concat": "concat: {h} heads × {d} = {hd} (head {head} boxed)",
    "w_o": "W_O[{head}]: rows {start}–{stop} of {rows} × {d_model}",
    "contribution": "head {head}'s share o_h · W_O[h]",
    "projected": "attention output (all heads{bias})",
    "caption_prefill": (
        "**Prefill (step 0):** the {n} prompt tokens are processed at once, so Q has {n} rows and the score "
        "matrix is {n} × {n} (seed 002: L_p × L_p). The causal mask puts −∞ above the diagonal: a token never "
        "sees the tokens after it."
    ),
    "caption_decode": (
        "**Decode (step {step}):** one new query against T + 1 = {keys} keys (seed 002's asymmetry: Q_t is "
        "1 × d_h, K_all is (T + 1) × d_h). The causal mask hides nothing here: every cached key lies in the "
        "past of the newest token."
    ),
    "caption_window": " The sliding window of {window} tokens hides {hidden} older key(s) (−∞).",
    "caption_cross": (
        "**Cross-attention:** the decoder's query reads every one of the {keys} source tokens; K and V come "
        "from the encoder output, projected once per source and cached."
    ),
    "caption_encoder": (
        "**Encoder:** every source token attends to every other one (no causal mask), {keys} × {keys}."
    ),
    "caption_scale": " Scores are multiplied by 1/√d_h = 1/√{d} = {scale:.4g} so their spread does not grow with d_h.",
    "caption_scale_one": " The scale is {scale:g} (T5 folds 1/√d_h into its weights).",
    "caption_gqa": " Query head {head} reads KV head {kv_head}: {g} query heads share each K/V head (GQA).",
    "caption_check": (
        " Putting the stages back together (softmax · V for every head, concat, · W_O) gives the model's own "
        "attention output to {err:.1e}."
    ),
}


def _signed(z: np.ndarray, **kwargs: Any) -> go.Heatmap:
    finite = np.abs(z[np.isfinite(z)]) if np.isfinite(z).any() else np.array([1.0])
    bound = float(finite.max()) or 1.0
    return go.Heatmap(z=z, colorscale=SIGNED_SCALE, zmid=0.0, zmin=-bound, zmax=bound, showscale=False, **kwargs)


def _query_text(steps: Mapping[str, Any]) -> str:
    n = len(steps["query_labels"])
    return TEXT["one_query"] if n == 1 else TEXT["queries"].format(n=n)


def attention_steps_figure(steps: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Eight stacked panels sharing the key axis: Q, Kᵀ, scores, scaled, masked, weights, Vᵀ, output."""
    q_labels = [display_token(t) for t in steps["query_labels"]]
    k_labels = [display_token(t) for t in steps["key_labels"]]
    Tq, S, d = len(q_labels), len(k_labels), int(steps["head_dim"])
    kind = steps["kind"]
    rope = kind != "cross" and steps.get("positional", "rope") == "rope"
    bias = steps.get("bias") is not None
    titles = (
        (TEXT["q"] if rope else TEXT["q_plain"]).format(queries=_query_text(steps)),
        TEXT["k"].format(keys=S), TEXT["scores"], TEXT["scaled"].format(scale=f"{steps['scale']:.4g}"),
        TEXT["masked"].format(bias=TEXT["bias"] if bias else ""), TEXT["weights"], TEXT["v"],
        TEXT["output"].format(d=d),
    )
    q_px, d_px = int(np.clip(20 * Tq, 40, 320)), int(min(200, 3 * d + 20))
    row_px = [q_px, d_px, q_px, q_px, q_px, q_px, d_px, q_px]
    fig = make_subplots(rows=8, cols=1, subplot_titles=titles, row_heights=row_px, vertical_spacing=0.065)
    pair = np.asarray(q_labels, dtype=object)[:, None] + " → " + np.asarray(k_labels, dtype=object)[None, :]
    dims = np.arange(d)
    by_query = np.broadcast_to(np.asarray(q_labels, dtype=object)[:, None], (Tq, d))
    fig.add_trace(_signed(steps["q"], x=dims, customdata=by_query,
                          hovertemplate="%{customdata}, dim %{x}: %{z:.3f}<extra>Q</extra>"), row=1, col=1)
    # Token names in every K/V cell's hover for short runs; long ones hover by position (the axis names
    # the tokens) so a step change does not ship tens of thousands of strings to the page.
    if S * d <= 20_000:
        keys_by_dim = np.broadcast_to(np.asarray(k_labels, dtype=object)[None, :], (d, S))
        kv_hover = dict(customdata=keys_by_dim, hovertemplate="%{customdata}, dim %{y}: %{z:.3f}<extra>{name}</extra>")
    else:
        kv_hover = dict(hovertemplate="key %{x}, dim %{y}: %{z:.3f}<extra>{name}</extra>")
    k_hover = {**kv_hover, "hovertemplate": kv_hover["hovertemplate"].replace("{name}", "K")}
    v_hover = {**kv_hover, "hovertemplate": kv_hover["hovertemplate"].replace("{name}", "V")}
    fig.add_trace(_signed(np.asarray(steps["k"]).T, **k_hover), row=2, col=1)
    # Small matrices carry their numbers in the cells, as the seeds' worked examples do.
    numbers = dict(texttemplate="%{z:.2g}", textfont=dict(size=9)) if S <= 12 and Tq <= 8 else {}
    for row, name in ((3, "scores"), (4, "scaled")):
        fig.add_trace(_signed(steps[name], text=pair, hovertemplate="%{text}: %{z:.3f}<extra>" + name + "</extra>",
                              **numbers), row=row, col=1)
    masked = np.where(np.isfinite(steps["masked"]), steps["masked"], np.nan)
    shown = np.where(steps["mask"], np.round(np.nan_to_num(masked), 3).astype(object), TEXT["hidden"])
    fig.add_trace(_signed(masked, text=pair, customdata=shown,
                          hovertemplate="%{text}: %{customdata}<extra>masked</extra>", **numbers), row=5, col=1)
    fig.add_trace(go.Heatmap(z=steps["weights"], text=pair, colorscale=PROB_SCALE, zmin=0.0, zmax=1.0, showscale=False,
                             hovertemplate="%{text}: %{z:.3f}<extra>weight</extra>", **numbers), row=6, col=1)
    fig.add_trace(_signed(np.asarray(steps["v"]).T, **v_hover), row=7, col=1)
    fig.add_trace(_signed(steps["output"], x=dims,
                          customdata=np.broadcast_to(np.asarray(q_labels, dtype=object)[:, None], (Tq, d)),
                          hovertemplate="%{customdata}, dim %{x}: %{z:.3f}<extra>output</extra>"), row=8, col=1)
    ticks = token_ticks(k_labels, max_ticks=24)
    for row in range(1, 9):
        fig.update_yaxes(autorange="reversed", showgrid=False, row=row, col=1,
                         showticklabels=row in (2, 7) or Tq <= 12,
                         **({} if row in (2, 7) else token_ticks(q_labels, max_ticks=12)))
        # Key tokens label the bottom key panel (Vᵀ; the columns line up above it, and every cell's hover
        # names its token); dims label Q and the output.
        fig.update_xaxes(showgrid=False, row=row, col=1, **({} if row in (1, 8) else ticks),
                         showticklabels=row in (1, 7, 8), tickangle=0 if row in (1, 8) else -45)
    fig.update_xaxes(title_text=TEXT["dim_axis"], row=8, col=1)
    if title is None:
        title = TEXT["title"].format(kind=TEXT["kind"][kind], layer=steps["layer"], head=steps["head"],
                                     step=steps["step"])
    return finish(fig, title, height=int(sum(row_px) + 8 * 45 + 140), plot_bgcolor=HIDDEN_COLOUR)


def heads_concat_figure(steps: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """For the step's (last) query: the concat of every head's output, this head's slice of W_O, its
    share of the output and the attention output (= Σ of all heads' shares + bias)."""
    h, d, head = int(steps["n_heads"]), int(steps["head_dim"]), int(steps["head"])
    concat = np.asarray(steps["concat"])[-1]
    w_slice = np.asarray(steps["w_o_slice"])
    d_model = w_slice.shape[1]
    bias = " + b" if steps.get("o_bias") is not None else ""
    titles = (
        TEXT["concat"].format(h=h, d=d, hd=h * d, head=head),
        TEXT["w_o"].format(head=head, start=head * d, stop=(head + 1) * d - 1, d_model=d_model,
                           rows=steps["w_o_shape"][0]),
        TEXT["contribution"].format(head=head),
        TEXT["projected"].format(bias=bias),
    )
    fig = make_subplots(rows=4, cols=1, subplot_titles=titles, row_heights=[50, min(220, 3 * d + 20), 50, 50],
                        vertical_spacing=0.09)
    cols = np.arange(h * d)
    fig.add_trace(_signed(concat[None], x=cols, customdata=(cols // d)[None],
                          hovertemplate="head %{customdata}, dim %{x}: %{z:.3f}<extra>concat</extra>"), row=1, col=1)
    fig.add_shape(type="rect", x0=head * d - 0.5, x1=(head + 1) * d - 0.5, y0=-0.5, y1=0.5,
                  line=dict(color="black", width=2), row=1, col=1)
    for i in range(1, h):
        fig.add_vline(x=i * d - 0.5, line=dict(color="white", width=1), row=1, col=1)
    fig.add_trace(_signed(w_slice, hovertemplate="row %{y}, col %{x}: %{z:.3f}<extra>W_O slice</extra>"), row=2, col=1)
    fig.add_trace(_signed(np.asarray(steps["head_contribution"])[-1:],
                          hovertemplate="dim %{x}: %{z:.3f}<extra>head share</extra>"), row=3, col=1)
    fig.add_trace(_signed(np.asarray(steps["attention_output"])[-1:],
                          hovertemplate="dim %{x}: %{z:.3f}<extra>attention output</extra>"), row=4, col=1)
    fig.update_yaxes(showticklabels=False, showgrid=False, autorange="reversed")
    fig.update_xaxes(showgrid=False)
    if title is None:
        title = TEXT["concat_title"].format(layer=steps["layer"], last=h - 1, bias=bias)
    return finish(fig, title, height=int(250 + 150 + min(220, 3 * d + 20)))


def attention_steps_caption(steps: Mapping[str, Any]) -> str:
    """Markdown explaining what this step's panels show, with its numbers."""
    kind, S, Tq = steps["kind"], len(steps["key_labels"]), len(steps["query_labels"])
    if kind == "cross":
        text = TEXT["caption_cross"].format(keys=S)
    elif kind == "encoder":
        text = TEXT["caption_encoder"].format(keys=S)
    elif steps["phase"] == "prefill" and Tq > 1:
        text = TEXT["caption_prefill"].format(n=Tq)
    else:
        text = TEXT["caption_decode"].format(step=steps["step"], keys=S)
    hidden = int((~np.asarray(steps["mask"])[-1]).sum())
    if "window" in steps["mask_kind"] and hidden:
        text += TEXT["caption_window"].format(window=steps["mask_kind"].rsplit(" ", 1)[-1], hidden=hidden)
    d, scale = int(steps["head_dim"]), float(steps["scale"])
    if abs(scale * d**0.5 - 1.0) < 1e-6:
        text += TEXT["caption_scale"].format(d=d, scale=scale)
    else:
        text += TEXT["caption_scale_one"].format(scale=scale)
    g = int(steps["n_heads"]) // int(steps["n_kv_heads"])
    if g > 1:
        text += TEXT["caption_gqa"].format(head=steps["head"], kv_head=steps["kv_head"], g=g)
    return text + TEXT["caption_check"].format(err=float(steps["max_abs_error"]))
