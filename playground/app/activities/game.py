"""“Guess the next token”, for a class: rooms on the server, one per run a teacher opens. No Gradio, no model work.

    rooms = Rooms(present=sessions.has)
    room = rooms.open(run, settings, teacher=key, index=4, shared=True, address=ip)  # the teacher's run, at step 5
    link_query(room)                                                  # "?game=<room id>": the game link's query
    rooms.join(room.key, player, "Ada", ip); rooms.guess(room.key, player, token_id, "", ip)
    rooms.reveal(room.key, teacher); rooms.goto(room.key, teacher, 5)
    rooms.ask_layer(room.key, teacher, ranks); rooms.guess_layer(room.key, player, 3)  # "Which layer knows?" instead
    rooms.find(room.key, player)                                      # a page's tick: that player is still here
    rooms.leave(player)                                               # their tab closed: gone from every room
    rooms.view(room, player), html(that view, lang)

A room is the teacher's finished run, kept as what the game shows (the text, and at every step the candidates
with the model's own probabilities): the visitors who open the game link read it there, so a class of thirty
costs the server no model work. The game link names only the room's own id (`?game=<id>`: opaque, drawn by
`secrets` when the room opens), never the run's model, prompt, settings or seed, so no player can replay the run
to see the hidden token. The teacher who presses Start again on the same run (or a new tab of the same address,
once the first tab is gone) gets the same room back (`run_key`). Before the reveal a visitor
sees the text up to the hidden token and the candidates in an order of the room's own (never the model's); after
it, every guess of the room is scored in bits: log₂ of the probability the model gave the guessed token (0 is the
best score; −1 bit means the model gave it one chance in two). The teacher can turn the step played into "Which
layer knows?" (`lens_guess`): the token is shown, everyone picks the first layer whose logit lens ranks it first
(the ranks are the teacher's model work, given to the room), and a guess scores minus the layers it is off.

Bounded per visitor address (a class of 30 often shares one school address) and for the server:
- rooms: `MAX_ADDRESS_ROOMS` per address, `MAX_TEACHER_ROOMS` per teacher's tab (its newest), `MAX_ROOMS` in all;
  an abandoned room (its teacher's tab gone, nobody touched it for `ABANDONED_SECONDS`) goes first when an address
  or the server runs out of rooms, and any room nobody touched for `IDLE_SECONDS` goes anyway;
- players: `MAX_ADDRESS_PLAYERS` present per address in a room, `MAX_PLAYERS` in all; a player is present while
  their page ticks (within `PRESENT_SECONDS`) and their tab is open, and a full room makes way for a newcomer by
  dropping the player gone longest. "N of M guessed" counts present players only;
- names of `MAX_NAME` characters.
A room holds no private data: only runs of the models the app offers to everyone (never a visitor's upload), the
names visitors type, and their guesses.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html as html_lib
import math
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from playground.app.activities import lens_guess
from playground.app.notes import note
from playground.app.run import Run
from playground.app.settings import UISettings, to_query
from playground.app.tab import Action, Out, Row, Stack, Tab, Widget, Words
from playground.app.tokens_view import shown
from playground.app.words import t
from playground.errors import PlaygroundError

MAX_ROOMS = 200
MAX_ADDRESS_ROOMS = 8  # one address: a few teachers of one school (one client's tabs never fill the server)
MAX_TEACHER_ROOMS = 4  # a tab that opens more games than this closes its oldest (one teacher never fills the server)
MAX_PLAYERS = 200
MAX_ADDRESS_PLAYERS = 60  # present players of one address in a room: a class of 30 behind one school address, twice
PRESENT_SECONDS = 90.0  # a player whose page has not ticked (every 2 s; a hidden tab's timer is slowed) this long left
ABANDONED_SECONDS = 5 * 60  # a room with no teacher's tab and untouched this long is the first to make way
MAX_NAME = 24
MAX_OPTIONS = 8  # the candidates a visitor picks among (the model's most likely, the chosen token always in)
IDLE_SECONDS = 3 * 3600  # a room nobody touched this long is gone
MIN_PROB = 1e-12  # a probability that underflowed to 0 still scores a finite number of bits


def run_key(settings: UISettings) -> str:
    """The run a room plays, from its settings (language, pace and game aside): its teacher's Start on the same run
    finds the room again. Never shown to a player: the game link names the room's own id only."""
    canonical = to_query(dataclasses.replace(settings, lang="en", pace_ms=0, game=""))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]


