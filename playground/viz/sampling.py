"""Decoding figures: how each logits processor reshapes the top candidates, and beam search.

Candidate dicts (one per token, from the step inspector):
    {"token": str, "id": int, "stages": {"raw": p, "repetition_penalty": p, "temperature": p,
     "top_k": p, "top_p": p}, "removed_by": "top_k" | "top_p" | ... | None, "chosen": bool}
Stages missing from a dict (knob switched off) are simply not drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from playground.steps import step_number
from playground.viz._common import display_text, display_token, empty_figure, finish, legend_below
from playground.viz._language import texts

# Hugging Face order: repetition penalty, then temperature, top-k, top-p.
STAGE_ORDER = ("raw", "repetition_penalty", "temperature", "top_k", "top_p")
_T = texts("sampling")  # this module's words, from playground/locales/
STAGE_NAMES = _T("en")["stages"]  # the English names of the sampler's stages
# Sequential blues: later stages darker, so the eye reads the pipeline left to right.
STAGE_COLOURS = {
    "raw": "#c6dbef",
    "repetition_penalty": "#9ecae1",
    "temperature": "#6baed6",
    "top_k": "#3182bd",
    "top_p": "#08519c",
}
REMOVED_COLOUR = "#bdbdbd"
CHOSEN_FILL = "rgba(255, 196, 0, 0.18)"


def stage_name(stage: str, lang: str = "en") -> str:
    """Human name of a processor stage key ('top_k' -> 'top-k')."""
    return _T(lang)["stages"].get(stage, stage.replace("_", " "))


def _stages_present(candidates: Sequence[dict]) -> list[str]:
    seen: list[str] = []
    for c in candidates:
        for s in c.get("stages", {}):
            if s not in seen:
                seen.append(s)
    known = [s for s in STAGE_ORDER if s in seen]
    return known + [s for s in seen if s not in STAGE_ORDER]


def _candidate_label(c: dict) -> str:
    label = f"{display_token(str(c['token']))} #{c.get('id', '?')}"
    if c.get("chosen"):
        return f"<b>▶ {label}</b>"
    if c.get("removed_by"):
        return f'<span style="color:#9e9e9e">{label}</span>'
    return label


def candidate_funnel(candidates: Sequence[dict], title: str | None = None, lang: str = "en") -> go.Figure:
    """Grouped horizontal bars: each candidate token's probability after every processor stage.

    Removed tokens are grey and annotated 'removed by <stage>'; the chosen token is bold and
    sits on a highlighted band. Candidates are drawn in the given order, first at the top.
    """
    title = _T(lang)["funnel_title"] if title is None else title
    if not candidates:
        return empty_figure(_T(lang)["no_candidates"], title)
    for c in candidates:
        if "token" not in c or "stages" not in c:
            raise ValueError(f"each candidate needs 'token' and 'stages' keys, got keys {sorted(c)}")
    stages = _stages_present(candidates)
    n = len(candidates)
    y = np.arange(n)
    removed = [bool(c.get("removed_by")) for c in candidates]
    tokens = [display_token(str(c["token"])) for c in candidates]
    fig = go.Figure()
    for s in stages:
        probs = [c["stages"].get(s) for c in candidates]  # None: stage not run for this token
        colour = STAGE_COLOURS.get(s, "#756bb1")
        fig.add_trace(
            go.Bar(
                x=[np.nan if p is None else float(p) for p in probs],
                y=y,
                orientation="h",
                name=stage_name(s, lang=lang),
                marker=dict(color=[REMOVED_COLOUR if r else colour for r in removed]),
                customdata=tokens,
                hovertemplate=_T(lang)["funnel_hover"].format(stage=stage_name(s, lang=lang)),
            )
        )
    top = max(
        (float(p) for c in candidates for p in c["stages"].values() if p is not None and np.isfinite(p)),
        default=1.0,
    )
    # Headroom on the right for the notes, but a probability axis never runs past 1.
    end = min(1.0, top * 1.35)
    for i, c in enumerate(candidates):
        if c.get("chosen"):
            fig.add_shape(type="rect", xref="paper", x0=0, x1=1, y0=i - 0.5, y1=i + 0.5,
                          fillcolor=CHOSEN_FILL, line=dict(width=0), layer="below")
            note = _T(lang)["chosen"]
        elif c.get("removed_by"):
            note = _T(lang)["removed_by"].format(stage=stage_name(str(c["removed_by"]), lang=lang))
        else:
            continue
        row_max = max((float(p) for p in c["stages"].values() if p is not None), default=0.0)
        inside = row_max > 0.7 * end  # no room after the bar: the note goes inside its end
        colour = "#ffffff" if inside else ("#616161" if not c.get("chosen") else "#000000")
        fig.add_annotation(x=row_max, y=i, text=note, showarrow=False, xanchor="right" if inside else "left",
                           xshift=-6 if inside else 6, font=dict(color=colour, size=11))
    fig.update_yaxes(tickmode="array", tickvals=list(y), ticktext=[_candidate_label(c) for c in candidates],
                     autorange="reversed", title_text=_T(lang)["candidate_axis"])
    fig.update_xaxes(title_text=_T(lang)["probability_axis"], range=[0, end], rangemode="tozero")
    height = int(min(1240, max(300, 170 + n * (9 * len(stages) + 14))))  # + the legend under the axis
    return finish(fig, title, height=height, barmode="group", bargap=0.25,
                  legend={**legend_below(height), "traceorder": "normal"})


def _check_beams(beams: Sequence[Sequence[dict]]) -> None:
    for t, step in enumerate(beams):
        for b in step:
            if "tokens" not in b or "score" not in b:
                raise ValueError(f"beam at step {t} needs 'tokens' and 'score' keys, got keys {sorted(b)}")


def beam_table(beams: Sequence[Sequence[dict]], title: str | None = None, lang: str = "en",
               before: int = 0) -> go.Figure:
    """One table row per (step, beam): hypothesis text, score (sum log-prob / length penalty), status.

    beams[t] lists the beams after step t (shown as step t + 1), best first: {"tokens": str, "score": float,
    "finished": bool}. Finished hypotheses are shaded green.
    """
    title = _T(lang)["table_title"] if title is None else title
    if not beams or not any(beams):
        return empty_figure(_T(lang)["no_beams"], title)
    _check_beams(beams)
    rows = [(t, r, b) for t, step in enumerate(beams) for r, b in enumerate(step)]
    finished = [bool(b.get("finished")) for _, _, b in rows]
    fill = ["#e5f5e0" if f else ("#f7f7f7" if t % 2 else "white") for (t, _, _), f in zip(rows, finished)]
    fig = go.Figure(
        go.Table(
            columnwidth=[50, 50, 420, 80, 80],
            header=dict(values=[_T(lang)[k] for k in ("step", "rank", "hypothesis", "score", "status")],
                        fill_color="#deebf7",
                        align="left", font=dict(size=12)),
            cells=dict(
                values=[
                    [step_number(t, before) for t, _, _ in rows],
                    [r for _, r, _ in rows],
                    [display_text(str(b["tokens"])) for _, _, b in rows],
                    [f"{float(b['score']):.3f}" for _, _, b in rows],
                    [_T(lang)["finished"] if f else _T(lang)["open"] for f in finished],
                ],
                fill_color=[fill] * 5,
                align="left",
                height=24,
            ),
        )
    )
    # The table scrolls inside its panel, so cap the height.
    return finish(fig, title, height=int(min(620, 110 + 25 * len(rows))))


def _parents(beams: Sequence[Sequence[dict]]) -> list[list[int | None]]:
    # Explicit "parent" (index into the previous step) wins; else the longest matching prefix.
    out: list[list[int | None]] = []
    for t, step in enumerate(beams):
        row: list[int | None] = []
        for b in step:
            if t == 0:
                row.append(None)
            elif "parent" in b and b["parent"] is not None:
                row.append(int(b["parent"]))
            else:
                prev = [str(p["tokens"]) for p in beams[t - 1]]
                text = str(b["tokens"])
                matches = [(len(p), j) for j, p in enumerate(prev) if text.startswith(p)]
                row.append(max(matches)[1] if matches else None)
        out.append(row)
    return out


LABEL_ALL_STEPS = 12  # beyond this many steps only the winning path is labelled (hover still shows every node)


def beam_tree(beams: Sequence[Sequence[dict]], title: str | None = None, final: str | None = None, lang: str = "en",
              before: int = 0) -> go.Figure:
    """Beams as a tree: x = step, y = rank, an edge from each beam to the beam it extended.

    Each node shows the text it added; hover shows the whole hypothesis and its score. Beams may
    carry "parent" (index into the previous step's list); otherwise the parent is the previous
    beam whose text is the longest prefix of this one. Finished hypotheses are stars. `final`, the
    winning hypothesis' text, draws its path in orange; past LABEL_ALL_STEPS steps only that path
    keeps its labels, so a long search stays readable.
    """
    title = _T(lang)["tree_title"] if title is None else title
    if not beams or not any(beams):
        return empty_figure(_T(lang)["no_beams"], title)
    _check_beams(beams)
    parents = _parents(beams)
    crowded = len(beams) > LABEL_ALL_STEPS

    def on_path(text: str) -> bool:
        return final is not None and final.startswith(text)

    edges: dict[bool, tuple[list, list]] = {False: ([], []), True: ([], [])}
    xs, ys, added, hover, scores, symbols, sizes = [], [], [], [], [], [], []
    for t, step in enumerate(beams):
        for r, b in enumerate(step):
            text = str(b["tokens"])
            p = parents[t][r]
            winning = on_path(text)
            if p is not None and 0 <= p < len(beams[t - 1]):
                parent_text = str(beams[t - 1][p]["tokens"])
                ex, ey = edges[winning and on_path(parent_text)]
                ex += [step_number(t - 1, before), step_number(t, before), None]  # x: the step as people count it
                ey += [p, r, None]
                new = text[len(parent_text):] if text.startswith(parent_text) else text
            else:
                new = text
            xs.append(step_number(t, before))
            ys.append(r)
            label = display_token(new[-16:]) if new else "∅"  # short node label; hover has it all
            added.append(label if winning or not crowded else "")
            hover.append(_T(lang)["node_hover"].format(text=display_text(text), score=float(b["score"]))
                         + (_T(lang)["node_finished"] if b.get("finished") else ""))
            scores.append(float(b["score"]))
            symbols.append("star" if b.get("finished") else "circle")
            sizes.append(15 if winning else (13 if not crowded else 9))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=edges[False][0], y=edges[False][1], mode="lines", line=dict(color="#bdbdbd", width=1.5),
                             hoverinfo="skip", name=_T(lang)["extends"]))
    if edges[True][0]:
        fig.add_trace(go.Scatter(x=edges[True][0], y=edges[True][1], mode="lines", line=dict(color="#e6550d", width=3),
                                 hoverinfo="skip", name=_T(lang)["winning"]))
    fig.add_trace(
        go.Scatter(
            x=xs, y=ys, mode="markers+text", text=added, textposition="top center", name=_T(lang)["beams"],
            textfont=dict(size=11 if not crowded else 10), customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            marker=dict(size=sizes, color=scores, colorscale="Viridis", symbol=symbols,
                        colorbar=dict(title=dict(text=_T(lang)["score_bar"])), line=dict(width=1, color="white")),
        )
    )
    width = max(len(s) for s in beams)
    fig.update_xaxes(title_text=_T(lang)["step_axis"], dtick=1 if not crowded else max(1, len(beams) // 16))
    # Explicit padded range (reversed: best beam on top) so node labels above row 0 are not clipped.
    fig.update_yaxes(title_text=_T(lang)["rank_axis"], dtick=1, range=[width - 0.6, -0.6])
    fig.update_xaxes(range=[0.6, len(beams) + 0.4])
    return finish(fig, title, height=int(min(600, max(300, 160 + 60 * width))), showlegend=False)
