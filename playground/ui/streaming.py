"""Generation in the app: the stream behind the live screen, Stop, branches, and the script API.

The engine runs inside Gradio's worker thread; this generator collects its events and yields a
frame (the live screen's value, see `frames`) at most every `frames.FRAME_SECONDS`, plus one for the first
token and one at the end. Nothing but that small value travels per frame, so the page keeps up
with the engine (with many visitors at once, each one's frames are spaced further apart:
`frames.frame_seconds`). A session runs one generation at a time: a new one stops the previous; Stop
also refuses runs still waiting in the queue (each press of Generate carries a ticket).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.app import describe, frames, heap, lab, serving, zerogpu
from playground.app.engine_stream import run_events
from playground.app.limits import CAPS
from playground.app.numbers import numbers_note
from playground.app.run import Run
from playground.app.session import Session, Sessions
from playground.app.settings import (
    FIELDS,
    UISettings,
    format_branches,
    from_query,
    from_widgets,
    parse_branches,
)
from playground.app.start import MAX_PACE_SECONDS, link_defaults, start_run
from playground.app.words import note
from playground.errors import PlaygroundError
from playground.hosting import shared_link
from playground.ui.gradio_internals import ScriptSessions, event_data
from playground.ui.models import Models, one_line, session_key

log = logging.getLogger("playground.ui")

# A handler's frame that changes nothing: a handler that returns without a frame would set every output to None
# (Gradio's answer for a generator that yields nothing), wiping the notes and the live screen.
UNCHANGED = (gr.skip(), gr.skip(), gr.skip())
SCRIPT_OWNER = "script-api"  # generate_text callers own no uploads: they reach the shipped checkpoints only


class Streaming:
    """Generation handlers for the sessions of one app."""

    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions
        self.scripts = ScriptSessions(is_page=sessions.has)

    # --- Generate and branches -------------------------------------------------------------------
    # Outputs of all three: live screen, notes, branches (hidden; what the current run's link replays).

    def generate(self, request: gr.Request, ticket: float, *args: Any) -> Iterator[tuple]:
        """Stream a run of the widgets' settings: a new run starts clean (no branches replayed).

        `request` comes first because Gradio injects it by position (it identifies the tab)."""
        session = self.sessions.get(session_key(request))
        session.take_link_run()  # the visitor's own press: a link's run (if still pending) is not replayed
        session.link_notes = []  # and the link's notes are done
        settings = dataclasses.replace(from_widgets(dict(zip(FIELDS, args[: len(FIELDS)]))), edits="")
        if float(ticket or 0) and float(ticket) <= session.stopped_before:
            yield UNCHANGED  # Stop was pressed while this run waited in the queue
            return
        yield from self._run_and_branches(session, settings, [])

    def generate_link(self, request: gr.Request, ticket: float, *args: Any) -> Iterator[tuple]:
        """The page was opened from a link that names a prompt: its run, then the link's branches."""
        session = self.sessions.get(session_key(request))
        if not session.take_link_run():
            yield UNCHANGED  # nothing to run: what the page shows (the link's notes) stays
            return
        settings = from_widgets(dict(zip(FIELDS, args[: len(FIELDS)])))
        try:
            branches = parse_branches(settings.branches)
        except ValueError:  # the page load already said why it was ignored
            branches = []
        yield from self._run_and_branches(session, settings, branches)

    def _run_and_branches(self, session: Session, settings: UISettings, branches: list[tuple[int, list[int]]]):
        session.lang = settings.lang
        run = None
        # A link with the lab's edits replays the plain run first, then the edited one beside it.
        for number, each in enumerate(lab.link_runs(settings)):
            if number and (run is None or run.finish_reason in ("stopped", "error")):
                return
            for out in self._stream(session, each, parent=None):
                run = out[-1]
                yield out[:-1]
        for step, ids in branches:
            if run is None or run.finish_reason in ("stopped", "error") or step >= len(run.path):
                break
            for out in self._stream(session, run.settings, parent=(run, step, ids)):
                run = out[-1]
                yield out[:-1]

    def branch(self, evt: gr.EventData, request: gr.Request | None = None) -> Iterator[tuple]:
        """Continue a finished run from one of its steps with another token (picked or typed)."""
        data = event_data(evt)
        session = self.sessions.get(session_key(request))
        session.link_notes = []  # the visitor's own action: the link's notes are done
        run = next((r for r in session.runs if r.token == data.get("run")), None)
        step = data.get("step")
        if run is None or run.running or not isinstance(step, int) or not 0 <= step < len(run.path):
            yield UNCHANGED
            return
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        if isinstance(data.get("token_id"), int):
            ids = [int(data["token_id"])]
        else:
            text = str(data.get("text", ""))[: CAPS.prompt_chars]
            try:
                ids = lm.tokenize(text)[:32] if text else []
            except PlaygroundError:
                ids = []
        if not ids:
            yield UNCHANGED
            return
        for out in self._stream(session, run.settings, parent=(run, step, ids)):
            yield out[:-1]

    def _stream(self, session: Session, settings: UISettings, parent: tuple[Run, int, list[int]] | None):
        """Yield (live, notes, branches, run) frames for one run (a branch when `parent` is given)."""
        lang = settings.lang
        try:
            run, lm, p = self._start(session, settings, parent)
        except Exception as exc:  # noqa: BLE001 - one message in the live screen, no badges
            yield self._error_frame(session, settings, exc)
            return
        stop = threading.Event()
        if session.stop is not None:
            session.stop.set()  # one generation per session: a new run ends the previous one
        session.stop = stop
        session.add_run(run)
        meta = self.models.meta(lm, settings.model)
        notes_md = describe.notes_markdown(session.link_notes + run.notes, lang)
        branches = format_branches(session.lineage(run))
        pace = min(settings.pace_ms / 1000.0, MAX_PACE_SECONDS / max(1, run.cfg.max_new_tokens))
        last_frame = 0.0
        error = None
        stream = run_events(p, stop, owner=session, report_waiting=True)  # batched with every other visitor's run
        try:
            # The first frame at once: the new run, started (the old run's "Done" stayed up until the first token).
            yield self._value(session, run, meta), notes_md, branches, run
            for event in stream:
                if isinstance(event, serving.Waiting):  # no place in the batch yet: say where in line
                    yield frames.waiting_value(self._value(session, run, meta), event), notes_md, branches, run
                    continue
                if isinstance(event, zerogpu.Notice):  # ZeroGPU refused the GPU: the run goes on on the CPU
                    run.notes.append(event.text(lang))
                    notes_md = describe.notes_markdown(run.notes, lang)
                    continue
                noted = len(run.notes)
                run.add_event(event, lm)
                if len(run.notes) != noted:  # the run found numbers that cannot be right
                    notes_md = describe.notes_markdown(run.notes, lang)
                now = time.monotonic()
                if (len(run.events) == 1 or event.finished or pace
                        or now - last_frame >= frames.frame_seconds(serving.active_requests())):
                    last_frame = now
                    # the same notes and branches each frame: unchanged values cost Gradio nothing, where an
                    # update (gr.skip) rebuilds the component on the server for every frame
                    yield self._value(session, run, meta), notes_md, branches, run
                if pace and not event.finished and stop.wait(pace):
                    pass  # Stop during the pause: the engine ends before its next step
        except Exception as exc:  # noqa: BLE001
            error = one_line(exc, lang, "generate")
        finally:
            stream.close()
            if session.stop is stop:
                session.stop = None
            heap.release()
        run.finish(lm, error)
        self.sessions.enforce_memory()  # finished runs keep their recorded arrays within the budgets
        yield self._value(session, run, meta), notes_md, branches, run

    def _start(self, session: Session, settings: UISettings, parent):
        """The model (resolved here: never on the torch thread), then the run and its plan from the core."""
        lm = self.models.model_for(settings.model, settings.dtype, session.key)
        run, p = start_run(session, lm, settings, parent)
        return run, lm, p

    def _error_frame(self, session: Session, settings: UISettings, exc: Exception) -> tuple:
        lang = settings.lang
        message = one_line(exc, lang, "generate")
        value = {"run": None, "lang": lang, "path": [], "status": {"state": "error", "error": message}, "error": message}
        return value, describe.notes_markdown(session.link_notes + [message], lang), gr.skip(), None

    # --- what the live screen receives ------------------------------------------------------------

    def _value(self, session: Session, run: Run, meta: dict[str, Any]) -> dict[str, Any]:
        selected = session.selected_step if run is session.current else None
        return frames.live_value(run, session.view, meta, session.lang, session.branches(run), selected)

    def current_value(self, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        """The live screen's value for the session's current run (in `lang`), or an empty screen."""
        session = self.sessions.get(session_key(request))
        session.lang = lang
        run = session.current
        if run is None:
            return {"run": None, "lang": lang, "path": [], "status": {}}
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        return self._value(session, run, self.models.meta(lm, run.settings.model))

    # --- sharing ----------------------------------------------------------------------------------

    def link(self, request: gr.Request, *args: Any) -> str:
        """Copy link: the query string that reproduces what the tab shows (see `Session.link_query`); inside a
        Space, the Space's huggingface.co address before it."""
        session = self.sessions.get(session_key(request))
        return shared_link(session.link_query(from_widgets(dict(zip(FIELDS, args[: len(FIELDS)])))))

    # --- Stop ------------------------------------------------------------------------------------

    def stop(self, ticket: float, request: gr.Request | None = None) -> None:
        """End the running generation at its next step; runs queued before this press never start.
        A session no page opened has nothing to stop: nothing is kept for it, and Gradio's state for it
        goes like a script's."""
        key = session_key(request)
        if not self.sessions.has(key):
            self.scripts.end(key)
            return
        session = self.sessions.get(key)
        session.stopped_before = max(session.stopped_before, float(ticket or 0) or time.time() * 1000)
        session.stop_all()

    # --- what the live screen's script asks for ---------------------------------------------------

    def attention_row(self, args: list[Any]) -> dict[str, Any]:
        """[run token, step, kind, layer, head] -> {"row": [...]}: one step's attention for a view, from
        what the run recorded, or computed through the engine."""
        try:
            token, step, kind, layer, head = args
            step, layer = int(step), int(layer)
        except (TypeError, ValueError):
            return {"row": None}
        run = self.sessions.run_by_token(token)
        if run is None or not 0 <= step < len(run.path) or kind not in ("self", "cross"):
            return {"row": None}
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        c = lm.config
        if not 0 <= layer < c.n_layers or head not in frames.head_choices(c.n_heads, c.n_kv_heads):
            return {"row": None}
        if kind == "cross" and run.kind != "seq2seq":
            return {"row": None}
        try:
            rows = serving.call_job(run.attention_row, lm, kind, layer, step, owner=run.owner)
        except PlaygroundError as exc:  # over the memory budget: say so where the row would be
            return {"row": None, "error": one_line(exc)}
        return {"row": frames.rounded(frames.reduce_heads(rows, head, c.n_kv_heads)), "step": step}

    def select_step(self, args: list[Any]) -> dict[str, Any]:
        """[run token, step, order]: the step the visitor is looking at (the deep views draw it); `order`, the
        page's count of its selections, keeps the newest when two requests arrive out of order."""
        try:
            token, step, *rest = args
            step = int(step)
            order = int(rest[0]) if rest else None
        except (TypeError, ValueError):
            return {}
        for session in self._sessions_of(token):
            session.select(token, step, order)
        return {}

    def set_view(self, args: list[Any]) -> dict[str, Any]:
        """[run token, kind, layer, head]: what the live attention panel shows (and records next run)."""
        try:
            token, kind, layer, head = args
            layer = int(layer)
        except (TypeError, ValueError):
            return {}
        for session in self._sessions_of(token):
            session.set_view(kind, layer, head)
        return {}

    def _sessions_of(self, token: str) -> list[Session]:
        run = self.sessions.run_by_token(token)
        if run is None:
            return []
        return [s for s in self.sessions.all() if run in s.runs]

    # --- for scripts (gradio_client) -------------------------------------------------------------

    def generate_text(self, model: str, prompt: str, settings_query: str = "", request: gr.Request = None) -> dict:
        """Generate without streaming: `model` and `prompt`, the other settings as a link's query string
        (e.g. "mode=sample&temperature=0.8&seed=1"). Returns text, token_ids, finish_reason, notes."""
        try:
            return self._generate_text(model, prompt, settings_query)
        finally:
            if request is not None:  # a script's session: Gradio's copy of the page for it goes soon after
                self.scripts.end(session_key(request))
            heap.release()

    def _generate_text(self, model: str, prompt: str, settings_query: str) -> dict:
        """The page's path for a press (`start_run`: a link's chat default, caps, clamps, a drawn seed), in
        a session of its own, its notes in the query's language."""
        from urllib.parse import parse_qsl

        params = dict(parse_qsl(str(settings_query).lstrip("?"), keep_blank_values=True))
        params.update(model=model, prompt=prompt)
        settings, notes = from_query(params, UISettings())
        lang = settings.lang
        try:
            lm = self.models.model_for(settings.model, settings.dtype, SCRIPT_OWNER)
            settings = link_defaults(settings, params, lm)
            run, p = start_run(Session(key=SCRIPT_OWNER, lang=lang), lm, settings, captures=False)
            # in the shared batch beside the page's runs, read to the end as generate_all reads the engine's stream
            events = []
            for event in run_events(p, threading.Event(), report_waiting=True):
                if isinstance(event, zerogpu.Notice):  # ZeroGPU refused the GPU: the caller reads why
                    notes.append(event.text(lang))
                elif not isinstance(event, serving.Waiting):
                    events.append(event)
        except PlaygroundError as exc:
            raise gr.Error(note(str(exc), lang), print_exception=False) from None
        last = events[-1] if events else None
        deterministic = not p.cfg.do_sample
        found = next((n for e in events if (n := numbers_note(e, lm.config.vocab_size, deterministic, lang))), None)
        notes += [found] if found else []
        return {"text": last.text if last else "", "token_ids": [int(i) for i in last.token_ids] if last else [],
                "finish_reason": last.finish_reason if last is not None and last.finished else "stopped",
                "notes": [note(n, lang) for n in notes + run.notes]}