def link_query(room: Room) -> str:
    """The game link's query: the room's id and nothing else (no model, prompt, settings or seed)."""
    return "?" + urlencode({"game": room.key})


def new_room_id() -> str:
    """An opaque, unguessable room id (96 random bits, URL-safe): the whole of a game link's query."""
    return secrets.token_urlsafe(12)


def score_bits(prob: float) -> float:
    """A guess's score: log₂ of the probability the model gave the guessed token (≤ 0; 0 is a sure thing)."""
    return math.log2(max(float(prob), MIN_PROB))


@dataclass(frozen=True)
class Option:
    token_id: int
    text: str
    prob: float  # the model's own probability (its softmax, before temperature, top-k and top-p)


@dataclass
class Step:
    number: int  # as every screen counts it
    before: int  # how many tokens of the run's text come before it
    options: list[Option]  # in the room's own order (shuffled per step, the same for everyone)
    chosen: int  # the token the run chose


@dataclass
class Room:
    key: str  # the room's own opaque id: all a game link names
    run: str  # `run_key` of the run it plays (its teacher finds it again; never shown)
    address: str  # the teacher's address (rooms are counted per address)
    settings: UISettings  # the run's
    prompt: str
    texts: list[str]  # the run's tokens after the prompt, as the live screen shows them
    steps: dict[int, Step]  # by path index: the steps that can be played (those with candidates)
    teacher: str
    index: int  # the step played now
    revealed: bool = False
    guesses: dict[int, dict[str, int]] = field(default_factory=dict)  # path index -> player -> token id
    names: dict[str, str] = field(default_factory=dict)  # player -> name (join order)
    seen: dict[str, float] = field(default_factory=dict)  # player -> when their page last ticked or acted
    where: dict[str, str] = field(default_factory=dict)  # player -> their address
    joined: int = 0  # players ever joined (a new player's default name "#N")
    version: int = 0  # grows with every change, so a page asks again only when something moved
    touched: float = 0.0
    # "Which layer knows?" played by the room: the step played asks after which layer the logit lens first ranks its
    # chosen token first (the token is shown), instead of which token came (`question` "layer", not "token")
    question: str = "token"
    layers: int = 0  # the model's blocks: a layer guess is 0 (the embedding) … layers + 1 ("never")
    lens: dict[int, list[int]] = field(default_factory=dict)  # path index -> the chosen token's rank after each layer
    layer_guesses: dict[int, dict[str, int]] = field(default_factory=dict)  # path index -> player -> layer

    def option(self, index: int, token_id: int) -> Option | None:
        return next((o for o in self.steps[index].options if o.token_id == token_id), None)

    def playable(self) -> list[int]:
        return sorted(self.steps)

    def present(self, now: float) -> set[str]:
        """The players whose pages are still in the room (they ticked or acted within `PRESENT_SECONDS`)."""
        return {p for p, at in self.seen.items() if now - at < PRESENT_SECONDS}


