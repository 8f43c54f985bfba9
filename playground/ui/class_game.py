"""The class game on the page: "Guess the next token" (`playground.app.activities.game`), its events and updates. Thin adapters
over the rooms: no model work at all (a room keeps what it shows).

The teacher's Start opens a room of the run on screen and shows its game link (`?game=<room id>`, nothing else);
a page opened from that link joins the room; every page in a room ticks every two seconds (a player who ticks is
still present) and redraws when the room moved. Rooms and players are counted per visitor address (`address_of`).
The components are built in `playground.ui.teacher_layout.build_game`.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.app import qr, serving, tokens_view, visitors
from playground.app.activities import export, game, lens_guess
from playground.app.notes import error_line, note
from playground.app.session import Sessions
from playground.app.words import browser_language, t
from playground.errors import PlaygroundError
from playground.ui.layout import AFTER_STEP_TOLD_JS
from playground.ui.models import Models, session_key

# A page opened from a game link shows the game alone (teacher.css hides the rest: no settings, no Generate).
# A game page marks itself; and the folded system message a visitor opened stays open when the room's view is drawn
# again (new HTML each time a player joins or the step moves on; it closed under the reader's eyes).
GAME_PAGE_JS = """() => {
  if (/[?&]game=[\\w-]/.test(location.search)) document.body.classList.add('pg-game-page');
  document.addEventListener('click', (e) => {  // the visitor's own toggle (a redraw's is no click)
    const summary = e.target.closest?.('details.pg-game-template > summary');
    if (summary) window.pgTemplateOpen = !summary.parentElement.open;
  }, true);
  new MutationObserver(() => {
    if (window.pgTemplateOpen) document.querySelectorAll('#game-view details.pg-game-template:not([open])')
      .forEach((d) => { d.open = true; });
  }).observe(document.body, {childList: true, subtree: true, attributes: true, attributeFilter: ['open']});
}"""
GAME_SCROLL_JS = "() => { if (/[?&]game=[\\w-]/.test(location.search)) document.querySelector('#game')?.scrollIntoView(); }"
# What a game update touches, by component name.
GAME_SLOTS = ("game_view", "game_choice", "game_player", "game_teacher", "game_reveal", "game_next", "game_lens",
              "game_link", "game_qr", "game_timer", "game_state", "tabs")


class ClassGame:
    """The class game's handlers for the sessions of one app; `rooms` holds its rooms. Each returns updates by
    component name (`GAME_SLOTS`)."""

    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions
        self.rooms = game.Rooms(present=sessions.has)

    def start(self, at: float | None, page: str, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        """The teacher opens the game of the run on screen at step `at` (empty: the step on screen)."""
        session = self.sessions.get(session_key(request))
        run = session.current
        if run is None or run.running or not run.path:
            return self._game(None, session.key, lang, error=t("game_needs_run", lang))
        index = run.step(session.selected_step) if not at or at < 1 else int(at) - 1 - run.steps_before
        settings = session.run_settings(run)
        try:
            shared = self.models.catalog.is_shared(self.models.catalog.resolve(settings.model, session.key))
            room = self.rooms.open(run, settings, session.key, index, shared=shared, address=address_of(request))
            if room.index != game.nearest(room.steps, index):  # started again at another step
                room = self.rooms.goto(room.key, session.key, index)
        except Exception as exc:  # noqa: BLE001 - one line in the game's panel
            return self._game(None, session.key, lang, error=error_line(exc, lang, "game"))
        # the link names the room only: a player can never replay the run to see the hidden token
        return self._game(room, session.key, lang, link=export.address_for(game.link_query(room), page))

    def reveal(self, state: dict | None, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        return self._move(state, lang, request, lambda key, me: self.rooms.reveal(key, me))

    def next_step(self, state: dict | None, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        return self._move(state, lang, request, lambda key, me: self.rooms.next(key, me))

    def ask_layer(self, state: dict | None, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        """The teacher turns the step played into "Which layer knows?": the logit lens reads the room's run at that
        step (one job on the torch thread), and the room guesses a layer."""
        session = self.sessions.get(session_key(request))

        def ask(key: str, me: str) -> game.Room:
            room = self.rooms.find(key)
            if room is not None and room.teacher != me:  # checked before any model work: a player's press is none
                raise PlaygroundError(note("game_not_teacher"))
            run = _room_run(session, room)
            if run is None:
                raise PlaygroundError(note("game_lens_needs_run"))
            lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
            lens_guess.ask(run, room.index, lm.config.n_layers)  # says so when the step kept no residual stream
            ranks = serving.call_job(lens_guess.lens_ranks, lm, run, room.index, owner=session.key)
            return self.rooms.ask_layer(key, me, ranks)
        return self._move(state, lang, request, ask)

    def guess(self, choice: Any, name: str, state: dict | None, lang: str,
              request: gr.Request | None = None) -> dict[str, Any]:
        def guess(key: str, me: str) -> game.Room:
            if choice in (None, ""):
                self.rooms.join(key, me, name, address_of(request))
                raise PlaygroundError(note("game_pick_one"))
            room = self.rooms.find(key)
            if room is not None and room.question == "layer":
                return self.rooms.guess_layer(key, me, choice, name, address_of(request))
            return self.rooms.guess(key, me, int(choice), name, address_of(request))
        return self._move(state, lang, request, guess)

    def _move(self, state: dict | None, lang: str, request: gr.Request | None, action) -> dict[str, Any]:
        me = session_key(request)
        key = (state or {}).get("room")
        if not key:
            return self._game(None, me, lang, error=t("game_idle", lang))
        try:
            room = action(key, me)
        except Exception as exc:  # noqa: BLE001 - a refusal is one line in the panel; the room stays on screen
            room = self.rooms.find(key)
            return self._game(room, me, lang, error=error_line(exc, lang, "game"), state=state)
        return self._game(room, me, lang, state=state)

    def from_link(self, request: gr.Request) -> dict[str, Any]:
        """A page opened from a game link (`?game=<room id>`) joins that room and shows it from what the room keeps
        (no run is played on it); an unknown or ended room is one line."""
        params = dict(request.query_params) if request is not None else {}
        key = _linked_room(request)
        if not key:
            return {"game_state": None}
        headers = getattr(request, "headers", None) or {}
        lang = params["lang"] if params.get("lang") in ("en", "zh") else browser_language(headers.get("accept-language"))
        me = session_key(request)
        self.sessions.get(me)  # the tab is a page: the room's teacher may look for it
        room = self.rooms.find(key)
        if room is not None and room.teacher != me:
            try:
                room = self.rooms.join(key, me, address=address_of(request))
            except Exception as exc:  # noqa: BLE001 - a full room: one line
                return self._game(None, me, lang, error=error_line(exc, lang, "game"), select=True)
        return self._game(room, me, lang, error="" if room else t("game_gone", lang), select=True)

    def tick(self, state: dict | None, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        """Every two seconds while the tab is in a room: the room again when it changed (else nothing)."""
        key = (state or {}).get("room")
        if not key:
            return {"game_timer": gr.update(active=False)}
        me = session_key(request)
        self.sessions.get(me)  # a tab in a game is a tab in use (its teacher's controls stay)
        room = self.rooms.find(key, me)  # a player who ticks is still present
        if room is None:
            return {}
        v = self.rooms.view(room, me)
        if (v["version"], lang, v["players"]) == (state.get("version"), state.get("lang"), state.get("players")):
            return {}  # nothing moved and nobody came or left
        return self._game(room, me, lang, state=state, v=v)

    def again(self, state: dict | None, lang: str, request: gr.Request | None = None) -> Any:
        """The game's panel again in `lang` (the page's language switch, also as the page opens)."""
        key = (state or {}).get("room")
        linked = "" if key else _linked_room(request)
        if linked and self.rooms.find(linked) is not None:
            return gr.skip()  # a game link's page not (yet) in its room: the link's own answer stands
        if linked:  # a link to no room: still said, in the new language (not the blank of a page with no game)
            return game.html(None, lang, t("game_gone", lang), alone=True)
        room = self.rooms.find(key) if key else None
        me = session_key(request)
        return game.html(self.rooms.view(room, me) if room else None, lang)

    def _game(self, room: game.Room | None, me: str, lang: str, *, error: str = "", link: str | None = None,
              state: dict | None = None, select: bool = False, v: dict | None = None) -> dict[str, Any]:
        """Updates by component name for `room` as `me` sees it (None: no room, `error` says why)."""
        if room is None:
            out: dict[str, Any] = {"game_view": game.html(None, lang, error, alone=select)}
            if select:
                out["tabs"] = gr.update(selected="teacher")
            return out
        v = v or self.rooms.view(room, me)
        before = state or {}
        teacher = v["teacher"]
        out = {"game_view": game.html(v, lang, error),
               "game_state": {"room": room.key, "version": v["version"], "lang": lang, "step": v["number"],
                              "revealed": v["revealed"], "teacher": teacher, "players": v["players"],
                              "question": v["question"]},
               "game_timer": gr.update(active=True),
               "game_reveal": gr.update(visible=teacher), "game_next": gr.update(visible=teacher),
               "game_lens": gr.update(visible=teacher),
               "game_player": gr.update(visible=not teacher), "game_teacher": gr.update(visible=teacher)}
        # the radio changes with a new step, the reveal, another question, or a layer question's language
        choices = [v["number"], v["revealed"], v["question"], lang if v["question"] == "layer" else ""]
        out["game_state"]["choices"] = choices
        if before.get("choices") != choices:
            out["game_choice"] = _choices(v, lang)
        if link is not None:
            out["game_link"] = gr.update(value=link, visible=True)
            out["game_qr"] = qr.qr_html(link)  # seen in projector mode only: the class scans it from the screen
        if select:
            out["tabs"] = gr.update(selected="teacher")
        return out


def _linked_room(request: gr.Request | None) -> str:
    """The room id a page's game link names (`?game=<id>`; "" for a page opened without one)."""
    params = dict(request.query_params) if request is not None else {}
    return str(params.get("game", "")).strip()


