"""The one handler of every tab's buttons (the tabs: `playground.app.tabs`, built by `playground.ui.tabs`): an
experiment's fork streams the run on screen again with the experiment's settings, beside it in the live screen (its
origin is that run); a job measures the run on screen (or the visitor's model) with its progress under the button
and keeps its result on the run (or on the session, for that model), for the tab's view to draw; a stop ends the
tab's job.

Nothing here knows one tab from another: a new tab's module brings its layout, its actions and its view.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import gradio as gr

from playground.app import describe, history, serving
from playground.app import tabs as registry
from playground.app.experiments import EXPERIMENTS, Experiment
from playground.app.jobs import Progress
from playground.app.notes import render
from playground.app.play import fork_of
from playground.app.session import Session, Sessions
from playground.app.tab import Action, JobRequest, Tab, Widget
from playground.app.words import t
from playground.notes import Note
from playground.ui.layout import AFTER_STEP_TOLD_JS
from playground.ui.models import Models, one_line, session_key
from playground.ui.streaming import Streaming
from playground.ui.tabs import fork_parts

PROGRESS_SECONDS = 0.5  # a job's progress line is rewritten at most this often
KEEP = "__keep__"  # a fork's input: the tab's keep box (fork the run on screen as it is, with what it has)

# A fork streams in the live screen above the tabs: bring it into view so the visitor watches it grow.
WATCH_JS = """async (...args) => {
  document.querySelector('#token-output')?.scrollIntoView({ behavior: 'smooth', block: 'start' });
  await window.__pgStepTold;  // the fork opens at the step on screen: the server knows it first (AFTER_STEP_TOLD_JS)
  return args;
}"""


class Experiments:
    """The experiments' buttons for the sessions of one app."""

    def __init__(self, models: Models, sessions: Sessions, stream: Streaming) -> None:
        self.models = models
        self.sessions = sessions
        self.stream = stream

    def fork(self, experiment: Experiment, action: Action, values: Mapping[str, Any],
             request: gr.Request | None = None) -> Iterator[tuple]:
        """The run on screen's fork (by default from its plain run; with the tab's keep box ticked, as it is) with
        what `action` asks for, streamed beside it, opening at the step on screen: (live screen, notes, branches,
        the line under the button) frames. A press that cannot run says why in that line: no finished run on screen,
        or the experiment's refusal (a drafter left off)."""
        session = self.sessions.get(session_key(request))
        session.link_notes = []  # the visitor's own action: the link's notes are done
        lang = session.lang
        values = dict(values)
        keep = bool(values.pop(KEEP, False))
        run = session.current
        if run is None or run.running or not run.path:
            yield gr.skip(), gr.skip(), gr.skip(), t(experiment.needs_run, lang)
            return
        try:
            lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
            settings, origin = serving.call_job(fork_of, session, run, lm, experiment, action, values, keep,
                                                owner=session.key)  # some measure first (a steering vector)
        except Exception as exc:  # noqa: BLE001 - one line under the button
            yield gr.skip(), gr.skip(), gr.skip(), describe.inert(one_line(exc, lang, "fork"))
            return
        # what the fork measured on the way, at once (its view draws it again from the run); '' clears a refusal
        said = " ".join(render(v, lang) for v in origin.results.values() if isinstance(v, Note))
        if said:
            yield gr.skip(), gr.skip(), gr.skip(), said
        session.next_step = session.selected_step  # the fork opens at the step on screen
        line = None if said else ""  # the first frame clears a refusal said before
        try:
            for frame in self.stream.press(session, settings, origin=origin):
                yield (*frame, gr.skip() if line is None else line)
                line = None
        finally:
            session.next_step = None  # a fork that never started leaves no step for the next run

    def fork_lines(self, request: gr.Request | None = None) -> list[Any]:
        """Under every lab's fork button, before the press: what a fork of the run on screen keeps (the other labs'
        changes it already has, and the run the fork starts from), and the keep box, shown only then (unticked:
        stacking is asked for each time)."""
        session = self.sessions.get(session_key(request))
        out: list[Any] = []
        for experiment in forking():
            line = history.fork_line(session, experiment, False, session.lang)
            out += [line, gr.update(visible=bool(line), value=False)]
        return out

    def keep_line(self, experiment: Experiment, keep: bool, request: gr.Request | None = None) -> str:
        """The line again when the keep box is ticked or unticked."""
        session = self.sessions.get(session_key(request))
        return history.fork_line(session, experiment, bool(keep), session.lang)

    def job(self, tab: Tab, action: Action, values: Mapping[str, Any],
            request: gr.Request | None = None) -> Iterator[str]:
        """`action`'s job on the run on screen (`needs="model"`: on the visitor's model), one slice of model work at a
        time between the other visitors' steps: its progress lines, then its result kept on that run (or on the
        session, for that model; the view draws it at the redraw that follows); Stop ends it with what it has so
        far."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        run = session.current if action.needs == "run" else None
        if action.needs == "model" and not session.model:
            yield t("nothing_yet", lang)
            return
        if action.needs == "run" and (run is None or run.running or not run.path):
            yield t(tab.needs_run, lang)
            return
        soft = session.begin_job()  # Stop: the job ends with what it has so far
        hard = threading.Event()  # this handler gone: the job ends at once
        result, shown = None, 0.0
        try:
            owner = (run.settings.model, run.settings.dtype, run.owner) if run is not None else (
                session.model, session.dtype, session.key)
            work = action.run(JobRequest(run=run, runs=tuple(session.runs), lm=self.models.model_for(*owner),
                                         values=dict(values), step=session.selected_step, stop=soft))
            for item in serving.run_job(work, hard, session.key):
                if not isinstance(item, Progress):
                    result = item
                elif time.monotonic() - shown >= PROGRESS_SECONDS:
                    shown = time.monotonic()
                    yield _progress(action, item, lang)
        except Exception as exc:  # noqa: BLE001 - one line under the button
            yield describe.inert(one_line(exc, lang, action.name))
            return
        finally:
            hard.set()
            session.end_job(soft)
        if result is None:
            yield t("rerun_stopped", lang)
            return
        _keep(session, run, action, result, owner[0])
        yield ""

    def stop_job(self, request: gr.Request | None = None) -> None:
        session = self.sessions.get(session_key(request))
        if session.job_stop is not None:
            session.job_stop.set()

    def follow(self, widget: Widget, value: float, request: gr.Request | None = None) -> dict:
        """A control of another tab moved (the All heads tab's layer): the widget that follows it takes its value,
        its maximum from the session's model."""
        session = self.sessions.get(session_key(request))
        if not session.model:
            return gr.skip()
        config = self.models.model_for(session.model, session.dtype, session.key).config
        high = {"maximum": widget.high_of(config)} if widget.high_of is not None else {}
        return gr.update(value=int(value or 0), **high)


def _progress(action: Action, item: Progress, lang: str) -> str:
    if callable(action.progress):
        return action.progress(item, lang)
    return t(action.progress, lang, done=item.done, total=item.total) if action.progress else ""


def _keep(session: Session, run: Any, action: Action, result: Any, model: str) -> None:
    """A job's result where its view reads it: on the run it measured, or on the session for the model it measured
    (`Context.measured`; the model the job started on, even if the visitor switched since)."""
    if run is not None:
        run.results[action.name] = result
    else:
        session.measured[action.name] = (model, result)


def forking() -> list[Experiment]:
    """The experiments whose tab has a fork button (each has the lines of `tabs.fork_parts`)."""
    return [e for e in EXPERIMENTS if any(a.kind == "fork" for a in e.actions())]


def fork_line_outputs(page: Any) -> list[Any]:
    """What `Experiments.fork_lines` fills: each forking lab's line and keep box."""
    return [page.component(n) for e in forking() for n in fork_parts(e)[:2]]


def wire_experiments(page: Any, h: Experiments, gen_outputs: list[Any], gen_kw: dict[str, Any],
                     jobs_kw: dict[str, Any], streamed: Callable[[Callable], Callable]) -> tuple[list[Any], list[Any]]:
    """Bind every tab's buttons: forks stream in `gen_kw`'s lane into `gen_outputs` (each wrapped by
    `streamed`, which adds what follows the run on screen), jobs in `jobs_kw`'s. Returns (fork events, job events):
    the caller chains what follows a run and a measurement."""
    forks, jobs = [], []
    for experiment in registry.TABS:
        if experiment in forking():
            line, keep, said = (page.component(n) for n in fork_parts(experiment))
            keep.input(_keeping(h, experiment), keep, line, queue=False)
        for action in experiment.actions():
            button = page.component(action.name)
            names = {page.component(n): n for n in action.inputs}
            if action.kind == "fork":
                names[keep] = KEEP
                out = page.component(action.out) if action.out else said
                handler = streamed(_bound(h.fork, experiment, action, names))
                # `streamed` puts the badge and the history after the run's slots, then the handler's own output
                forks.append(button.click(handler, set(names), [*gen_outputs, out], **dict(gen_kw, js=WATCH_JS)))
            elif action.kind == "job":
                jobs.append(button.click(_bound(h.job, experiment, action, names), set(names) or None,
                                         page.component(action.out), js=AFTER_STEP_TOLD_JS, **jobs_kw))
            elif action.kind == "stop":
                button.click(h.stop_job, None, None, queue=False)  # (a tool's "press": its own handler binds it)
        for widget in experiment.widgets():
            if widget.follows is not None:
                source = page.component(widget.follows)
                source.input(_following(h, widget), source, page.component(widget.name), queue=False)
    page.stop.click(h.stop_job, None, None, queue=False)  # the page's Stop ends a job too
    return forks, jobs


def _bound(method: Callable, experiment: Experiment, action: Action, names: dict[Any, str]) -> Callable:
    """`method(experiment, action, values by widget name, request)` as a Gradio handler of a dict of inputs."""
    def handler(values: dict | None = None, request: gr.Request = None) -> Iterator[Any]:
        yield from method(experiment, action, {names[c]: v for c, v in (values or {}).items()}, request)
    handler.__name__ = f"{action.kind}_{action.name}"  # the event's name in Gradio's list (and the lanes' check)
    return handler


def _keeping(h: Experiments, experiment: Experiment) -> Callable:
    def keep(value: bool, request: gr.Request) -> str:
        return h.keep_line(experiment, value, request)
    return keep


def _following(h: Experiments, widget: Widget) -> Callable:
    def follow(value: float, request: gr.Request) -> dict:
        return h.follow(widget, value, request)
    return follow
