"""The Lessons tab's measurements taken on demand (the cache timing, SDPA against the explicit softmax), as jobs
with their progress. (The lessons themselves are views of `playground.app.views`, redrawn by `playground.ui.views`.)"""

from __future__ import annotations

from collections.abc import Iterator

import gradio as gr

from playground.app import lessons as app_lessons
from playground.app import measurements
from playground.app.session import Sessions
from playground.app.words import t
from playground.ui.jobs import Followed
from playground.ui.models import Models, session_key


class Lessons:
    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions

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
        caption = app_lessons.cache_timing_words(run.cache_timing, lang)
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
        caption = app_lessons.sdpa_words(data, lang)
        yield caption