def _room_run(session: Any, room: game.Room | None) -> Any:
    """The teacher's own finished run that `room` plays (None: no room, or the run left the tab's history)."""
    if room is None:
        return None
    return next((r for r in reversed(session.runs)
                 if not r.running and game.run_key(session.run_settings(r)) == room.run), None)


def _choices(v: dict[str, Any], lang: str) -> Any:
    """The player's radio for the room's question: the candidates (the game) or the layers (the lens)."""
    if v["question"] == "layer":
        choices = [(lens_guess.layer_name(o["id"], v["layers"], lang), str(o["id"])) for o in v["options"]]
    else:
        choices = [(tokens_view.shown(o["text"]), str(o["id"])) for o in v["options"]]
    mine = str(v["mine"]) if v["mine"] is not None else None
    return gr.update(choices=choices, value=mine, interactive=not v["revealed"])


def address_of(request: gr.Request | None) -> str:
    """The visitor's address, as every per-visitor bound counts it (the nearest trusted proxy's report, else the
    connection's own): a class behind one school address shares it."""
    peer = getattr(getattr(request, "client", None), "host", None)
    headers = getattr(request, "headers", None)
    if hasattr(headers, "getlist"):
        forwarded = headers.getlist("x-forwarded-for")
    else:  # a request Gradio rebuilt from a plain dict
        forwarded = [str(v) for k, v in dict(headers or {}).items() if k.lower() == "x-forwarded-for"]
    return visitors.client_address(peer, forwarded, visitors.trusted_proxies())


