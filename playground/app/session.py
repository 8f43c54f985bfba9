"""What the app remembers per visitor: the model they use, their language, their runs. No Gradio here.

Each browser tab is a session (Gradio's session hash). The session is the one source of what the tab shows: its
run history (the last `MAX_RUNS_PER_SESSION` runs, each knowing the run it came from), the current run (the newest,
or the one the visitor picked from the history), the selected step, the live attention view and the language; the
page's script and the panels read them from here. Everything else about a run lives in its `Run`. Runs are also
reachable by an unguessable token, which the page's own scripts use to ask for numbers (an attention row of another
layer): the token is only ever sent to the tab that made the run. It knows no experiment: what a run changed is its
own (`Run.origin`, `Run.changes`), put into words elsewhere (`playground.app.history`).
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from playground.app.run import Run
from playground.app.settings import UISettings, format_branches, plain, to_query

MAX_RUNS_PER_SESSION = 10  # the history a tab keeps (older runs leave it, and the history says so)


@dataclass
class LiveView:
    """What the live panels show: which attention (kind, layer, head or aggregate, colour scale)."""

    kind: str = ""  # "self" or "cross"; "": cross-attention for seq2seq models, self-attention otherwise
    layer: int = -1  # -1: the last layer
    head: str = "mean"  # a head index as text, "mean", "max" or "group:<kv head>"

    def fitted(self, config: Any, kind: str) -> LiveView:
        """This view as `config`'s model can show it: a head, KV group or layer the model lacks, or cross-attention
        on a decoder, falls back to the default (a tab that picked head 8 of SmolLM2 then ran tiny-lm's 4 heads)."""
        from playground.app.frames import head_choices  # frames names this class; imported where it is used

        head = self.head if self.head in head_choices(config.n_heads, config.n_kv_heads) else "mean"
        layer = self.layer if -1 <= self.layer < config.n_layers else -1
        view_kind = self.kind if self.kind == "self" or (self.kind == "cross" and kind == "seq2seq") else ""
        return LiveView(kind=view_kind, layer=layer, head=head)


@dataclass
class Session:
    """One browser tab."""

    key: str = "anonymous"  # Gradio's session hash: also the owner of this tab's uploads
    model: str | None = None
    dtype: str = "float32"
    lang: str = "en"
    runs: list[Run] = field(default_factory=list)  # the history, oldest first
    current_number: int | None = None  # the run on screen: the newest, or the one picked; None after a model switch
    selected_step: int | None = None  # None: follow the newest token
    select_order: int = 0  # the page's count of the newest selection taken (older ones arriving late are ignored)
    next_step: int | None = None  # the step the next run opens at (a fork keeps the step on screen)
    deep_tab: str = "inspector"
    lesson: str = "steps"
    # the jobs on a model (a tab's action with needs="model", e.g. SDPA measured): action name -> (model, result)
    measured: dict[str, tuple[str, Any]] = field(default_factory=dict)
    view: LiveView = field(default_factory=LiveView)
    stop: threading.Event | None = None  # the running generation's stop flag
    stopped_before: float = 0.0  # Stop pressed at this client time: tickets issued before it never start
    stops: int = 0  # how many times Stop was pressed: a press that began before the newest Stop never runs on
    stop_seen: tuple[str, int] | None = None  # Stop's run and how many of its tokens the page showed
    next_number: int = 1
    link: dict[str, str] | None = None  # the query parameters the tab was opened with
    link_settings: UISettings | None = None  # what they ask for (the run fields a link's own run replays)
    link_pending: bool = False  # the link names a prompt whose run has not started yet
    link_notes: list[str] = field(default_factory=list)  # what the link's load said: shown until the visitor acts
    # what Copy link was last pressed for: "run" (a run on screen), "settings" (nothing on screen: the left column's
    # link, which the box keeps and renews until a run comes), "" (never, or the run it showed went away)
    link_asked: str = ""
    notes: list[str] = field(default_factory=list)  # the notes box now (keyed): a language switch says them again
    seen: float = field(default_factory=time.monotonic)
    job_stop: threading.Event | None = None  # the stop flag of the tab's running job (a rerun, a sweep, a measure)

    @property
    def current(self) -> Run | None:
        """The run on screen (None before the first run and after a model switch)."""
        return self.run(self.current_number) if self.current_number is not None else None

    def run(self, number: int | None) -> Run | None:
        return next((r for r in self.runs if r.number == number), None)

    def add_run(self, run: Run) -> None:
        """`run` joins the history and becomes the current run, followed from its newest token (or opened at
        `next_step`); the oldest runs beyond the history's size leave it."""
        self.runs.append(run)
        del self.runs[:-MAX_RUNS_PER_SESSION]
        self.current_number = run.number
        self.selected_step, self.next_step = self.next_step, None
        for old in self.runs[:-1]:  # the lessons read the run on screen: the others' passes are made again on a pick
            old.forget_derived()

    def forget_oldest(self, run: Run) -> bool:
        """`run` leaves the history if it is the oldest there and neither on screen nor running (the memory budget:
        the history then says it left, as for runs beyond its size)."""
        if not self.runs or self.runs[0] is not run or run.running or run.number == self.current_number:
            return False
        del self.runs[0]
        return True

    @property
    def gone(self) -> int:
        """How many runs have left the history (the oldest: its numbers below the first kept)."""
        return self.runs[0].number - 1 if self.runs else self.next_number - 1

    def pick(self, number: int) -> Run | None:
        """The visitor picked run `number` from the history: it becomes the run on screen, from its newest token.
        None when the history no longer holds it."""
        run = self.run(number)
        if run is None:
            return None
        for other in self.runs:
            if other is not run:
                other.forget_derived()
        self.current_number = run.number
        self.selected_step = None
        return run

    def leave(self) -> None:
        """Nothing on screen (another model was picked: its runs stay in the history)."""
        self.current_number = None
        self.selected_step = None

    # --- work in progress -----------------------------------------------------------------------

    def begin_job(self) -> threading.Event:
        """A new job of this tab (a measurement, a sweep): its stop flag; a job still running stops first."""
        if self.job_stop is not None:
            self.job_stop.set()
        self.job_stop = threading.Event()
        return self.job_stop

    def end_job(self, stop: threading.Event) -> None:
        if self.job_stop is stop:
            self.job_stop = None

    def stop_all(self) -> None:
        """End the tab's generation and its job before their next step (a closed or expired tab, a model switch)."""
        for flag in (self.stop, self.job_stop):
            if flag is not None:
                flag.set()

    def press_stop(self) -> None:
        """The visitor pressed Stop: `stop_all`, and a press still starting (its model loading, its plan being
        made: no flag yet) sees the count go up when it registers its flag, and stops there."""
        self.stops += 1  # counted first: a press that registers its flag after this line sees the new count
        self.stop_all()

    @property
    def busy(self) -> bool:
        """A run is decoding or a job is running for this tab."""
        return any(run.running for run in self.runs) or self.job_stop is not None

    # --- what the tab shows ----------------------------------------------------------------------

    def opened_from(self, params: dict[str, str], notes: list[str] | None = None,
                    settings: UISettings | None = None) -> None:
        """The tab was opened with these query parameters (asking for `settings`); a link with a prompt runs by
        itself once. `notes`: what the page load said about the link (its runs show them too, until the visitor's
        next action)."""
        self.link = dict(params)
        self.link_settings = settings
        # a game link's run is the teacher's, and its players guess it: it is not played on their screens
        self.link_pending = bool(params.get("prompt", "").strip()) and not str(params.get("game", "")).strip()
        self.link_notes = list(notes or [])
        self.notes = list(self.link_notes)

    def link_names(self, name: str) -> bool:
        return self.link is not None and name in self.link

    def take_link_run(self) -> bool:
        """Whether the link's own run is still to start (true once: the next Generate is the visitor's)."""
        pending, self.link_pending = self.link_pending, False
        return pending

    def step(self) -> int | None:
        """The step on screen in the current run (None before its first token)."""
        run = self.current
        if run is None or not run.path:
            return None
        return run.step(self.selected_step)

    def select(self, token: str, step: Any, order: int | None = None) -> bool:
        """The visitor selected `step` of run `token`: taken when it is a step of the current run. `order`
        (the page's count of its selections) keeps the newest: two quick arrow presses are two requests
        that may arrive in either order, and the older one must not win."""
        run = self.current
        if run is None or run.token != token or isinstance(step, bool) or not isinstance(step, int):
            return False
        if not 0 <= step < len(run.path):
            return False
        if order is not None:
            if order < self.select_order:
                return False
            self.select_order = order
        self.selected_step = step
        return True

    def set_view(self, kind: str, layer: int, head: str) -> None:
        self.view = LiveView(kind=str(kind), layer=int(layer), head=str(head))

    # --- branches and links ----------------------------------------------------------------------

    def lineage(self, run: Run) -> list[tuple[int, list[int]]]:
        """The chain of branches that leads to `run` (what a link must replay), oldest first."""
        chain = []
        while run is not None and run.branch_of is not None:
            parent_number, step = run.branch_of
            chain.append((step, list(run.forced)))
            run = self.run(parent_number)
        return list(reversed(chain))

    def family(self, run: Run) -> list[Run]:
        """The runs of the history joined to `run` by their origins (the runs it came from, and every run that came
        from those), oldest first; a run pressed again with the same settings is a run of its own, not family."""
        def root(r: Run) -> int:
            seen = set()
            while r.origin is not None and r.origin not in seen and self.run(r.origin) is not None:
                seen.add(r.number)
                r = self.run(r.origin)
            return r.number

        top = root(run)
        return [r for r in self.runs if root(r) == top]

    def branches(self, run: Run, words: Callable[[Run], str] = lambda r: "") -> list[dict[str, Any]]:
        """The runs of `run`'s family, each split where it leaves `run`; `words(r)`: what `r` changed, in words."""
        family = self.family(run)
        if len(family) < 2:
            return []
        here = run.stream_ids
        out = []
        for r in family:
            texts, ids = r.stream_texts, r.stream_ids
            common = 0
            while common < min(len(ids), len(here)) and ids[common] == here[common]:
                common += 1
            if r is run and run.branch_of is not None:
                common = len(r.inherited)
            out.append({
                "number": r.number, "parent": r.branch_of[0] if r.branch_of else None,
                # where it leaves its parent, as every screen counts steps: its first forced token's step
                "step": r.step_number(-len(r.forced)) if r.branch_of else None, "current": r is run,
                "shared": "".join(texts[:common]), "diverges": "".join(texts[common:common + 1]),
                "rest": "".join(texts[common + 1:]), "edit": words(r),
            })
        return out

    def run_settings(self, run: Run) -> UISettings:
        """The settings that reproduce `run` exactly: the seed it used and the branches that led to it."""
        seed = run.cfg.seed if run.mode == "sample" else run.settings.seed
        return dataclasses.replace(run.settings, seed=seed, branches=format_branches(self.lineage(run)),
                                   lang=self.lang, game="")

    def link_query(self, widgets: UISettings | None = None) -> str:
        """The query string of a link to what the tab shows: the run on screen (with its seed, its branches and its
        experiments' settings), or with nothing on screen, a plain run of the widgets' settings."""
        run = self.current
        if run is not None:
            return to_query(self.run_settings(run))
        if widgets is None:
            return ""
        return to_query(dataclasses.replace(plain(widgets), branches="", game="", lang=self.lang))


# What runs keep (records and recorded arrays; a 256-head upload's 1,000-token run records 1 GB), per tab, per visitor
# (its tabs together: a class of 30 behind one school address shares its share) and for the server. Over a budget
# the oldest runs' arrays go first, then the oldest runs leave their history.
SESSION_KEPT_BYTES = 256 * 1024**2
VISITOR_KEPT_BYTES = 512 * 1024**2
SERVER_KEPT_BYTES = 1024**3
IDLE_SECONDS = 30 * 60  # a tab not heard from this long is forgotten (a closed tab whose unload never came)
SWEEP_SECONDS = 60.0  # idle tabs are looked for at most this often, on a visitor's call


class Sessions:
    """Every tab's Session, by Gradio session hash; and runs by token. Thread-safe.

    A session ends when its tab unloads, or after `idle_seconds` without a call from it while nothing of
    it runs (a script that opens sessions and never sends a heartbeat, a tab that crashed): `on_expire(key,
    session)` then frees what it held (its runs, its uploads), as the unload would."""

    def __init__(self, *, idle_seconds: float = IDLE_SECONDS,
                 on_expire: Callable[[str, Session], None] | None = None) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.idle_seconds = idle_seconds
        self.on_expire = on_expire
        self._swept = time.monotonic()
        self.visitor_of: Callable[[str], str] = lambda key: key  # a tab's visitor (the UI knows addresses)

    def get(self, key: str | None) -> Session:
        key = key or "anonymous"
        now = time.monotonic()
        if now - self._swept >= min(SWEEP_SECONDS, self.idle_seconds):
            self.expire(now)
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = Session(key=key)
            session.seen = now
            return session

    def enforce_memory(self, *, per_session: int = SESSION_KEPT_BYTES, per_visitor: int = VISITOR_KEPT_BYTES,
                       server: int = SERVER_KEPT_BYTES) -> int:
        """Keep what runs keep (their records and recorded arrays, `Run.kept_bytes`) within a budget per tab, per
        visitor (`visitor_of`: an address or an account) and for the server. The oldest runs' recorded arrays are
        freed first, a running run's too (all but its newest step's: it is called again as runs record, see
        `play`); where that is not enough, the oldest finished runs leave their tab's history (never the run on
        screen, never a running one). Returns the bytes kept."""
        with self._lock:
            tabs = list(self._sessions.items())
        runs = [(run, key, session) for key, session in tabs for run in session.runs]
        sizes = {id(run): run.kept_bytes() for run, _, _ in runs}
        visitor = {key: self.visitor_of(key) for key, _ in tabs}
        used: dict[str, int] = {}
        for run, key, _ in runs:
            for group in (key, "visitor:" + visitor[key], ""):
                used[group] = used.get(group, 0) + sizes[id(run)]

        def over(key: str) -> bool:
            return (used.get(key, 0) > per_session or used.get("visitor:" + visitor[key], 0) > per_visitor
                    or used.get("", 0) > server)

        def free(key: str, amount: int) -> None:
            for group in (key, "visitor:" + visitor[key], ""):
                used[group] -= amount

        oldest_first = sorted(runs, key=lambda r: r[0].started)
        for run, key, _ in oldest_first:
            if over(key) and run.capture_bytes():
                before = sizes[id(run)]
                run.drop_captures(keep_newest=run.running)
                sizes[id(run)] = run.kept_bytes()
                free(key, before - sizes[id(run)])
        for run, key, session in oldest_first:
            if over(key) and session.forget_oldest(run):
                free(key, sizes[id(run)])
        return used.get("", 0)

    def held(self) -> tuple[int, int, int, int]:
        """(tabs, runs, their recorded arrays' bytes, their records' bytes): what `enforce_memory` keeps within its
        budgets."""
        with self._lock:
            runs = [run for session in self._sessions.values() for run in session.runs]
            tabs = len(self._sessions)
        return tabs, len(runs), sum(run.capture_bytes() for run in runs), sum(run.record_bytes() for run in runs)

    def expire(self, now: float | None = None) -> list[str]:
        """Forget every session idle for `idle_seconds` with nothing running; the keys forgotten."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._swept = now
            idle = {k: s for k, s in self._sessions.items() if now - s.seen >= self.idle_seconds and not s.busy}
            for key in idle:
                del self._sessions[key]
        for key, session in idle.items():
            session.stop_all()
            if self.on_expire is not None:
                self.on_expire(key, session)
        return list(idle)

    def touch(self, key: str | None) -> bool:
        """A sign that `key`'s tab is open (its heartbeat): the session counts as heard from now. Never makes one."""
        with self._lock:
            session = self._sessions.get(key or "anonymous")
            if session is None:
                return False
            session.seen = time.monotonic()
            return True

    def has(self, key: str | None) -> bool:
        """Whether `key` is a page tab's session (a script calling generate_text never makes one)."""
        with self._lock:
            return (key or "anonymous") in self._sessions

    def drop(self, key: str | None) -> Session | None:
        with self._lock:
            return self._sessions.pop(key or "anonymous", None)

    def all(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    def run_by_token(self, token: str) -> Run | None:
        if not isinstance(token, str) or len(token) < 16:
            return None
        with self._lock:
            for session in self._sessions.values():
                for run in session.runs:
                    if secrets.compare_digest(run.token, token):
                        return run
        return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


def new_token() -> str:
    return secrets.token_urlsafe(18)
