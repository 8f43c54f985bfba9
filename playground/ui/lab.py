"""The Causal lab tab's actions: fork the run with an edit (ablate, steer from a contrast pair, patch from another
prompt) and the head sweep. What the lab draws at the selected step (divergence, why this token, on the run on
screen or its original) is a View of `playground.app.views`, redrawn by `playground.ui.views`.

Thin adapter over `playground.app.lab` (the decisions and numbers) and `playground.viz.causal` (the
figures). A fork streams through the same path as every run (`Streaming.press`), so it appears in the
live screen beside the original with its lineage, and its link replays it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr
import numpy as np

from playground import viz
from playground.analysis.divergence import HeadSweep
from playground.app import describe, kvlab, lab, precision_lab, serving, speculative_lab
from playground.app.session import Sessions
from playground.app.words import t
from playground.interventions import Ablate, check
from playground.ui.jobs import PROGRESS_SECONDS
from playground.ui.lab_layout import draft_choices
from playground.ui.models import Models, one_line, session_key
from playground.ui.streaming import Streaming
from playground.viz import causal

# A fork streams in the live screen above the tabs: bring it into view so the visitor watches it grow.
WATCH_JS = """(...args) => {
  document.querySelector('#token-output')?.scrollIntoView({ behavior: 'smooth', block: 'start' });
  return args;
}"""

class Lab:
    """The lab's handlers for the sessions of one app."""

    def __init__(self, models: Models, sessions: Sessions, stream: Streaming) -> None:
        self.models = models
        self.sessions = sessions
        self.stream = stream

    # --- forks: streamed like every run ------------------------------------------------------------

    def fork_head(self, layer: float, head: float, request: gr.Request | None = None) -> Iterator[tuple]:
        yield from self._fork(request, Ablate(int(layer or 0), head=int(head or 0)))

    def fork_mlp(self, layer: float, request: gr.Request | None = None) -> Iterator[tuple]:
        yield from self._fork(request, Ablate(int(layer or 0), component="mlp"))

    def fork_steer(self, positive: str, negative: str, layer: float, scale: float,
                   request: gr.Request | None = None) -> Iterator[tuple]:
        """Measure the contrast vector (its norm against the residual's), then fork with it."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        run = session.current
        if run is None or run.running or not run.path:
            yield gr.skip(), gr.skip(), gr.skip(), t("lab_needs_run", lang)
            return
        try:
            lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
            vector = serving.call_job(lab.contrast, lm, str(positive or ""), str(negative or ""), int(layer or 0), lang,
                                      owner=session.key)
        except Exception as exc:  # noqa: BLE001 - one line under the button
            yield gr.skip(), gr.skip(), gr.skip(), describe.inert(one_line(exc, lang, "steering"))
            return
        scale = float(scale or 0.0)
        yield gr.skip(), gr.skip(), gr.skip(), lab.vector_summary(vector, scale, lang)
        for out in self._fork(request, vector.steer(scale)):
            yield (*out, gr.skip())

    def fork_patch(self, other: str, layer: float, position: float,
                   request: gr.Request | None = None) -> Iterator[tuple]:
        """Activation patching: the other prompt's residual after block `layer` at `position` (one pass), put
        into the run on screen; the patched run forks beside it."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        run = session.current
        if run is None or run.running or not run.path:
            yield gr.skip(), gr.skip(), gr.skip(), t("lab_needs_run", lang)
            return
        other = str(other or "")
        try:
            lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
            patch = serving.call_job(lab.patch_from_prompt, lm, run, other, int(layer or 0), int(position or 0), lang,
                                     owner=session.key)
            summary = lab.patch_summary(lm, run, patch, other, lang)
        except Exception as exc:  # noqa: BLE001 - one line under the button
            yield gr.skip(), gr.skip(), gr.skip(), describe.inert(one_line(exc, lang, "patching"))
            return
        yield gr.skip(), gr.skip(), gr.skip(), describe.inert(summary)
        for out in self._fork(request, patch):
            yield (*out, gr.skip())

    def _fork(self, request: gr.Request | None, edit) -> Iterator[tuple]:
        def settings(session, run, lang: str):
            lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
            check([edit], lm.config)
            return lab.fork_settings(session, run, edit, lang)

        yield from self._branch(request, "lab_needs_run", settings)

    def _branch(self, request: gr.Request | None, needs_run: str, make_settings) -> Iterator[tuple]:
        """The run on screen again under `make_settings(session, run, lang)`, streamed beside it as a branch that
        opens at the step on screen; without a finished run, `needs_run`'s words; a refusal, one line."""
        session = self.sessions.get(session_key(request))
        session.link_notes = []  # the visitor's own action: the link's notes are done
        lang = session.lang
        run = session.current
        if run is None or run.running or not run.path:
            yield gr.skip(), t(needs_run, lang), gr.skip()
            return
        try:
            settings = make_settings(session, run, lang)
        except Exception as exc:  # noqa: BLE001 - one line in the notes
            yield gr.skip(), describe.inert(one_line(exc, lang, "fork")), gr.skip()
            return
        session.next_step = session.selected_step  # the fork opens at the step on screen
        try:
            yield from self.stream.press(session, settings, parent=None)
        finally:
            session.next_step = None  # a fork that never started leaves no step for the next run

    def fork_kv(self, window: float, sink: float, heavy: float, dtype: str, rope: str = "",
                request: gr.Request | None = None) -> Iterator[tuple]:
        """The KV-cache lab: the run on screen again under the chosen cache policy, beside it in the live screen."""
        yield from self._branch(request, "kvlab_needs_run", lambda session, run, lang: kvlab.fork_settings(
            session, run, int(window or 0), int(sink or 0), int(heavy or 0), str(dtype or ""), lang, str(rope or "")))

    def fork_precision(self, precision: str, request: gr.Request | None = None) -> Iterator[tuple]:
        """The precision what-if: the run on screen again with its weights at `precision`, beside it."""
        yield from self._branch(request, "precision_needs_run", lambda session, run, lang: precision_lab.fork_settings(
            session, run, str(precision or ""), lang))

    def fork_draft(self, draft: str, draft_tokens: float, request: gr.Request | None = None) -> Iterator[tuple]:
        """Speculative decoding: the run on screen again with a drafter, beside it."""
        yield from self._branch(request, "spec_needs_run", lambda session, run, lang: speculative_lab.fork_settings(
            session, run, str(draft or ""), int(draft_tokens or 4), lang))

    def draft_list(self, value: str, request: gr.Request | None = None) -> dict:
        """The drafter choices for the session's model: ngram, early layers, and "model:<name>" for each loaded
        model with its vocabulary (the Speculative decoding tab opened)."""
        session = self.sessions.get(session_key(request))
        choices = draft_choices(session.lang)
        run = session.current  # the lab forks the run on screen: drafters for its model
        name, dtype = (run.settings.model, run.settings.dtype) if run is not None else (session.model, session.dtype)
        if name:
            choices += [(f"model:{n}", f"model:{n}") for n in self.models.drafters(session.key, name, dtype)]
        return gr.update(choices=choices, value=value)

    def follow(self, layer: float, head: float, request: gr.Request | None = None) -> tuple:
        """The All heads tab's layer and head, for the lab's sliders (their ranges set for the model)."""
        session = self.sessions.get(session_key(request))
        if not session.model:
            return gr.skip(), gr.skip()
        c = self.models.model_for(session.model, session.dtype, session.key).config
        return (gr.update(value=int(layer or 0), maximum=max(1, c.n_layers - 1)),
                gr.update(value=int(head or 0), maximum=max(1, c.n_heads - 1)))

    # --- the head sweep -------------------------------------------------------------------------------

    def sweep(self, layer: float, request: gr.Request | None = None, side: str = "shown") -> Iterator[tuple]:
        """Ablate every head of `layer` alone at the selected step: a job of one pass per slice between the
        other visitors' steps, with its progress here; Stop ends it with the heads done so far. `side`
        "original": on the original of the edited run on screen (the lab's switch)."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        run = self._read(session, side)
        if run is None or run.running or not run.path:
            yield t("lab_needs_run", lang), gr.skip()
            return
        step = run.step(session.selected_step)
        soft = session.begin_job()  # Stop: finish with the heads done so far
        hard = threading.Event()  # this handler gone: end at once
        result, shown = None, 0.0
        try:
            lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
            work = lab.sweep_work(lm, run, step, int(layer or 0), lang, soft)
            for item in serving.run_job(work, hard, session.key):
                if isinstance(item, HeadSweep):
                    result = item
                elif time.monotonic() - shown >= PROGRESS_SECONDS:
                    shown = time.monotonic()
                    yield t("lab_sweep_progress", lang, done=item.done, total=item.total), gr.skip()
        except Exception as exc:  # noqa: BLE001 - one line above the figure
            yield describe.inert(one_line(exc, lang, "sweep")), gr.update(visible=False)
            return
        finally:
            hard.set()
            session.end_job(soft)
        if result is None:
            yield t("rerun_stopped", lang), gr.skip()
            return
        token = run.path[step].token_text
        done = int((~np.isnan(result.logprob_drop)).sum())
        best = result.order[0]
        md = t("lab_sweep_done", lang, layer=result.layer, step=run.step_number(step), head=best, token=token,
               drop=float(result.logprob_drop[best]))
        if done < len(result.logprob_drop):
            md += " " + t("lab_sweep_stopped", lang, done=done, total=len(result.logprob_drop))
        with viz.language(lang):
            figure = causal.head_sweep_figure(result.to_dict(), token)
        yield md, gr.update(value=figure, visible=True)

    @staticmethod
    def _read(session, side: str):
        """The run the lab reads: the one on screen, or (the switch on "original") the run it was forked from."""
        run = session.current
        if side == "original" and run is not None and run.settings.edits:
            return lab.original_of(session, run) or run
        return run

    def sweep_of_run(self, layer: float, side: str = "shown", request: gr.Request | None = None) -> Iterator[tuple]:
        """`sweep`, each line saying which run and step it reads (the run the switch reads when pressed)."""
        session = self.sessions.get(session_key(request))
        run = self._read(session, side)
        label = "" if run is None or not run.path else lab.reads(run, run.step(session.selected_step), session.lang)
        for md, plot in self.sweep(layer, request, side):
            yield (label + " " + md if label and isinstance(md, str) else md), plot

    def stop_sweep(self, request: gr.Request | None = None) -> None:
        session = self.sessions.get(session_key(request))
        if session.job_stop is not None:
            session.job_stop.set()


def wire_lab(page: Any, lab_handlers: Lab, gen_kw: dict[str, Any], jobs_kw: dict[str, Any]) -> list[Any]:
    """Bind the lab's events (forks stream in `gen_kw`'s lane, the head sweep is a job in `jobs_kw`'s); returns
    the fork events (streamed runs: the caller chains what follows a run)."""
    p = page
    gen_outputs = [p.live, p.notes, page.component("branches")]
    kw = dict(gen_kw, js=WATCH_JS)
    forks = [
        p.lab_ablate_head.click(lab_handlers.fork_head, [p.lab_layer, p.lab_head], gen_outputs, **kw),
        p.lab_ablate_mlp.click(lab_handlers.fork_mlp, [p.lab_layer], gen_outputs, **kw),
        p.lab_steer.click(lab_handlers.fork_steer, [p.lab_positive, p.lab_negative, p.lab_steer_layer, p.lab_scale],
                          [*gen_outputs, p.lab_steer_md], **kw),
        p.lab_patch.click(lab_handlers.fork_patch, [p.lab_patch_prompt, p.lab_patch_layer, p.lab_patch_position],
                          [*gen_outputs, p.lab_patch_md], **kw),
    ]
    kv_policy = [page.component(n) for n in ("kv_window", "kv_sink", "kv_heavy", "kv_dtype", "rope_scaling")]
    forks.append(p.kvlab_fork.click(lab_handlers.fork_kv, kv_policy, gen_outputs, **kw))
    forks.append(p.spec_fork.click(lab_handlers.fork_draft, [page.component("draft"), page.component("draft_tokens")],
                                   gen_outputs, **kw))
    p.tab_speculative.select(lab_handlers.draft_list, page.component("draft"), page.component("draft"), queue=False)
    forks.append(p.precision_fork.click(lab_handlers.fork_precision, page.component("weight_precision"), gen_outputs,
                                        **kw))
    # The head picked in the All heads tab is the one the lab ablates.
    p.att_layer.input(lab_handlers.follow, [p.att_layer, p.att_head], [p.lab_layer, p.lab_head], queue=False)
    p.att_head.input(lab_handlers.follow, [p.att_layer, p.att_head], [p.lab_layer, p.lab_head], queue=False)
    p.lab_sweep.click(lab_handlers.sweep_of_run, [p.lab_layer, p.lab_run], [p.lab_sweep_md, p.lab_sweep_plot],
                      **jobs_kw)
    for stop in (p.lab_sweep_stop, p.stop):  # the page's Stop ends a sweep too
        stop.click(lab_handlers.stop_sweep, None, None, queue=False)
    return forks

