"""Anatomy of the loaded model as a diagram with real parameter counts, and the residual stream's norm
per layer (from `playground.analysis.anatomy`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go

from playground.steps import step_number
from playground.viz._common import display_text, finish, layer_name
from playground.viz._language import texts

BOX = {"embedding": "#c6dbef", "positions": "#e5f5e0", "relative_bias": "#e5f5e0", "embed_norm": "#fdd0a2",
       "attn_norm": "#fdd0a2", "cross_norm": "#fdd0a2", "mlp_norm": "#fdd0a2", "final_norm": "#fdd0a2",
       "attn": "#9ecae1", "cross": "#bcbddc", "mlp": "#a1d99b", "head": "#c6dbef", "final_logits_bias": "#f0f0f0",
       "tokens": "#ffffff", "add": "#ffffff"}

_T = texts("anatomy")  # this module's words, from playground/locales/


def _fmt(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else (f"{n / 1e3:.1f}k" if n >= 1e3 else str(n))


def _shapes(part: Mapping[str, Any]) -> str:
    shown = [f"{name or 'w'} {'×'.join(str(s) for s in shape)}" for name, shape in part["tensors"]
             if not name.endswith("bias")][:3]
    return ", ".join(shown)


def _label(part: Mapping[str, Any], positional: str, lang: str = "en") -> str:
    key = part["key"]
    name = _T(lang)["names"].get(key, key)
    if key == "positions":
        name = _T(lang)["name_note"].format(name=name, note=_T(lang)["positions_note"].get(part["note"], part["note"]))
    elif key.endswith("norm"):
        name = _T(lang)["name_paren"].format(name=name, note=_T(lang)["norm_kinds"].get(part["note"], part["note"]))
    elif key == "mlp":
        kind = part["note"].replace("MLP", "").lower() or "plain"
        name = _T(lang)["name_paren"].format(name=name, note=_T(lang)["mlp_kinds"].get(kind, kind))
    if key == "head" and part["note"] == "tied":
        detail = _T(lang)["tied"]
    elif part["params"] == 0:
        detail = _T(lang)["no_params"]
    else:
        detail = _T(lang)["params"].format(n=_fmt(part["params"]))
        if part["repeat"] > 1:
            detail += _T(lang)["each"].format(n=_fmt(part["params_each"]))
        shapes = _shapes(part)
        if shapes:
            detail += f"<br>{shapes}"
    return f"<b>{name}</b><br>{detail}"


def _column(fig: go.Figure, x: float, boxes: list[tuple[str, str]], block: tuple[int, int] | None, repeat: str,
            width: float, skips: list[tuple[int, int]] = ()) -> list[float]:
    """Stack boxes top to bottom at x; frame the block range; draw each residual skip (from the input of
    a sub-layer to its ⊕) on the left; return each box's centre y."""
    ys = []
    for i, (key, label) in enumerate(boxes):
        y = -i
        ys.append(y)
        half = width / 2 if key != "add" else width / 5
        fig.add_shape(type="rect", x0=x - half, x1=x + half, y0=y - (0.38 if key != "add" else 0.22),
                      y1=y + (0.38 if key != "add" else 0.22), fillcolor=BOX.get(key, "#ffffff"),
                      line=dict(color="#636363", width=1), layer="below")
        fig.add_annotation(x=x, y=y, text=label, showarrow=False, font=dict(size=10))
        if i:
            top = y + (0.38 if key != "add" else 0.22)
            fig.add_annotation(x=x, y=top, ax=x, ay=-(i - 1) - 0.38, xref="x", yref="y", axref="x", ayref="y",
                               showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1, text="")
    side = x - width / 2 - 0.1
    for start, add in skips:
        y0, y1 = ys[start] + 0.5, ys[add]
        fig.add_shape(type="path", path=f"M {x} {y0} L {side} {y0} L {side} {y1}",
                      line=dict(color="#252525", width=1.2))
        fig.add_annotation(x=x - width / 5, y=y1, ax=side, ay=y1, xref="x", yref="y", axref="x", ayref="y",
                           showarrow=True, arrowhead=2, arrowwidth=1.2, text="")
    if block is not None:
        top, bottom = -block[0] + 0.55, -block[1] - 0.5
        fig.add_shape(type="rect", x0=x - width / 2 - 0.18, x1=x + width / 2 + 0.06, y0=bottom, y1=top,
                      line=dict(color="#252525", width=2, dash="dot"))
        fig.add_annotation(x=x + width / 2 + 0.04, y=top, text=repeat, showarrow=False, xanchor="right",
                           yanchor="bottom", font=dict(size=11, color="#252525"))
    return ys