class Rooms:
    """Every room of one app, by id. Thread-safe. `present(session key)`: whether a teacher's tab is still open (a
    room whose teacher left is the first to go, and the next tab of its address may take it over)."""

    def __init__(self, present: Callable[[str], bool] = lambda key: True, *, clock: Callable[[], float] = time.monotonic,
                 max_rooms: int = MAX_ROOMS, max_players: int = MAX_PLAYERS, idle_seconds: float = IDLE_SECONDS,
                 address_rooms: int = MAX_ADDRESS_ROOMS, address_players: int = MAX_ADDRESS_PLAYERS) -> None:
        self.present = present
        self.clock = clock
        self.max_rooms, self.max_players, self.idle_seconds = max_rooms, max_players, idle_seconds
        self.address_rooms, self.address_players = address_rooms, address_players
        self._rooms: dict[str, Room] = {}
        self._lock = threading.Lock()

    # --- the teacher --------------------------------------------------------------------------------------

    def open(self, run: Run, settings: UISettings, teacher: str, index: int, *, shared: bool,
             address: str = "") -> Room:
        """The room of the finished `run` (reproduced by `settings`) with `teacher` (a tab at `address`) at its
        controls, playing path index `index` (the nearest playable step). The teacher's own room of the same run is
        kept (its guesses too), as is one of its address whose teacher's tab is gone (it passes to `teacher`).
        Raises PlaygroundError (a keyed note): a run of a visitor's own upload, a run still going, no candidates
        recorded, or the address's or the server's rooms all taken by live rooms."""
        if not shared:
            raise PlaygroundError(note("game_private_model"))
        if run.running or not run.path:
            raise PlaygroundError(note("game_needs_run"))
        which = run_key(settings)
        steps = _steps(run, which)
        if not steps:
            raise PlaygroundError(note("game_no_candidates"))
        with self._lock:
            self._sweep()
            room = next((r for r in self._rooms.values() if r.run == which and r.address == address
                         and (r.teacher == teacher or not self.present(r.teacher))), None)
            if room is None:
                self._make_way(teacher, address)
                room = Room(new_room_id(), which, address, dataclasses.replace(settings, game=""),
                            "".join(run.prompt_texts), list(run.stream_texts), steps, teacher, nearest(steps, index))
                self._rooms[room.key] = room
            room.teacher = teacher
            if room.question != "token":  # Start game plays the token game: a layer question on the room is over
                room.index, room.revealed, room.question = nearest(steps, index), False, "token"
                room.guesses.pop(room.index, None)
            self._changed(room)
            return room

    def _make_way(self, teacher: str, address: str) -> None:
        """Room for one more room of `teacher` at `address`: the tab's oldest beyond its own few close; an abandoned
        room goes before the address or the server refuses."""
        own = sorted((r for r in self._rooms.values() if r.teacher == teacher), key=lambda r: r.touched)
        for old in own[: max(0, len(own) - MAX_TEACHER_ROOMS + 1)]:
            del self._rooms[old.key]
        if sum(r.address == address for r in self._rooms.values()) >= self.address_rooms:
            if not self._reclaim(lambda r: r.address == address):
                raise PlaygroundError(note("game_address_full", n=self.address_rooms))
        if len(self._rooms) >= self.max_rooms and not self._reclaim(lambda r: True):
            raise PlaygroundError(note("game_full", n=self.max_rooms))

    def _reclaim(self, among: Callable[[Room], bool]) -> bool:
        """Drop the longest untouched abandoned room `among` allows (its teacher's tab gone, nobody touched it for
        `ABANDONED_SECONDS`); whether there was one."""
        now = self.clock()
        abandoned = [r for r in self._rooms.values()
                     if among(r) and now - r.touched >= ABANDONED_SECONDS and not self.present(r.teacher)]
        if not abandoned:
            return False
        del self._rooms[min(abandoned, key=lambda r: r.touched).key]
        return True

    def goto(self, key: str, teacher: str, index: int) -> Room:
        """The teacher moves the room to a step (the nearest playable one): hidden again, fresh guesses."""
        with self._lock:
            room = self._teachers(key, teacher)
            room.index, room.revealed, room.question = nearest(room.steps, index), False, "token"
            room.guesses.pop(room.index, None)
            self._changed(room)
            return room

    def next(self, key: str, teacher: str) -> Room:
        """The step after the one played (the last one stays)."""
        with self._lock:
            room = self._teachers(key, teacher)
            later = [i for i in room.playable() if i > room.index]
        return self.goto(key, teacher, later[0] if later else room.index)

    def ask_layer(self, key: str, teacher: str, ranks: Sequence[int]) -> Room:
        """The step played becomes "Which layer knows?": hidden again, fresh layer guesses; `ranks` is the chosen
        token's rank after the embedding and after each block (`lens_guess.lens_ranks`: the teacher's model work)."""
        with self._lock:
            room = self._teachers(key, teacher)
            room.lens[room.index] = [int(r) for r in ranks]
            room.layers = len(room.lens[room.index]) - 1
            room.question, room.revealed = "layer", False
            room.layer_guesses.pop(room.index, None)
            self._changed(room)
            return room

    def reveal(self, key: str, teacher: str) -> Room:
        with self._lock:
            room = self._teachers(key, teacher)
            room.revealed = True
            self._changed(room)
            return room

    # --- the players --------------------------------------------------------------------------------------

    def find(self, key: str, player: str | None = None) -> Room | None:
        """The room `key` (None: no such room, or it ended); a `player` of it who asks is still present."""
        with self._lock:
            self._sweep()
            room = self._rooms.get(key)
            if room is not None:
                room.touched = self.clock()
                if player in room.seen:
                    room.seen[player] = room.touched
            return room

    def leave(self, player: str) -> None:
        """`player`'s tab closed: they are gone from every room at once, not `PRESENT_SECONDS` later (their names
        and guesses stay for the reveal); the rooms' pages redraw "N of M guessed" without them."""
        with self._lock:
            for room in self._rooms.values():
                if room.seen.pop(player, None) is not None:
                    room.version += 1  # pages redraw; not a touch: a room nobody uses still ages

    def join(self, key: str, player: str, name: str = "", address: str = "") -> Room:
        """`player` (a tab at `address`) is in the room under `name` (cleaned; "" keeps the one it has, or "#N")."""
        with self._lock:
            room = self._room(key)
            self._name(room, player, name, address)
            return room

    def guess(self, key: str, player: str, token_id: int, name: str = "", address: str = "") -> Room:
        """`player` guesses `token_id` at the step played; a new guess replaces theirs until the reveal."""
        with self._lock:
            room = self._room(key)
            if room.revealed:
                raise PlaygroundError(note("game_revealed"))
            if room.question != "token" or room.option(room.index, int(token_id)) is None:
                raise PlaygroundError(note("game_pick_one"))
            self._name(room, player, name, address)
            room.guesses.setdefault(room.index, {})[player] = int(token_id)
            self._changed(room)
            return room

    def guess_layer(self, key: str, player: str, layer: Any, name: str = "", address: str = "") -> Room:
        """`player` guesses the first layer that ranks the step's token first (a new guess replaces theirs until
        the reveal)."""
        with self._lock:
            room = self._room(key)
            if room.revealed:
                raise PlaygroundError(note("game_revealed"))
            if room.question != "layer":
                raise PlaygroundError(note("game_pick_one"))
            chosen = lens_guess.check_guess(layer, room.layers)
            self._name(room, player, name, address)
            room.layer_guesses.setdefault(room.index, {})[player] = chosen
            self._changed(room)
            return room

    # --- inside the lock ----------------------------------------------------------------------------------

    def _room(self, key: str) -> Room:
        self._sweep()
        room = self._rooms.get(key)
        if room is None:
            raise PlaygroundError(note("game_gone"))
        return room

    def _teachers(self, key: str, teacher: str) -> Room:
        room = self._room(key)
        if room.teacher != teacher:
            raise PlaygroundError(note("game_not_teacher"))
        return room

    def _name(self, room: Room, player: str, name: str, address: str) -> None:
        now = self.clock()
        if player not in room.names:
            self._seat(room, address, now)
            room.joined += 1
        room.seen[player], room.where[player] = now, room.where.get(player, address)
        cleaned = clean_name(name)
        if cleaned or player not in room.names:
            room.names[player] = cleaned or f"#{room.joined}"
            self._changed(room)

    def _seat(self, room: Room, address: str, now: float) -> None:
        """A seat for a new player of `address`: refused when the address already has its share of the players
        present; in a full room the player gone longest (with their guesses) makes way."""
        here = room.present(now)
        if sum(room.where.get(p) == address for p in here) >= self.address_players:
            raise PlaygroundError(note("game_address_players", n=self.address_players))
        if len(room.names) < self.max_players:
            return
        gone = [p for p in room.names if p not in here]
        if not gone:
            raise PlaygroundError(note("game_room_full", n=self.max_players))
        left = min(gone, key=lambda p: room.seen.get(p, 0.0))
        for table in (room.names, room.seen, room.where, *room.guesses.values(), *room.layer_guesses.values()):
            table.pop(left, None)

    def _changed(self, room: Room) -> None:
        room.version += 1
        room.touched = self.clock()

    def _sweep(self) -> None:
        now = self.clock()
        for key in [k for k, r in self._rooms.items() if now - r.touched >= self.idle_seconds]:
            del self._rooms[key]

    def first_guesses(self, teacher: str, settings: UISettings) -> list[dict[str, Any]]:
        """What the class guessed for the first token of an answer to the question of `settings`: in `teacher`'s
        most recently used room playing the same model, prompt and chat switch, the guesses at its first step
        (path index 0), a row per token guessed (its id, text, players, the model's probability), most guessed
        first. [] when there is no such room or nobody guessed that step."""
        with self._lock:
            rooms = [r for r in self._rooms.values() if r.teacher == teacher and r.guesses.get(0)
                     and (r.settings.model, r.settings.prompt, r.settings.chat)
                     == (settings.model, settings.prompt, settings.chat)]
            if not rooms:
                return []
            room = max(rooms, key=lambda r: r.touched)
            rows = []
            for token_id, players in Counter(room.guesses[0].values()).items():
                option = room.option(0, token_id)
                rows.append({"token_id": token_id, "text": option.text, "players": players, "prob": option.prob})
            return sorted(rows, key=lambda r: (-r["players"], -r["prob"], r["token_id"]))

    def view(self, room: Room, player: str) -> dict[str, Any]:
        """`view` of `room` for `player` now, read inside the lock (other pages' guesses and ticks change it)."""
        with self._lock:
            return view(room, player, self.clock())

    def __len__(self) -> int:
        with self._lock:
            return len(self._rooms)


