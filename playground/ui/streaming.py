"""Generation in the app: the stream behind the live screen, Stop, branches, and the script API.

The engine runs inside Gradio's worker thread; this generator collects its events and yields a
frame (the live screen's value, see `frames`) at most every `frames.FRAME_SECONDS`, plus one for the first
token and one at the end. A frame carries what is new since the one before, never the run again, so the
page keeps up with the engine at any length (with many visitors at once, each one's frames are spaced further
apart: `frames.frame_seconds`). A session runs one generation at a time: a new one stops the previous; Stop
also refuses runs still waiting in the queue (each press of Generate carries a ticket).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

import gradio as gr

from playground.app import describe, frames, heap, history, serving
from playground.app.limits import CAPS
from playground.app.notes import error_line
from playground.app.play import Frame, Origin, play, play_link, play_script
from playground.app.run import Run
from playground.app.session import LiveView, Session, Sessions
from playground.app.settings import LANGS, RUN_FIELDS, UISettings, format_branches, widget_settings
from playground.errors import PlaygroundError
from playground.generation.events import held_bytes
from playground.hosting import shared_link
from playground.ui.gradio_internals import ScriptSessions, event_data, visitor_of
from playground.ui.models import Models, one_line, session_key

log = logging.getLogger("playground.ui")

# A handler's frame that changes nothing: a handler that returns without a frame would set every output to None
# (Gradio's answer for a generator that yields nothing), wiping the notes and the live screen.
UNCHANGED = (gr.skip(), gr.skip(), gr.skip())
SCRIPT_OWNER = "script-api"  # generate_text callers own no uploads: they reach the shipped checkpoints only
# Whole values `live_state` keeps (up to about 1 MB each for a 1,024-token run): the runs asked for at once.
WHOLE_VALUES_KEPT = 4


class Streaming:
    """Generation handlers for the sessions of one app."""

    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions
        self.scripts = ScriptSessions(is_page=sessions.has)
        # run token -> (version, whole value, its bytes) of the runs last asked for by `live_state`, the oldest
        # dropped first; the holdings line counts them (`live_values`)
        self._whole: OrderedDict[str, tuple[tuple, dict[str, Any], int]] = OrderedDict()
        self._whole_lock = threading.Lock()

    # --- Generate and branches -------------------------------------------------------------------
    # Outputs of all three: live screen, notes, branches (hidden; what the current run's link replays).

    def generate(self, request: gr.Request, ticket: float, *args: Any) -> Iterator[tuple]:
        """Stream a plain run of the left column's widgets (`WIDGETS`): no branch, no experiment, whatever a link
        or a lab's fork ran before.

        `request` comes first because Gradio injects it by position (it identifies the tab)."""
        session = self.sessions.get(session_key(request))
        session.take_link_run()  # the visitor's own press: a link's run (if still pending) is not replayed
        session.link_notes = []  # and the link's notes are done
        settings = widget_settings(args)
        if float(ticket or 0) and float(ticket) <= session.stopped_before:
            yield UNCHANGED  # Stop was pressed while this run waited in the queue
            return
        session.lang = settings.lang
        yield from self.press(session, settings)

    def generate_link(self, request: gr.Request, ticket: float, *args: Any) -> Iterator[tuple]:
        """The page was opened from a link that names a prompt: its run, then the link's branches."""
        session = self.sessions.get(session_key(request))
        if not session.take_link_run():
            yield UNCHANGED  # nothing to run: what the page shows (the link's notes) stays
            return
        settings = widget_settings(args)
        if session.link_settings is not None:  # what only a link sets: its branches and experiments
            settings = dataclasses.replace(settings, **{f: getattr(session.link_settings, f) for f in RUN_FIELDS})
        session.lang = settings.lang
        yield from self._frames(session, play_link(session, self.models.model_for, settings,
                                                   keep_within_budget=self.sessions.enforce_memory))

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
        yield from self.press(session, run.settings, parent=(run, step, ids))

    def press(self, session: Session, settings: UISettings, parent: tuple[Run, int, list[int]] | None = None,
              origin: Origin | None = None) -> Iterator[tuple]:
        """(live screen, notes, branches) frames of one run of `settings` in `session` (an experiment's fork when
        `origin` is given)."""
        yield from self._frames(session, play(session, self.models.model_for, settings, parent=parent, origin=origin,
                                              keep_within_budget=self.sessions.enforce_memory))

    def _frames(self, session: Session, press: Iterator[Frame]) -> Iterator[tuple]:
        """(live screen, notes, branches) for each frame of a press: the notes and branches as plain values every
        frame (an unchanged value costs Gradio nothing, where gr.skip rebuilds the component for every frame).

        The live screen gets a run's whole value once, when the run starts, then only what is new (see `frames`):
        `sent` holds the path entries the page has been sent, so each frame starts where the page's copy ends."""
        shown: tuple[list[str], str, str] | None = None
        meta: dict[str, Any] | None = None
        sent: list[Any] = []
        for frame in press:
            lang = session.lang  # the language switch may change it while the run streams
            if shown is None or shown[0] != frame.notes or shown[2] != lang:
                shown = (list(frame.notes), describe.notes_markdown(frame.notes, lang), lang)
                session.notes = shown[0]
            run = frame.run
            if run is None:  # the run could not start: one message in the live screen, no badges
                value = {"run": None, "lang": lang, "path": [], "status": {"state": "error", "error": frame.error},
                         "error": frame.error}
                yield value, shown[1], gr.skip()
                continue
            try:
                if meta is None or meta["token"] != run.token:  # a run starts: its whole value
                    lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
                    started = {"token": run.token, "value": self.models.meta(lm, run.settings.model)}
                    value = self._value(session, run, started["value"])
                    meta = started  # only once the page has the run whole: its next frames append to it
                else:  # then what is new; the lineage panel's texts grow with the run: they come again at its end
                    selected = session.selected_step if run is session.current else None
                    rows = None if run.running else history.branch_rows(session, run, lang)
                    value = frames.live_frame(run, session.view, meta["value"], lang,
                                              frames.sent_until(sent, run.path), rows, selected)
            except Exception as exc:  # noqa: BLE001 - the run ends with one line; the tab stays usable
                if run.running and session.stop is not None:
                    session.stop.set()  # the engine ends the run before its next step
                message = error_line(exc, lang, "generate")
                yield {"run": None, "lang": lang, "path": [], "status": {"state": "error", "error": message},
                       "error": message}, shown[1], gr.skip()
                continue
            sent = list(run.path)  # the page holds these entries now
            if frame.waiting is not None:
                value = frames.waiting_value(value, frame.waiting)
            yield value, shown[1], format_branches(frame.branches)

    # --- what the live screen receives ------------------------------------------------------------

    def _value(self, session: Session, run: Run, meta: dict[str, Any]) -> dict[str, Any]:
        selected = session.selected_step if run is session.current else None
        return frames.live_value(run, session.view, meta, session.lang,
                                 history.branch_rows(session, run, session.lang), selected)

    def current_value(self, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        """The live screen's value for the session's current run (in `lang`), or an empty screen."""
        session = self.sessions.get(session_key(request))
        session.lang = lang
        run = session.current
        if run is None:
            return {"run": None, "lang": lang, "path": [], "status": {}}
        return self._whole_value(session, run)

    def relabelled_value(self, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        """The live screen after a language switch: `current_value`, marked as a relabelling. Computed as the switch
        arrives, it may reach the page after a run that started meanwhile (a Generate pressed at once): the page
        applies it only to the run it was computed for, and asks a finished run on screen for its words again."""
        return {**self.current_value(lang, request), "relabel": True}

    def live_state(self, args: list[Any]) -> dict[str, Any]:
        """[run token] -> the run's whole value as it stands now: for a page that missed one of its frames (the
        frames after it start where the page's copy no longer ends). {"run": None} for an unknown run.

        The value is kept for the run's version (`frames.whole_version`): asked again before the run or its tab changes (a
        page that lost several frames, a script asking from many threads), it is not computed again."""
        token = args[0] if isinstance(args, list) and args else None
        run = self.sessions.run_by_token(token) if isinstance(token, str) else None
        sessions = self._sessions_of(token) if run is not None else []
        if not sessions:
            return {"run": None}
        return self._whole_value(sessions[0], run)

    def _whole_value(self, session: Session, run: Run) -> dict[str, Any]:
        """`run`'s whole value for `session`, kept per version of it (`live_state`, a language switch's redraw)."""
        version = frames.whole_version(session, run)  # taken before the value: a value is never older than its version
        with self._whole_lock:
            kept = self._whole.get(run.token)
            if kept is not None and kept[0] == version:
                self._whole.move_to_end(run.token)
                return kept[1]
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        value = self._value(session, run, self.models.meta(lm, run.settings.model))
        size = held_bytes(value)  # counted once, as it is kept (the holdings line asks often)
        with self._whole_lock:
            self._whole[run.token] = (version, value, size)
            while len(self._whole) > WHOLE_VALUES_KEPT:
                self._whole.popitem(last=False)
        return value

    def live_values(self) -> tuple[int, int]:
        """(whole values kept for `live_state` and a language switch, their bytes): the holdings line's `live_values`."""
        with self._whole_lock:
            return len(self._whole), sum(size for _, _, size in self._whole.values())

    def tab_of(self, args: Any) -> str | None:
        """The tab a server function's call belongs to (`lanes.ServerLane`): the owner of the run its first
        argument names; None for a call that names no run."""
        token = args[0] if isinstance(args, list) and args else None
        run = self.sessions.run_by_token(token) if isinstance(token, str) else None
        return None if run is None else run.owner

    # --- sharing ----------------------------------------------------------------------------------

    def link(self, request: gr.Request, *args: Any) -> str:
        """Copy link: the query string that reproduces the run on screen (see `Session.link_query`); inside a Space,
        the Space's huggingface.co address before it."""
        session = self.sessions.get(session_key(request))
        session.link_asked = "run" if session.current is not None else "settings"
        return shared_link(session.link_query(widget_settings(args)))

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
        session.press_stop()

    def stop_at(self, args: list[Any]) -> dict[str, Any]:
        """[run token, tokens on screen]: Stop as the live screen saw it. Its script calls this as the button is
        pressed, beside the Stop event (which Gradio would hold back behind the stream were the live screen one
        of its inputs): the run ends at the tokens the page showed, not at those the engine made meanwhile."""
        try:
            token, seen = args
            seen = int(seen)
        except (TypeError, ValueError):
            return {}
        run = self.sessions.run_by_token(token) if isinstance(token, str) else None
        if run is None or not run.running or not self.sessions.has(run.owner):
            return {}
        session = self.sessions.get(run.owner)
        session.stop_seen = (token, seen)
        session.press_stop()
        return {}

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
        run = self.sessions.run_by_token(token)
        if run is None:
            return {}
        asked = LiveView(kind=str(kind), layer=layer, head=str(head))
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        if asked.fitted(lm.config, run.kind) != asked:
            return {}  # a head or layer the run's model lacks is never taken (it would break the tab's next run)
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
        (e.g. "mode=sample&temperature=0.8&seed=1"). Returns text, token_ids, finish_reason, notes, usage (the prefix
        cache's part) and decoding (captured or eager, the rows, why): the page's press (`play_script`), the notes in
        the query's language."""
        asked = dict(parse_qsl(str(settings_query).lstrip("?"))).get("lang")
        lang = asked if asked in LANGS else "en"  # the language of a refusal (play_script's notes have their own)
        try:
            visitor = visitor_of(None, request, lambda key: False)  # the script's client (never a session id)
            return play_script(self.models.model_for, model, prompt, settings_query, SCRIPT_OWNER, visitor)
        except PlaygroundError as exc:
            raise gr.Error(error_line(exc, lang), print_exception=False) from None
        finally:
            if request is not None:  # a script's session: Gradio's copy of the page for it goes soon after
                self.scripts.end(session_key(request))
            heap.release()

