"""Each lesson of the registry (`playground.app.lessons`) as a View of the Lessons tab: the lesson computes
its numbers at the selected step, draws up to two figures and captions them; its controls follow the model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from playground.app import lessons, measurements
from playground.app.notes import note
from playground.app.tab import Action, JobRequest, Out, Refused, Row, Tab, Widget, read
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
        # the lesson's controls are its widgets, `lesson_<Inputs' field>`
        inputs = lessons.Inputs(**{n.removeprefix("lesson_"): v for n, v in read(TAB.view_widgets(), sel.values).items()})
        return lessons.compute(name, ctx.lm, ctx.run, sel.step, inputs, ctx.lang, ctx.measured.get("measure_sdpa"))

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


# --- the tab: the lesson picked, its controls, the measurements some lessons take on demand ----------------

LESSON_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int4")


def lesson_choices(lang: str) -> list[tuple[str, str]]:
    return [(t(f"lesson_{name}", lang), name) for name in lessons.LESSONS]


def what_if_choices(kind: str, lang: str) -> list[tuple[str, str]]:
    """The KV calculator's attention or number-format choices; the first keeps the preset's own."""
    options = ("MHA", "GQA", "MQA") if kind == "attention" else LESSON_DTYPES
    return [(t("lesson_as_preset", lang), "")] + [(o, o) for o in options]


def time_cache(req: JobRequest) -> Iterator[Any]:
    """The run on screen's request timed with and without the cache (warm-up, repeats, medians): one run per slice,
    its length and repeats within the measurement's budget. The KV lesson draws it (`results["time_cache"]`)."""
    run = req.run
    shape = measurements.time_cache_shape(req.lm, len(run.prompt_ids), len(run.path))
    if shape is None:
        raise Refused(note("time_cache_too_long", tokens=len(run.prompt_ids)))
    return measurements.time_cache_work(req.lm, run.prompt_ids, *shape)


def measure_sdpa(req: JobRequest) -> Iterator[Any]:
    """SDPA against the explicit softmax at the visitor's model's head sizes: one length per slice, at the lengths
    that fit the model and the memory budget. The SDPA lesson draws it (kept for that model)."""
    lengths = measurements.sdpa_lengths(req.lm)
    if not lengths:
        raise Refused(note("sdpa_too_big", heads=req.lm.config.n_heads))
    return measurements.sdpa_work(req.lm, lengths)


FIRST = next(iter(lessons.LESSONS))  # a session starts on the first lesson
TAB = Tab(tab="lessons", elem_id="lessons-tab", section="inside", order=10, view=VIEWS[FIRST], views=VIEWS,
          needs_run="generate_first", layout=(
    Widget("lesson", "radio", "lessons_pick", "lesson-pick", default=FIRST, choices=lesson_choices, picks=True),
    Row((Widget("lesson_kind", "radio", "attention_kind", "lesson-kind", default="self", visible=False,
                choices=lambda lang: [(t("kind_self", lang), "self")], relabel=False, view=True, reads="text"),
         Widget("lesson_layer", "slider", "layer", "lesson-layer", default=0, view=True, reads="whole"),
         Widget("lesson_head", "slider", "head", "lesson-head", default=0, view=True, reads="whole"))),
    Row((Widget("lesson_preset", "dropdown", "lesson_preset", "lesson-preset", choices=lambda lang: [], relabel=False,
                scale=3, min_width=360, view=True, reads="text"),
         Widget("lesson_attention", "radio", "lesson_attention", "lesson-attention", default="", min_width=180,
                choices=lambda lang: what_if_choices("attention", lang), view=True, reads="text"),
         Widget("lesson_dtype", "radio", "lesson_dtype", "lesson-dtype", default="", min_width=180,
                choices=lambda lang: what_if_choices("dtype", lang), view=True, reads="text"),
         Widget("lesson_batch", "slider", "lesson_batch", "lesson-batch", default=1, low=1, high=64, min_width=240,
                view=True, reads="count"),
         Widget("lesson_tokens", "slider", "lesson_tokens", "lesson-tokens", default=0, low=0, high=131072, step=256,
                min_width=240, view=True, reads="whole")), name="memory_row", visible=False),
    Row((Action("time_cache", "job", "lesson_time_cache", "time-cache-btn", run=time_cache, out="lesson_md",
                progress="time_cache_progress", primary=False, visible=False),
         Action("measure_sdpa", "job", "lesson_measure", "measure-sdpa-btn", run=measure_sdpa, out="lesson_md",
                progress="sdpa_progress", primary=False, visible=False, needs="model"))),
    Out("lesson_md", "markdown", "lesson-md", words="lesson_needs_run"),
    Out("lesson_plot1", "plot", "lesson-plot-1", visible=True),
    Out("lesson_plot2", "plot", "lesson-plot-2", visible=True)))