def clean_name(name: Any) -> str:
    """A name as a visitor typed it: printable, one line, at most MAX_NAME characters."""
    text = " ".join(str(name or "").split())
    return "".join(c for c in text if c.isprintable())[:MAX_NAME].strip()


def _steps(run: Run, key: str) -> dict[int, Step]:
    """The run's playable steps: each with its candidates (at least two), the chosen token among them, in an order
    of the room's own."""
    out = {}
    for index, step in enumerate(run.path):
        cands = sorted(step.candidates or [], key=lambda c: -c.prob_raw)[:MAX_OPTIONS]
        if step.candidates and not any(c.chosen for c in cands):
            cands[-1] = next(c for c in step.candidates if c.chosen)
        if len(cands) < 2:
            continue
        options = [Option(int(c.token_id), c.text, float(c.prob_raw)) for c in cands]
        random.Random(f"{key}:{index}").shuffle(options)  # the same order for everyone, never the model's ranking
        out[index] = Step(run.step_number(index), run.steps_before + index, options, int(step.token_id))
    return out


def nearest(steps: dict[int, Step], index: int) -> int:
    """The playable step closest to path index `index` (the earlier of two as close)."""
    return min(steps, key=lambda i: (abs(i - int(index)), i))


# --- what a visitor's page shows ------------------------------------------------------------------------------