def _stack_boxes(stack: Mapping[str, Any], positional: str, offset: int, lang: str = "en"
                 ) -> tuple[list[tuple[str, str]], tuple[int, int], list[tuple[int, int]]]:
    """The stack's boxes in the order the block computes them, with ⊕ boxes where the residual is added:
    pre-LN norm → f → ⊕; post-LN f → ⊕ → norm. Skips index boxes from `offset` (boxes above the stack)."""
    boxes, skips = [], []
    block = [p for p in stack["parts"] if p["repeat"] > 1]
    for part in stack["parts"]:
        if part["repeat"] == 1:
            boxes.append((part["key"], _label(part, positional, lang=lang)))
    first = len(boxes)
    for norm, sub in zip(block[0::2], block[1::2]):  # (attn_norm, attn), [(cross_norm, cross)], (mlp_norm, mlp)
        start = offset + len(boxes)
        if stack["pre"]:
            boxes += [(norm["key"], _label(norm, positional, lang=lang)), (sub["key"], _label(sub, positional,
                                                                                              lang=lang)),
                      ("add", _T(lang)["add"])]
            skips.append((start, offset + len(boxes) - 1))
        else:
            boxes += [(sub["key"], _label(sub, positional, lang=lang)), ("add", _T(lang)["add"])]
            skips.append((start, offset + len(boxes) - 1))
            boxes.append((norm["key"], _label(norm, positional, lang=lang)))
    last = len(boxes) - 1
    if stack["final_norm"] is not None:
        boxes.append(("final_norm", _label(stack["final_norm"], positional, lang=lang)))
    return boxes, (first, last), skips


def anatomy_figure(anatomy: Mapping[str, Any], title: str | None = None, lang: str = "en") -> go.Figure:
    """Boxes top to bottom: ids → embedding → [positions] → N × (norm, attention, [cross], norm, MLP) →
    final norm → head → logits; a seq2seq model gets an encoder column beside the decoder column."""
    fig = go.Figure()
    emb = ("embedding", _label(anatomy["embedding"], anatomy["positional"], lang=lang))
    tail = [("head", _label(anatomy["head"], anatomy["positional"], lang=lang))]
    tail += [(p["key"], _label(p, anatomy["positional"], lang=lang)) for p in anatomy["extra"]]
    tail.append(("tokens", _T(lang)["logits"].format(V=anatomy["vocab_size"])))
    stacks = {s["name"]: s for s in anatomy["stacks"]}
    rows = 0
    if anatomy["kind"] == "decoder":
        s = stacks["decoder"]
        boxes, (b0, b1), skips = _stack_boxes(s, anatomy["positional"], 2, lang=lang)
        column = [("tokens", _T(lang)["tokens_in"]), emb] + boxes + tail
        repeat = _T(lang)["repeat"].format(n=s["layers"], pre=_T(lang)["pre"] if s["pre"] else _T(lang)["post"])
        _column(fig, 0.0, column, (b0 + 2, b1 + 2), repeat, width=1.6, skips=skips)
        rows, xs = len(column), (-1.05, 0.9)
    else:
        enc, dec = stacks["encoder"], stacks["decoder"]
        e_boxes, (e0, e1), e_skips = _stack_boxes(enc, anatomy["positional"], 2, lang=lang)
        d_boxes, (d0, d1), d_skips = _stack_boxes(dec, anatomy["positional"], 2, lang=lang)
        e_col = [("tokens", _T(lang)["source_in"]), emb] + e_boxes
        shared = ("embedding", _T(lang)["names"]["embedding"] + _T(lang)["shared"])
        d_col = [("tokens", _T(lang)["target_in"]), shared] + d_boxes + tail

        def repeat(stack: Mapping[str, Any]) -> str:
            return _T(lang)["repeat"].format(n=stack["layers"],
                                             pre=_T(lang)["pre"] if stack["pre"] else _T(lang)["post"])

        e_ys = _column(fig, 0.0, e_col, (e0 + 2, e1 + 2), repeat(enc), width=1.5, skips=e_skips)
        d_ys = _column(fig, 2.0, d_col, (d0 + 2, d1 + 2), repeat(dec), width=1.5, skips=d_skips)
        cross = next(i for i, (k, _) in enumerate(d_col) if k == "cross")
        fig.add_annotation(x=1.25, y=d_ys[cross], ax=0.75, ay=e_ys[-1], xref="x", yref="y", axref="x", ayref="y",
                           showarrow=True, arrowhead=2, arrowwidth=1.5, arrowcolor="#756bb1", text="")
        rows, xs = max(len(e_col), len(d_col)), (-1.0, 2.85)
    fig.update_xaxes(visible=False, range=list(xs))
    fig.update_yaxes(visible=False, range=[-rows + 0.4, 0.6])
    title = title or _T(lang)["title"].format(family=display_text(anatomy["family"]),
                                              params=f"{anatomy['parameters']:,}")
    return finish(fig, title, height=int(110 + 58 * rows), showlegend=False)


