"""Candidates & beams: the selected step's candidates through the sampler, and the beams up to it."""

from __future__ import annotations

from typing import Any

from playground import viz
from playground.app import describe, tokens_view
from playground.app.tab import Out, Tab, Words
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run = ctx.run
    step = run.step(sel.step)
    token = run.path[step]
    beams = describe.beam_steps(run.events[: step + 1]) if run.beam else None
    items = describe.funnel_items(token)
    for item in items:  # byte tokens are marked as UTF-8 bytes, not characters
        item["bytes"] = tokens_view.is_byte_token(ctx.lm, int(item["id"]))
    return {"step": step, "number": run.step_number(step), "token": token, "items": items, "beams": beams,
            "final": run.final.text if run.final is not None else None, "beam": bool(run.beam),
            "chars": tokens_view.byte_chars(ctx.lm, [s.token_id for s in run.path], step)}


def draw(data: dict[str, Any], lang: str) -> Drawn:
    title = t("funnel_title_beam" if data["beam"] else "funnel_title", lang, step=data["number"])  # no sampling in beams
    out: Drawn = {"funnel": Slot(viz.candidate_funnel(data["items"], title=title, lang=lang)),
                  "beam_tree": HIDDEN, "beam_table": HIDDEN}
    if data["beams"] is not None:
        out["beam_tree"] = shown(viz.beam_tree(data["beams"], final=data["final"], lang=lang))
        out["beam_table"] = shown(viz.beam_table(data["beams"], lang=lang))
    return out


def caption(data: dict[str, Any], lang: str) -> str:
    words = tokens_view.token_bytes_words(data["chars"], lang)
    return describe.step_caption(data["token"], lang, data["number"]) + (" " + words if words else "")


def idle(lang: str, words: str) -> Drawn:
    return {"funnel": Slot(viz.candidate_funnel([], lang=lang)), "beam_tree": HIDDEN, "beam_table": HIDDEN}


VIEW = View("inspector", "inspector", frozenset({"run", "step"}), ("caption", "funnel", "beam_tree", "beam_table"),
            compute, draw, caption, idle)

TAB = Tab(tab="inspector", elem_id="inspector-tab", section="watch", order=10, view=VIEW, layout=(
    Words("inspector_intro", ("inspector_intro",), "inspector-intro"),
    Out("caption", "markdown", "step-caption", words="nothing_yet"),
    Out("funnel", "plot", "funnel-plot", visible=True),
    Out("beam_tree", "plot", "beam-tree"),
    Out("beam_table", "plot", "beam-table")))
