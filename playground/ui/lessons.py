"""The Lessons tab's adapter: looks the lesson up in the app core's registry (`playground.app.lessons`),
unpacks the controls, calls the core on the torch thread and returns widget updates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground import viz
from playground.app import describe, lessons, measurements, serving
from playground.app.session import Session, Sessions
from playground.app.words import t
from playground.ui.jobs import Followed
from playground.ui.layout import LESSONS
from playground.ui.models import Models, one_line, session_key
from playground.viz import kv_lesson as v_kv
from playground.viz import sdpa as v_sdpa

OUTPUTS = ("lesson_md", "lesson_plot1", "lesson_plot2", "lesson_layer", "lesson_head", "lesson_kind", "lesson_preset",
           "memory_row", "time_cache", "measure_sdpa")


class Lessons:
    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions

    def pick(self, lesson: str, layer: float, head: float, kind: str, preset: str, attention: str, dtype: str,
             batch: float, tokens: float, request: gr.Request | None = None) -> tuple:
        """A lesson was picked above the deep views: open the Lessons tab on it."""
        session = self.sessions.get(session_key(request))
        session.lesson = lesson if lesson in LESSONS else "steps"
        session.deep_tab = "lessons"
        return (gr.update(selected="lessons"), *self.draw(session, layer, head, kind, preset, attention, dtype, batch,
                                                         tokens))

    def redraw(self, layer: float, head: float, kind: str, preset: str, attention: str, dtype: str, batch: float,
               tokens: float, request: gr.Request | None = None) -> tuple:
        session = self.sessions.get(session_key(request))
        if session.deep_tab != "lessons":
            return (gr.skip(),) * len(OUTPUTS)
        return self.draw(session, layer, head, kind, preset, attention, dtype, batch, tokens)

    def draw(self, session: Session, layer: float, head: float, kind: str, preset: str, attention: str, dtype: str,
             batch: float, tokens: float) -> tuple:
        """(caption, figure, figure, controls...) for the session's lesson and selected step."""
        lang, lesson, run = session.lang, session.lesson, session.current
        out: dict[str, Any] = dict.fromkeys(OUTPUTS, gr.skip())
        hidden = gr.update(visible=False)
        out["lesson_plot1"], out["lesson_plot2"] = hidden, hidden
        if not session.model:
            out["lesson_md"] = t("nothing_yet", lang)
            return tuple(out[k] for k in OUTPUTS)
        lm = self.models.model_for(session.model, session.dtype, session.key)
        why = lessons.waiting(lesson, run, lang)
        if why is not None:
            out["lesson_md"] = why
            return tuple(out[k] for k in OUTPUTS)
        inputs = lessons.Inputs(int(layer or 0), int(head or 0), kind, preset, attention, dtype, int(batch or 1),
                                int(tokens or 0))
        sdpa = session.sdpa if session.sdpa is not None and session.sdpa.get("model") == session.model else None
        try:
            shown = serving.call_job(lessons.show, lesson, lm, run, session.selected_step, inputs, lang, sdpa,
                                     owner=session.key)
        except Exception as exc:  # noqa: BLE001 - one line where the lesson would be
            out["lesson_md"] = describe.inert(one_line(exc, lang, f"lesson {lesson}"))
            return tuple(out[k] for k in OUTPUTS)
        out["lesson_md"] = shown.caption
        for key, fig in zip(("lesson_plot1", "lesson_plot2"), shown.figures):
            out[key] = gr.update(value=fig, visible=True)
        c = shown.controls
        out["lesson_layer"] = gr.update(maximum=c.layer_max, visible=c.layer_head)
        out["lesson_head"] = gr.update(maximum=c.head_max, visible=c.layer_head)
        out["lesson_kind"] = gr.update(choices=[(t(f"kind_{k}", lang), k) for k in c.kinds], visible=c.kind_shown)
        if c.presets is not None:
            out["lesson_preset"] = gr.update(choices=c.presets, value=c.preset)
        out["memory_row"] = gr.update(visible=lesson == "memory")
        out["time_cache"] = gr.update(visible=lesson == "kv")
        out["measure_sdpa"] = gr.update(visible=lesson == "sdpa")
        return tuple(out[k] for k in OUTPUTS)

    # --- measured on demand ------------------------------------------------------------------------

    def time_cache(self, request: gr.Request | None = None) -> Iterator[str]:
        """Time the current run's request with and without the cache (warm-up, repeats, medians): a job, one
        run per slice, its length and repeats within the measurement's budget."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        run = session.current
        if run is None or run.running or not run.path:
            yield t("generate_first", lang)
            return
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        shape = measurements.time_cache_shape(lm, len(run.prompt_ids), len(run.path))
        if shape is None:
            yield t("time_cache_too_long", lang, tokens=len(run.prompt_ids))
            return
        job = Followed(session, measurements.time_cache_work(lm, run.prompt_ids, *shape), lang, "kv")
        yield from job.lines(lambda p: t("time_cache_progress", lang, done=p.done, total=p.total))
        if job.error or job.result is None:
            yield job.error or t("rerun_stopped", lang)
            return
        timing = job.result
        run.cache_timing = timing
        with viz.language(lang):  # set and reset within one step of this generator (Gradio may switch contexts)
            caption = v_kv.cache_timing_caption(run.cache_timing)
        yield caption

    def measure_sdpa(self, request: gr.Request | None = None) -> Iterator[str]:
        """SDPA against the explicit softmax at this model's head sizes: a job, one length per slice, at the
        lengths that fit the model and the memory budget."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        if not session.model:
            yield t("nothing_yet", lang)
            return
        lm = self.models.model_for(session.model, session.dtype, session.key)
        lengths = measurements.sdpa_lengths(lm)
        if not lengths:
            yield t("sdpa_too_big", lang, heads=lm.config.n_heads)
            return
        job = Followed(session, measurements.sdpa_work(lm, lengths), lang, "sdpa")
        yield from job.lines(lambda p: t("sdpa_progress", lang, done=p.done, total=p.total))
        if job.error or job.result is None:
            yield job.error or t("rerun_stopped", lang)
            return
        data = job.result
        session.sdpa = {**data, "model": session.model}
        with viz.language(lang):
            caption = v_sdpa.sdpa_caption(data)
        yield caption
