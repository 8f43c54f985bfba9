"""The shared batch a run was part of: who stepped beside it, step by step, and what a step costs by its rows
(from `generation.batch_history`: `StepHistory.timeline`, `step_times` and a request's seats)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from playground.viz._common import finish
from playground.viz._language import texts
from playground.viz.cache import format_bytes

_T = texts("shared_batch")  # this module's words, from playground/locales/

# A cell's colour: (kind, yours). Others' rows pale, yours strong; prompt chunks orange, decoding blue.
KINDS = ("prefill", "decode", "own")
COLOURS = {("prefill", False): "#fdd0a2", ("decode", False): "#c6dbef", ("own", False): "#d9d9d9",
           ("prefill", True): "#e6550d", ("decode", True): "#2171b5", ("own", True): "#636363"}
EMPTY = "#ffffff"


def batch_timeline_figure(timeline: Mapping[str, Any], selected: int | None = None, title: str | None = None,
                          lang: str = "en") -> go.Figure:
    """Steps × rows of the batch: each cell a request's row in that step's pass (a prompt chunk, a decoding token
    or a pass alone), yours strong and the others' pale; ▶ where a request joined, ■ where it left; the
    selected step outlined."""
    steps: Sequence[int] = timeline["steps"]
    cells: Sequence[Sequence[tuple]] = timeline["cells"]
    height = max([len(c) for c in cells] or [1])
    codes = {key: i for i, key in enumerate([None, *COLOURS])}
    z = np.zeros((height, len(steps)), dtype=int)
    hover = [["" for _ in steps] for _ in range(height)]
    joins: tuple[list[int], list[int]] = ([], [])
    leaves: tuple[list[int], list[int]] = ([], [])
    for j, (step, column) in enumerate(zip(steps, cells)):
        for i, (kind, mine, joined, left, tokens) in enumerate(column):
            z[i, j] = codes[(kind, bool(mine))]
            who = _T(lang)["you"] if mine else _T(lang)["other"]
            hover[i][j] = _T(lang)["hover"].format(step=step, row=i + 1, rows=len(column), who=who,
                                             what=_T(lang)[f"what_{kind}"].format(tokens=tokens))
            if joined:
                joins[0].append(step)
                joins[1].append(i + 1)
            if left:
                leaves[0].append(step)
                leaves[1].append(i + 1)
    n = len(codes)
    colours = [EMPTY, *COLOURS.values()]
    scale = [[v, colours[k]] for k in range(n) for v in (k / n, (k + 1) / n)]
    fig = go.Figure(go.Heatmap(z=z, x=list(steps), y=list(range(1, height + 1)), zmin=0, zmax=n, colorscale=scale,
                               showscale=False, xgap=1, ygap=1, customdata=hover,
                               hovertemplate="%{customdata}<extra></extra>"))
    for (kind, mine), colour in COLOURS.items():  # the legend: one square per colour that appears
        if (z == codes[(kind, mine)]).any():
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", showlegend=True,
                                     marker=dict(symbol="square", size=12, color=colour),
                                     name=_T(lang)[f"legend_{kind}"] + (" · " + _T(lang)["you"] if mine else "")))
    for (xs, ys), symbol, name in ((joins, "triangle-right", _T(lang)["joined"]), (leaves, "square-open",
                                                                                   _T(lang)["left"])):
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=name, hoverinfo="skip",
                                     marker=dict(symbol=symbol, size=7, color="#252525")))
    if selected is not None and selected in steps:
        fig.add_vrect(x0=selected - 0.5, x1=selected + 0.5, line=dict(color="#d62728", width=2), fillcolor="rgba(0,0,0,0)")
    # the x axis is the server's step count (the title says so): no axis title, so a phone's wrapped legend fits
    fig.update_yaxes(title_text=_T(lang)["row_axis"], autorange="reversed", dtick=1 if height <= 16 else None)
    return finish(fig, title or _T(lang)["timeline_title"], height=max(300, min(560, 160 + 22 * height)),
                  legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))


def step_time_figure(times: Sequence[Sequence[float]], mine: Sequence[Sequence[float]] = (),
                     selected: Sequence[float] | None = None, title: str | None = None, lang: str = "en") -> go.Figure:
    """Median wall ms of a step against the token rows it fed (`times`: [rows, ms, steps]), measured on this
    server; `mine`: [rows, ms] of each step the visitor's run took part in; `selected`: that step's [rows, ms]."""
    fig = go.Figure()
    if times:
        rows, ms, count = (list(c) for c in zip(*times))
        fig.add_trace(go.Scatter(x=rows, y=ms, mode="markers", name=_T(lang)["median"], marker_color="#636363",
                                 marker=dict(size=[min(16, 5 + 2 * np.log2(1 + c)) for c in count]),
                                 customdata=count, hovertemplate=_T(lang)["hover_median"]))
    if mine:
        fig.add_trace(go.Scatter(x=[m[0] for m in mine], y=[m[1] for m in mine], mode="markers",
                                 name=_T(lang)["your_steps"],
                                 marker=dict(size=6, color="#2171b5",
                                             opacity=0.6), hovertemplate=_T(lang)["hover_yours"]))
    if selected is not None:
        fig.add_trace(go.Scatter(x=[selected[0]], y=[selected[1]], mode="markers", name=_T(lang)["this_step"],
                                 marker=dict(size=13, color="rgba(0,0,0,0)", line=dict(color="#d62728", width=2)),
                                 hovertemplate=_T(lang)["hover_yours"]))
    fig.update_xaxes(title_text=_T(lang)["rows_axis"],
                     type="log" if times and max(r[0] for r in times) > 64 else "linear")
    fig.update_yaxes(title_text=_T(lang)["ms_axis"], rangemode="tozero")
    return finish(fig, title or _T(lang)["times_title"], height=360, legend=dict(orientation="h", yanchor="top",
                                                                                 y=-0.25, x=0))


def shared_batch_caption(d: Mapping[str, Any], lang: str = "en") -> str:
    """The lesson's words for `d` (the lesson's numbers: see `playground.app.batch_lesson`)."""
    intro = _T(lang)["intro"].format(chunk=d.get("chunk_size", 32))
    if d.get("state") != "ok":
        return intro + "\n\n" + _T(lang)[d.get("state", "no_run")].format(capacity=d.get("capacity", 512))
    what = _T(lang)[f"what_{d['kind']}"].format(tokens=d["chunk"])
    made = _T(lang)["made"].format(weights=format_bytes(d["weight_bytes"]), produced=d["produced"],
                             per_token=format_bytes(d["weight_bytes"] / d["produced"])) if d["produced"] else \
        _T(lang)["made_none"].format(weights=format_bytes(d["weight_bytes"]))
    text = [intro,
            _T(lang)["at_step"].format(step=d["step"], row=d["row"], rows=d["rows"], what=what, ms=d["ms"],
                                 tokens=d["tokens"], run_step=d["run_step"], run_steps=d["run_steps"]) + " " + made,
            _T(lang)["over_run"].format(steps=d["steps_in"], most=d["most_rows"], avg=format_bytes(d["avg_bytes"]),
                                  alone=format_bytes(d["weight_bytes"]))]
    if d["times"]:
        parts = [_T(lang)["time_part"].format(rows=r, ms=ms) for r, ms, _ in d["times"][:10]]
        text.append(_T(lang)["measured"].format(kept=d["kept"], times=" · ".join(parts)))
    prompt, reused, requests = d.get("prefix") or (0, 0, 0)
    if prompt:  # the prefix cache of this model's batch: its recent prompts' tokens restored, not computed
        mine_prompt, mine_reused, _ = d.get("prefix_mine") or (0, 0, 0)
        text.append(_T(lang)["prefix"].format(requests=requests, reused=reused, prompt=prompt,
                                              rate=100.0 * reused / prompt, mine=mine_reused, mine_prompt=mine_prompt))
    return "\n\n".join(text)