def view(room: Room, player: str, now: float | None = None) -> dict[str, Any]:
    """The room as `player` sees it at `now` (the rooms' clock; default: now). The teacher sees the controls; nobody
    sees the answer before the reveal; "guessed" and "players" count the players still present."""
    step = room.steps[room.index]
    guesses = room.guesses.get(room.index, {})
    here = room.present(time.monotonic() if now is None else now) - {room.teacher}
    out: dict[str, Any] = {
        "key": room.key, "version": room.version, "teacher": player == room.teacher, "number": step.number,
        "last": max(s.number for s in room.steps.values()), "first": min(s.number for s in room.steps.values()),
        **dict(zip(("template", "prompt"), fold(room))), "before": "".join(room.texts[: step.before]),
        "revealed": room.revealed, "index": room.index,
        "options": [{"id": o.token_id, "text": o.text} for o in step.options],
        "mine": guesses.get(player), "guessed": len(here & guesses.keys()), "players": len(here),
        "name": room.names.get(player, ""), "model": room.settings.model, "question": room.question,
    }
    if room.question == "layer":
        return _layer_view(room, player, out, here)
    if room.revealed:
        chosen = room.option(room.index, step.chosen)
        out["chosen"] = {"id": step.chosen, "text": chosen.text, "prob": chosen.prob}
        out["probs"] = [{"id": o.token_id, "text": o.text, "prob": o.prob}
                        for o in sorted(step.options, key=lambda o: -o.prob)]
        scored = []
        for who, token_id in guesses.items():
            option = room.option(room.index, token_id)
            scored.append({"name": room.names.get(who, "?"), "text": option.text, "prob": option.prob,
                           "bits": score_bits(option.prob), "you": who == player, "right": token_id == step.chosen})
        out["guesses"] = sorted(scored, key=lambda g: (-g["bits"], g["name"]))
        out["board"] = board(room, player)
    return out


def _layer_view(room: Room, player: str, out: dict[str, Any], here: set[str]) -> dict[str, Any]:
    """`view` of a "Which layer knows?" step: the chosen token is shown (the question is about it), the guesses are
    layers; after the reveal the lens's ranks, the answer, every guess scored and the room's board."""
    step = room.steps[room.index]
    guesses = room.layer_guesses.get(room.index, {})
    out.update(layers=room.layers, token=room.option(room.index, step.chosen).text, mine=guesses.get(player),
               options=[{"id": layer} for layer in range(room.layers + 2)], guessed=len(here & guesses.keys()))
    if room.revealed:
        ranks = room.lens[room.index]
        answer = lens_guess.first_layer(ranks)
        scored = [{"name": room.names.get(who, "?"), "guess": layer, "you": who == player,
                   "score": lens_guess.score(layer, answer, room.layers)} for who, layer in guesses.items()]
        out.update(answer=answer, ranks=list(ranks), guesses=sorted(scored, key=lambda g: (-g["score"], g["name"])),
                   board=layer_board(room, player))
    return out


