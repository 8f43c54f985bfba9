"""The KV-cache tab's timed rerun: the current run again with and without the cache, as a job of bounded
slices between the other visitors' steps. (What the deep views draw is `playground.app.views`, redrawn by
`playground.ui.views`.)"""

from __future__ import annotations

from collections.abc import Iterator

import gradio as gr

from playground.app import cache_rerun
from playground.app.session import Sessions
from playground.app.views import cache
from playground.app.words import t
from playground.ui.jobs import Followed
from playground.ui.models import Models, session_key


class Panels:
    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions

    def rerun_without_cache(self, request: gr.Request | None = None) -> Iterator[tuple]:
        """The current run's request again with and without the cache, back to back, timed fresh (the
        live run's timings include pacing and painting): a job of bounded slices between the other
        visitors' steps, with its progress here and the page's Stop; long runs are timed in part."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        run = session.current
        if run is None or run.running:
            yield gr.skip(), t("generate_first", lang)
            return
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        knobs = run.cfg.replace(capture_attention=False, attention_layers=None, top_candidates=0)
        forced = run.stream_ids[: len(run.inherited) + len(run.forced)]
        work = cache_rerun.rerun_work(lm, run.prompt_ids, knobs, forced, len(run.path))
        job = Followed(session, work, lang, "rerun")
        def progress(p) -> str:
            if p.stage == "warmup":
                return t("rerun_warmup", lang)
            return t("rerun_progress", lang, mode=t(f"rerun_mode_{p.stage}", lang), done=p.done, total=p.total,
                     seconds=p.seconds)

        for line in job.lines(progress):
            yield gr.skip(), line
        if job.error or job.result is None:
            yield gr.skip(), job.error or t("rerun_stopped", lang)
            return
        run.results["rerun"] = job.result  # the cache tab draws it while this run is on screen
        slots = cache.rerun_slots(job.result, lang)
        yield gr.update(**slots["compare"].changes), slots["compare_md"].value
