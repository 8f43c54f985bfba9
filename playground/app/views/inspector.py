"""Candidates & beams: the selected step's candidates through the sampler, and the beams up to it."""

from __future__ import annotations

from typing import Any

from playground import viz
from playground.app import describe
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run = ctx.run
    step = run.step(sel.step)
    token = run.path[step]
    beams = describe.beam_steps(run.events[: step + 1]) if run.beam else None
    return {"step": step, "number": run.step_number(step), "token": token, "items": describe.funnel_items(token), "beams": beams,
            "final": run.final.text if run.final is not None else None}


def draw(data: dict[str, Any], lang: str) -> Drawn:
    out: Drawn = {"funnel": Slot(viz.candidate_funnel(data["items"], title=t("funnel_title", lang,
                                                                             step=data["number"]), lang=lang)),
                  "beam_tree": HIDDEN, "beam_table": HIDDEN}
    if data["beams"] is not None:
        out["beam_tree"] = shown(viz.beam_tree(data["beams"], final=data["final"], lang=lang))
        out["beam_table"] = shown(viz.beam_table(data["beams"], lang=lang))
    return out


def caption(data: dict[str, Any], lang: str) -> str:
    return describe.step_caption(data["token"], lang, data["number"])


def idle(lang: str, words: str) -> Drawn:
    return {"funnel": Slot(viz.candidate_funnel([], lang=lang)), "beam_tree": HIDDEN, "beam_table": HIDDEN}


VIEW = View("inspector", "inspector", frozenset({"run", "step"}), ("caption", "funnel", "beam_tree", "beam_table"),
            compute, draw, caption, idle)