def wire_game(p: Any, g: ClassGame, lang: Any, job_kw: dict[str, Any]) -> None:
    """Bind the game's events: outside the queue (they do no model work and answer at once), but for the lens's
    reading of a step (`job_kw`: the jobs' lane)."""
    quick = dict(queue=False, show_progress="hidden")
    # each handler's updates by component name, keyed by component for Gradio
    slots = [p.component(name) for name in GAME_SLOTS]

    def keyed(updates: dict[str, Any]) -> dict[Any, Any]:
        return {p.component(name): update for name, update in updates.items()} or {p.game_timer: gr.skip()}

    def from_link(request: gr.Request) -> dict:
        return keyed(g.from_link(request))

    def start(at: float | None, address: str, code: str, request: gr.Request) -> dict:
        return keyed(g.start(at, address, code, request))

    def reveal(state: dict | None, code: str, request: gr.Request) -> dict:
        return keyed(g.reveal(state, code, request))

    def step_on(state: dict | None, code: str, request: gr.Request) -> dict:
        return keyed(g.next_step(state, code, request))

    def ask_layer(state: dict | None, code: str, request: gr.Request) -> dict:
        return keyed(g.ask_layer(state, code, request))

    def guess(choice: Any, name: str, state: dict | None, code: str, request: gr.Request) -> dict:
        return keyed(g.guess(choice, name, state, code, request))

    def tick(state: dict | None, code: str, request: gr.Request) -> dict:
        return keyed(g.tick(state, code, request))

    p.demo.load(None, None, None, js=GAME_PAGE_JS, queue=False)
    p.demo.load(from_link, None, slots, **quick).then(None, None, None, js=GAME_SCROLL_JS, queue=False)
    p.game_start.click(start, [p.game_at, p.page_address, lang], slots, js=AFTER_STEP_TOLD_JS, **quick)
    p.game_reveal.click(reveal, [p.game_state, lang], slots, **quick)
    p.game_next.click(step_on, [p.game_state, lang], slots, **quick)
    p.game_lens.click(ask_layer, [p.game_state, lang], slots, **job_kw)
    p.game_guess.click(guess, [p.game_choice, p.game_name, p.game_state, lang], slots, **quick)
    p.game_timer.tick(tick, [p.game_state, lang], slots, **quick)