def residual_norm_figure(norms: Mapping[str, Any], step: int, title: str | None = None, lang: str = "en",
                         before: int = 0) -> go.Figure:
    """‖x‖ per layer: the run's spread over all steps (min–max band and median), the selected step thick."""
    n = np.asarray(norms["norms"])
    names = [layer_name(n, lang=lang) for n in norms["layer_names"]]
    fig = go.Figure()
    band = dict(color="rgba(49,130,189,0.25)", width=0)
    fig.add_trace(go.Scatter(x=names, y=n.max(axis=1), mode="lines", line=band, name=_T(lang)["all_max"],
                             hovertemplate=_T(lang)["hover_max"]))
    fig.add_trace(go.Scatter(x=names, y=n.min(axis=1), mode="lines", line=band, fill="tonexty",
                             fillcolor="rgba(49,130,189,0.2)", name=_T(lang)["all_min"], hovertemplate=_T(lang)["hover_min"]))
    fig.add_trace(go.Scatter(x=names, y=np.median(n, axis=1), mode="lines", line=dict(color="#3182bd", dash="dot"),
                             name=_T(lang)["all_median"], hovertemplate=_T(lang)["hover_median"]))
    if step in norms["steps"]:
        j = list(norms["steps"]).index(step)
        fig.add_trace(go.Scatter(x=names, y=n[:, j], mode="lines+markers", line=dict(color="#d62728", width=3),
                                 name=_T(lang)["step"].format(step=step_number(step,
                                                                               before)), hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_xaxes(title_text=_T(lang)["layer_axis"], tickangle=-45)
    fig.update_yaxes(title_text=_T(lang)["norm_axis"], type="log")
    # `step` indexes the run's tokens from 0; it is shown counted from 1, as the live screen counts steps
    return finish(fig, title or _T(lang)["residual_title"].format(step=step_number(step, before)), height=380,
                  showlegend=False)


def residual_norm_caption(anatomy: Mapping[str, Any], norms: Mapping[str, Any], step: int, lang: str = "en",
                          before: int = 0) -> str:
    dec = next(s for s in anatomy["stacks"] if s["name"] == "decoder")
    j = list(norms["steps"]).index(step)
    col = np.asarray(norms["norms"])[:, j]
    eq = "; ".join(dec["wiring"])
    wiring_text = (_T(lang)["pre_text"] if dec["pre"] else _T(lang)["post_text"]).format(eq=eq)
    growth = float(col[-1] / max(col[0], 1e-30))
    return _T(lang)["caption"].format(wiring_text=wiring_text,
                                      trend=_T(lang)["grows"] if growth > 1.5 else _T(lang)["stays"],
                                first=col[0], last=col[-1], step=step_number(step, before), growth=growth,
                                why=_T(lang)["why_pre"] if dec["pre"] else _T(lang)["why_post"])
