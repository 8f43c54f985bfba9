"""Each lesson of the registry (`playground.app.lessons`) as a View of the Lessons tab: the lesson computes
its numbers at the selected step, draws up to two figures and captions them; its controls follow the model."""

from __future__ import annotations

from dataclasses import replace

from playground.app import lessons
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t

SLOTS = ("lesson_md", "lesson_plot1", "lesson_plot2", "lesson_layer", "lesson_head", "lesson_kind", "lesson_preset",
         "memory_row", "time_cache", "measure_sdpa")


def _buttons(name: str) -> Drawn:
    """The rows and buttons only some lessons have."""
    return {"memory_row": Slot(visible=name == "memory"), "time_cache": Slot(visible=name == "kv"),
            "measure_sdpa": Slot(visible=name == "sdpa")}


def lesson_view(lesson: lessons.Lesson) -> View:
    name = lesson.name

    def compute(ctx: Context, sel: Selection) -> lessons.Computed:
        return lessons.compute(name, ctx.lm, ctx.run, sel.step, sel.inputs, ctx.lang, ctx.sdpa)

    def draw(computed: lessons.Computed, lang: str) -> Drawn:
        figures = computed.lesson.draw(computed.data, replace(computed.ctx, lang=lang))
        c = computed.controls
        out: Drawn = {"lesson_plot1": HIDDEN, "lesson_plot2": HIDDEN, **_buttons(name),
                      "lesson_layer": Slot(maximum=c.layer_max, visible=c.layer_head),
                      "lesson_head": Slot(maximum=c.head_max, visible=c.layer_head),
                      "lesson_kind": Slot(choices=[(t(f"kind_{k}", lang), k) for k in c.kinds], visible=c.kind_shown)}
        for slot, fig in zip(("lesson_plot1", "lesson_plot2"), figures):
            out[slot] = shown(fig)
        if c.presets is not None:
            out["lesson_preset"] = Slot(c.preset, choices=c.presets)
        return out

    def caption(computed: lessons.Computed, lang: str) -> str:
        return computed.lesson.caption(computed.data, replace(computed.ctx, lang=lang))

    def idle(lang: str, words: str) -> Drawn:
        return {"lesson_plot1": HIDDEN, "lesson_plot2": HIDDEN, **_buttons(name)}

    needs = {"finished"} if lesson.needs_run else {"model"}
    if lesson.follows_step:
        needs.add("step")
    if lesson.layer_head:
        needs |= {"layer", "head"}
    return View(f"lesson:{name}", "lessons", frozenset(needs | {"lesson", "controls"}), SLOTS, compute, draw, caption,
                idle, waits="lesson_needs_run", busy="lesson_after_run")


VIEWS: dict[str, View] = {name: lesson_view(lesson) for name, lesson in lessons.LESSONS.items()}


def view_of(name: str) -> View:
    """The lesson's view (an unknown name: the first lesson)."""
    return VIEWS.get(name, VIEWS[next(iter(VIEWS))])
