"""The teacher's tools: the prompt's tokens as typed, temperature side by side, the class game, export a run.

Thin adapters over the app core (`tokens_view`, `side_by_side`, `export`; the game's handlers are
`playground.ui.class_game`); the components are built in `playground.ui.teacher_layout`. The three side-by-side
runs go through the page's own press (`Streaming.press`: real runs of the visitor's session, streamed in the live
screen); their entropy is model work, done on the torch thread (`serving.call_sliced`). The tokenizer view only
tokenizes, on a model already loaded; the game and the export do no model work at all.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import gradio as gr

from playground.app import describe, serving, tokens_view
from playground.app.activities import export, side_by_side
from playground.app.notes import error_line
from playground.app.session import Session, Sessions
from playground.app.settings import widget_settings
from playground.app.words import t
from playground.ui.activities import Activities, wire_activities
from playground.ui.class_game import ClassGame, wire_game
from playground.ui.lanes import GENERATE, JOBS, Lanes
from playground.ui.models import Models, session_key
from playground.ui.streaming import Streaming
from playground.ui.teacher_layout import TEACHER_TEXTS

# The tokenizer view waits for a pause in the typing: a keystroke within 180 ms of the next sends nothing
# for itself (its text goes as None, answered with no change), so a typist costs one tokenization per pause.
DEBOUNCE_JS = """(text, chat, lang) => new Promise((resolve) => {
  const ticket = (window.__pgTokens = (window.__pgTokens || 0) + 1);
  setTimeout(() => resolve([ticket === window.__pgTokens ? text : null, chat, lang]), 180);
})"""
ADDRESS_JS = "() => window.location.origin + window.location.pathname"
# The export's file, made in the browser from the text the server wrote (one click, one file, nothing kept).
DOWNLOAD_JS = """(payload) => {
  if (!payload) return;
  const file = JSON.parse(payload);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([file.text], { type: file.type }));
  a.download = file.name;
  document.body.appendChild(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60000);
}"""
UNCHANGED_RUN = (gr.skip(), gr.skip(), gr.skip())


class Teacher:
    """The teacher's tools for the sessions of one app; `game` holds the class games."""

    def __init__(self, models: Models, sessions: Sessions, stream: Streaming) -> None:
        self.models = models
        self.sessions = sessions
        self.stream = stream
        self.game = ClassGame(models, sessions)
        self.activities = Activities(models, sessions, self.game.rooms)  # "Is it a database?", "Which layer knows?"

    # --- the prompt's tokens --------------------------------------------------------------------------------

    def prompt_tokens(self, text: str | None, chat: bool, lang: str, request: gr.Request | None = None) -> Any:
        """The tokenizer view of the prompt box's text (None: a newer keystroke follows, nothing changes). Only a
        model the tab has loaded is asked (tokenizing, never loading)."""
        if text is None:
            return gr.skip()
        lm = self._loaded(self.sessions.get(session_key(request)))
        if lm is None:
            return ""
        return tokens_view.html(tokens_view.read_prompt(lm, str(text), chat=bool(chat), lang=lang), lang)

    def _loaded(self, session: Session) -> Any:
        if not session.model:
            return None
        try:
            path = self.models.catalog.resolve(session.model, session.key)
        except Exception:  # noqa: BLE001 - a model gone meanwhile: nothing to show
            return None
        registry = self.models.registry
        if registry.key(path, session.dtype) not in registry.loaded_keys():
            return None
        return registry.get(path, session.dtype)

    # --- temperature side by side ---------------------------------------------------------------------------

    def compare(self, request: gr.Request, t1: float, t2: float, t3: float, *widgets: Any) -> Iterator[tuple]:
        """Three runs of the widgets' prompt at three temperatures with one seed, streamed in the live screen one
        after another, then compared: (live, notes, branches, comparison, its data)."""
        session = self.sessions.get(session_key(request))
        session.link_notes = []
        settings = widget_settings(widgets)
        session.lang = lang = settings.lang
        seed = settings.seed if settings.seed is not None else secrets.randbelow(2**31)
        temperatures = [float(x) if x is not None else d for x, d in zip((t1, t2, t3), side_by_side.TEMPERATURES)]
        each = side_by_side.settings_for(settings, temperatures, seed)
        runs = []
        for i, run_settings in enumerate(each, start=1):
            progress = _note(t("sbs_running", lang, t=run_settings.temperature, i=i, n=len(each)))
            started = session.current
            for out in self.stream.press(session, run_settings):
                side_by_side.label_run(session.current, started, run_settings.temperature)
                yield (*out, progress, gr.skip())
                progress = gr.skip()  # said once per run: a value sent again with every frame stalls the stream
            run = session.current
            if run is started or run is None or run.finish_reason not in ("eos", "length", "stop_string"):
                break  # stopped, or it could not start: compare what finished
            runs.append(run)
        if not runs:
            yield (*UNCHANGED_RUN, "", None)
            return
        yield (*UNCHANGED_RUN, _note(t("sbs_measuring", lang)), gr.skip())
        try:
            lm = self.models.model_for(runs[0].settings.model, runs[0].settings.dtype, runs[0].owner)
            columns = serving.call_sliced(side_by_side.columns_work(lm, runs), owner=session.key)
        except Exception as exc:  # noqa: BLE001 - one line where the comparison would be
            yield (*UNCHANGED_RUN, _note(error_line(exc, lang, "side by side")), None)
            return
        data = {"columns": [c.to_dict() for c in columns], "seed": seed, "model": settings.model,
                "stopped": len(runs) < len(each)}
        yield (*UNCHANGED_RUN, self.compared(data, lang), data)

    @staticmethod
    def compared(data: Mapping[str, Any] | None, lang: str) -> Any:
        """The comparison of `data` (the side-by-side's state) in `lang`."""
        if not data:
            return gr.skip()
        columns = [side_by_side.Column(**{**c, "tokens": [tuple(x) for x in c["tokens"]]}) for c in data["columns"]]
        words = side_by_side.html(columns, data["seed"], data["model"], lang)
        if data.get("stopped"):
            words = _note(t("sbs_stopped", lang)) + words
        return words

    # --- export a run ---------------------------------------------------------------------------------------

    def export_json(self, page: str, request: gr.Request | None = None) -> tuple[str, str]:
        return self._export("json", page, request)

    def export_csv(self, page: str, request: gr.Request | None = None) -> tuple[str, str]:
        return self._export("csv", page, request)

    def _export(self, kind: str, page: str, request: gr.Request | None) -> tuple[str, str]:
        """(the file for the browser to save, one line under the buttons) for the run on screen."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        run = session.current
        if run is None or run.running or not run.path:
            return "", t("export_needs_run", lang)
        settings = session.run_settings(run)
        link = export.link_for(settings, page)
        record = export.run_record(run, settings, link)
        text = export.to_json(record) if kind == "json" else export.to_csv(record)
        name = export.file_name(record, kind)
        mime = "application/json" if kind == "json" else "text/csv;charset=utf-8"
        said = t("export_done", lang, run=run.number, steps=len(record["steps"]), name=name, link=link)
        return json.dumps({"name": name, "type": mime, "text": text}), describe.inert(said)

    # --- the language ---------------------------------------------------------------------------------------

    def relabel(self, lang: str, text: str, chat: bool, columns: dict | None, state: dict | None,
                request: gr.Request | None = None) -> tuple:
        """The tools' own words in `lang` (their labels follow the page's switch): texts, the tokenizer view, the
        comparison, the game."""
        texts = tuple(t(key, lang) for key in TEACHER_TEXTS.values())
        return (*texts, self.prompt_tokens(text, chat, lang, request), self.compared(columns, lang),
                self.game.again(state, lang, request))


def _note(text: str) -> str:
    return f'<p class="pg-muted">{describe.esc(text)}</p>'


def wire_teacher(page: Any, h: Teacher, lanes: Lanes, settings_inputs: list[Any], gen_outputs: list[Any],
                 streamed: Callable[[Callable[..., Iterator[tuple]]], Callable[..., Iterator[tuple]]],
                 in_tab_lane: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda fn: fn) -> list[Any]:
    """Bind the tools' events; returns the side-by-side's event (streamed runs: the open view redraws after it).
    `gen_outputs`: the streamed runs' outputs (live screen, notes, branches, then what `streamed` adds to a frame)."""
    p, s = page, page.settings
    lang = s["lang"]
    quick = dict(queue=False, show_progress="hidden")

    # The tokenizer view: as the prompt is typed (after a pause), the chat switch moves or a model loads.
    tokens_in = [s["prompt"], s["chat"], lang]
    tokens = in_tab_lane(h.prompt_tokens)  # the tokenizer's work: in the server functions' lane, one at a time per tab
    s["prompt"].change(tokens, tokens_in, p.prompt_tokens, js=DEBOUNCE_JS, trigger_mode="always_last", **quick)
    for trigger in (s["chat"].change, p.model_status.change):
        trigger(tokens, tokens_in, p.prompt_tokens, trigger_mode="always_last", **quick)

    # The language: the tools' texts and views (set when the page opens, and on every switch).
    texts = [p.component(name) for name in TEACHER_TEXTS]
    lang.change(in_tab_lane(h.relabel), [lang, s["prompt"], s["chat"], p.sbs_columns, p.game_state],
                [*texts, p.prompt_tokens, p.sbs_view, p.game_view], **quick)

    # Temperature side by side: three runs through the page's own press, in the generation lane.
    gen_kw = dict(lanes.lane(GENERATE), trigger_mode="once", show_progress="minimal")
    compared = p.sbs_run.click(streamed(h.compare), [p.sbs_t1, p.sbs_t2, p.sbs_t3, *settings_inputs],
                               [*gen_outputs, p.sbs_view, p.sbs_columns], **gen_kw)

    # Export: the server writes the file's text, the browser saves it.
    p.demo.load(None, None, p.page_address, js=ADDRESS_JS, queue=False)
    for button, handler in ((p.export_json, h.export_json), (p.export_csv, h.export_csv)):
        button.click(in_tab_lane(handler), p.page_address, [p.export_file, p.export_md], **quick).then(
            None, p.export_file, None, js=DOWNLOAD_JS, queue=False)

    wire_game(p, h.game, lang, {**lanes.lane(JOBS), "show_progress": "minimal"})
    wire_activities(p, h.activities, lanes, settings_inputs)
    quiet_sign_in(p.demo, page.c.get("sign_in"))
    return [compared]


def quiet_sign_in(demo: gr.Blocks, button: Any) -> None:
    """Gradio's login button checks the visitor's sign-in when the page loads, in an event it queues with no lane;
    that check only reads the session cookie, so it runs outside the queue (as every lane-less event here does)."""
    if button is None:
        return
    for fn in demo.fns.values():  # attached when the page's Blocks closed
        if getattr(fn.fn, "__self__", None) is button:
            fn.queue = False
    button.load_event_to_attach = None  # once: the Blocks closing again after the wiring would add another