def layer_board(room: Room, player: str) -> list[dict[str, Any]]:
    """Every player's "Which layer knows?" scores over the layer questions revealed so far: the mean score (minus
    the layers off), how many were exactly right and how many steps they guessed; best first."""
    totals: dict[str, list[int]] = {}
    for index, guesses in room.layer_guesses.items():
        if index == room.index and room.question == "layer" and not room.revealed:
            continue
        ranks = room.lens[index]
        answer = lens_guess.first_layer(ranks)
        for who, layer in guesses.items():
            totals.setdefault(who, []).append(lens_guess.score(layer, answer, len(ranks) - 1))
    rows = [{"name": room.names.get(who, "?"), "mean": sum(v) / len(v), "right": sum(x == 0 for x in v),
             "steps": len(v), "you": who == player} for who, v in totals.items()]
    return sorted(rows, key=lambda r: (-r["mean"], r["name"]))


def fold(room: Room) -> tuple[str, str]:
    """(the chat template's opening, the rest) of the room's prompt: what the template wrote before the visitor's
    typed text (its system message and role markers, folded away on the page so the sentence being guessed stays in
    view) and from that text on. ("", the prompt) without a chat template or where the typed text is not found."""
    typed = room.settings.prompt if room.settings.chat else ""
    at = room.prompt.rfind(typed) if typed else -1
    return (room.prompt[:at], room.prompt[at:]) if at > 0 else ("", room.prompt)


def hiding_css(v: dict[str, Any]) -> str:
    """While the room guesses, the teacher's own page shows the run only up to the blank: a style that hides the live
    screen's tokens from the played step on and what names a step's token (the step bar's choice, the step's panels,
    the inspector, the beams, the branches and the run history). Gone with the reveal (the game view redraws)."""
    if not v["teacher"] or v["revealed"] or v["question"] == "layer":  # a layer question shows the token itself
        return ""
    step = f'#token-stream > [data-step="{int(v["index"])}"]'
    hidden = (step, f"{step} ~ *", ".pg-stepbar .pg-chose", "#step-panels", "#step-caption",
              "#funnel-plot", "#beam-tree", "#beam-table", ".pg-beams", ".pg-branches", "#run-history")
    return f'<style class="pg-game-hiding">{", ".join(hidden)} {{ display: none !important; }}</style>'


def board(room: Room, player: str) -> list[dict[str, Any]]:
    """Every player's scores over the steps revealed so far: the mean bits per guess (fair to those who joined
    late), their total and how many steps they guessed; best first."""
    totals: dict[str, list[float]] = {}
    for index, guesses in room.guesses.items():
        if index == room.index and room.question == "token" and not room.revealed:
            continue
        for who, token_id in guesses.items():
            option = room.option(index, token_id)
            if option is not None:
                totals.setdefault(who, []).append(score_bits(option.prob))
    rows = [{"name": room.names.get(who, "?"), "mean": sum(b) / len(b), "total": sum(b), "steps": len(b),
             "you": who == player} for who, b in totals.items()]
    return sorted(rows, key=lambda r: (-r["mean"], r["name"]))


def html(v: dict[str, Any] | None, lang: str = "en", error: str = "", *, alone: bool = False) -> str:
    """The game's panel: the text up to the hidden token (the chat template's opening folded away); after the
    reveal the model's probabilities, every guess scored and the board. A player's page (`alone`: a page opened from
    a game link, or any view of a player) says how to reach the full playground. Every text a model or a visitor
    wrote is escaped."""
    esc = html_lib.escape
    full = (f'<p class="pg-game-full">{esc(t("game_alone", lang))} <a href="?lang={lang}" target="_self">'
            f'{esc(t("game_full_link", lang))}</a></p>')
    if v is None:
        return (f'<div class="pg-game"><p class="pg-game-note">{esc(error or t("game_idle", lang))}</p>'
                f'{full if alone else ""}</div>')
    parts = ['<div class="pg-game" data-step="{}" data-revealed="{}" data-players="{}">'.format(
        v["number"], str(v["revealed"]).lower(), int(v["players"])), hiding_css(v)]
    parts.append(f'<p class="pg-game-head">{esc(t("game_head", lang, step=v["number"], first=v["first"], last=v["last"], model=v["model"]))}'
                 f' · {esc(t("game_count", lang, guessed=v["guessed"], players=v["players"]))}</p>')
    layer = v["question"] == "layer"  # "Which layer knows?": the token is shown, the question is about it
    hidden = esc(shown(v["token"] if layer else v["chosen"]["text"])) if v["revealed"] or layer else "?"
    folded = (f'<details class="pg-game-template"><summary>{esc(t("game_template", lang))}</summary>'
              f'<span class="pg-game-prompt">{esc(v["template"])}</span></details>' if v["template"] else "")
    # the box keeps its end in view (the blank is its last line): what does not fit scrolls off its top
    parts.append(f'<div class="pg-game-text"><div class="pg-game-flow">{folded}<span class="pg-game-prompt">'
                 f'{esc(v["prompt"])}</span>{esc(v["before"])}<span class="pg-game-blank{" shown" if v["revealed"] or layer else ""}">'
                 f'{hidden}</span></div></div>')
    if error:
        parts.append(f'<p class="pg-game-error">{esc(error)}</p>')
    if layer:
        parts.append(_layer_html(v, lang))
        if not v["teacher"] or alone:
            parts.append(full)
        return "".join(parts) + "</div>"
    mine = next((o["text"] for o in v["options"] if o["id"] == v["mine"]), None)
    if not v["revealed"]:
        key = "game_your_guess" if mine is not None else ("game_teacher_wait" if v["teacher"] else "game_pick")
        parts.append(f'<p class="pg-game-note">{esc(t(key, lang, token=shown(mine or "")))}</p>')
    else:
        chosen = v["chosen"]
        parts.append(f'<p class="pg-game-answer">{esc(t("game_answer", lang, token=shown(chosen["text"]), p=100 * chosen["prob"]))}</p>')
        parts.append(f'<table class="pg-game-probs"><thead><tr><th>{esc(t("game_col_candidate", lang))}</th>'
                     f'<th>{esc(t("game_col_prob", lang))}</th><th>{esc(t("game_col_if", lang))}</th></tr></thead><tbody>')
        for o in v["probs"]:
            cls = ' class="chosen"' if o["id"] == chosen["id"] else ""
            parts.append(f'<tr{cls}><td class="pg-ctok">{esc(shown(o["text"]))}</td><td class="pg-bar">'
                         f'<span style="width:{100 * o["prob"]:.1f}%"></span><em>{_pct(o["prob"])}</em></td>'
                         f'<td>{score_bits(o["prob"]):.2f}</td></tr>')
        parts.append("</tbody></table>")
        if v["guesses"]:
            parts.append(_guesses_head(lang, "game_col_prob", "game_col_bits"))
            for g in v["guesses"]:
                cls = " ".join(c for c, on in (("you", g["you"]), ("right", g["right"])) if on)
                parts.append(f'<tr class="{cls}"><td>{esc(g["name"])}</td><td class="pg-ctok">{esc(shown(g["text"]))}</td>'
                             f'<td>{_pct(g["prob"])}</td><td>{g["bits"]:.2f}</td></tr>')
            parts.append("</tbody></table>")
        parts.append(f'<p class="pg-hint">{esc(t("game_score_means", lang))}</p>')
        if v["board"]:
            parts.append(_board_html(t("game_board", lang), [(r["you"], t("game_board_row", lang, name=r["name"],
                                     mean=r["mean"], total=r["total"], n=r["steps"])) for r in v["board"]]))
    if not v["teacher"] or alone:
        parts.append(full)
    parts.append("</div>")
    return "".join(parts)


YOU = ' class="you"'  # the page's own player's line of a board


def _guesses_head(lang: str, *scores: str) -> str:
    """The title and head of a step's table of guesses: name, guess, then the `scores` columns (locale keys)."""
    columns = ("game_col_name", "game_col_guess", *scores)
    heads = "".join(f"<th>{html_lib.escape(t(c, lang))}</th>" for c in columns)
    return (f'<h4>{html_lib.escape(t("game_guesses", lang))}</h4><table class="pg-game-guesses"><thead><tr>{heads}'
            "</tr></thead><tbody>")


def _board_html(title: str, rows: list[tuple[bool, str]]) -> str:
    """A room's board: `title`, then one line per player (whether it is the page's own player, its words)."""
    items = "".join(f'<li{YOU if you else ""}>{html_lib.escape(text)}</li>' for you, text in rows)
    return f'<h4>{html_lib.escape(title)}</h4><ol class="pg-game-board">{items}</ol>'


def _pct(p: float) -> str:
    return "&lt;0.5%" if 0 < p < 0.005 else f"{100 * p:.1f}%"


def _layer_html(v: dict[str, Any], lang: str) -> str:
    """The panel of a "Which layer knows?" step, under the text: the question; after the reveal the answer, the
    token's rank after every layer, every guess scored and the room's board."""
    esc = html_lib.escape
    layers = v["layers"]

    def name(layer: int | None) -> str:
        return lens_guess.layer_name(layer, layers, lang)

    parts = [f'<p class="pg-game-question" data-layers="{layers}">'
             f'{esc(t("acts_lens_question", lang, token=shown(v["token"])))} {esc(t("game_lens_range", lang, never=layers + 1))}</p>']
    if not v["revealed"]:
        key = "game_lens_your_guess" if v["mine"] is not None else ("game_lens_wait" if v["teacher"] else "game_lens_pick")
        mine = name(v["mine"]) if v["mine"] is not None else ""
        parts.append(f'<p class="pg-game-note">{esc(t(key, lang, layer=mine))}</p>')
        return "".join(parts)
    answer = v["answer"]
    parts.append(f'<p class="pg-game-answer" data-answer="{"" if answer is None else answer}">'
                 f'{esc(t("game_lens_answer", lang, token=shown(v["token"]), layer=name(answer)))}</p>')
    parts.append('<ol class="pg-lens-ranks" start="0">')
    for at, rank in enumerate(v["ranks"]):
        cls = " ".join(c for c, on in (("top", rank == 1), ("first", at == answer)) if on)
        parts.append(f'<li class="{cls}" data-rank="{rank}" title="{esc(name(at))}"><b>{at}</b><span>#{rank}</span></li>')
    parts.append("</ol>")
    if v["guesses"]:
        parts.append(_guesses_head(lang, "game_lens_col_score"))
        for g in v["guesses"]:
            cls = " ".join(c for c, on in (("you", g["you"]), ("right", g["score"] == 0)) if on)
            parts.append(f'<tr class="{cls}" data-guess="{g["guess"]}" data-score="{g["score"]}"><td>{esc(g["name"])}</td>'
                         f'<td>{esc(name(g["guess"]))}</td><td>{g["score"]}</td></tr>')
        parts.append("</tbody></table>")
    parts.append(f'<p class="pg-hint">{esc(t("game_lens_score_means", lang))}</p>')
    if v["board"]:
        parts.append(_board_html(t("game_lens_board", lang), [(r["you"], t("game_lens_board_row", lang, name=r["name"],
                                 mean=r["mean"], right=r["right"], n=r["steps"])) for r in v["board"]]))
    return "".join(parts)


# The game's part of the Class tools page (its events: `playground.ui.class_game`): the teacher's row (hidden on a
# player's page, a game link), the link and its QR code (projector mode only), the room, the player's row.
TAB = Tab(tab="game", elem_id="game", section="teacher", order=20, view=None, layout=(
    Words("game_title_md", ("game_title",)),
    Words("game_intro_md", ("game_intro",), classes=("pg-hint",)),
    Row((Widget("game_at", "number", "game_at", "game-at", default=0, precision=0, min_width=90, bounded=False),
         Action("game_start", "press", "game_start", "game-start-btn", min_width=150),
         Action("game_reveal", "press", "game_reveal", "game-reveal-btn", min_width=90, primary=False, visible=False),
         Action("game_next", "press", "game_next", "game-next-btn", min_width=90, primary=False, visible=False),
         Action("game_lens", "press", "game_lens", "game-lens-btn", min_width=120, primary=False, visible=False)),
        elem_id="game-teacher", name="game_teacher", equal_height=True),
    Widget("game_link", "textbox", "game_link", "game-link", interactive=False, visible=False, copy=True),
    Out("game_qr", "html", "game-qr", plain=True),
    Out("game_view", "html", "game-view", plain=True, initial=lambda lang: html(None, lang)),
    Row((Widget("game_choice", "radio", "game_choice", "game-choice", choices=lambda lang: [], relabel=False, scale=3),
         Stack((Widget("game_name", "textbox", "game_name", "game-name", max_length=40),
                Action("game_guess", "press", "game_guess", "game-guess-btn")), min_width=160)),
        elem_id="game-player", name="game_player", visible=False, equal_height=True),
    Out("game_state", "state"),  # {"room", "version", "lang"}: the room this tab is in
    Out("game_timer", "timer", every=2.0)))  # the room's changes reach every page within two seconds
