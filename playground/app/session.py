"""What the app remembers per visitor: the model they use, their language, their runs. No Gradio here.

Each browser tab is a session (Gradio's session hash). The session is the one source of what the
tab shows: the current run, the selected step, the live attention view and the language; the page's
script and the panels read them from here. It keeps its last few runs so a branch can be compared
with the run it came from; everything else about a run lives in its `Run`. Runs are also reachable by an unguessable token, which the page's
own scripts use to ask for numbers (an attention row of another layer): the token is only ever sent
to the tab that made the run.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from playground.app.kvlab import policy_words
from playground.app.lab import describe_edits
from playground.app.run import Run
from playground.app.settings import KV_FIELDS, UISettings, format_branches, has_precision, to_query
from playground.app.speculative_lab import drafter_words
from playground.app.words import t

MAX_RUNS_PER_SESSION = 4  # the current run and the branches it can be compared with


@dataclass
class LiveView:
    """What the live panels show: which attention (kind, layer, head or aggregate, colour scale)."""

    kind: str = ""  # "self" or "cross"; "": cross-attention for seq2seq models, self-attention otherwise
    layer: int = -1  # -1: the last layer
    head: str = "mean"  # a head index as text, "mean", "max" or "group:<kv head>"


@dataclass
class Session:
    """One browser tab."""

    key: str = "anonymous"  # Gradio's session hash: also the owner of this tab's uploads
    model: str | None = None
    dtype: str = "float32"
    lang: str = "en"
    runs: list[Run] = field(default_factory=list)
    selected_step: int | None = None  # None: follow the newest token
    select_order: int = 0  # the page's count of the newest selection taken (older ones arriving late are ignored)
    next_step: int | None = None  # the step the next run opens at (a fork keeps the step on screen)
    deep_tab: str = "inspector"
    lesson: str = "steps"
    sdpa: dict[str, Any] | None = None  # the SDPA-vs-explicit measurement of the session's model
    view: LiveView = field(default_factory=LiveView)
    stop: threading.Event | None = None  # the running generation's stop flag
    stopped_before: float = 0.0  # Stop pressed at this client time: tickets issued before it never start
    stops: int = 0  # how many times Stop was pressed: a press that began before the newest Stop never runs on
    stop_seen: tuple[str, int] | None = None  # Stop's run and how many of its tokens the page showed
    next_number: int = 1
    link: dict[str, str] | None = None  # the query parameters the tab was opened with
    link_pending: bool = False  # the link names a prompt whose run has not started yet
    link_notes: list[str] = field(default_factory=list)  # what the link's load said: shown until the visitor acts
    notes: list[str] = field(default_factory=list)  # the notes box now (keyed): a language switch says them again
    seen: float = field(default_factory=time.monotonic)
    job_stop: threading.Event | None = None  # the stop flag of the tab's running job (a rerun, a sweep, a measure)

    @property
    def current(self) -> Run | None:
        return self.runs[-1] if self.runs else None

    def run(self, number: int) -> Run | None:
        return next((r for r in self.runs if r.number == number), None)

    def add_run(self, run: Run) -> None:
        """`run` becomes the current run, followed from its newest token (or opened at `next_step`)."""
        self.runs.append(run)
        del self.runs[:-MAX_RUNS_PER_SESSION]
        self.selected_step, self.next_step = self.next_step, None
        for old in self.runs[:-1]:  # the lessons read only the current run: free the rest's big captures
            old.forget_big_captures()

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
        run = self.current
        return (run is not None and run.running) or self.job_stop is not None

    # --- what the tab shows ----------------------------------------------------------------------

    def opened_from(self, params: dict[str, str], notes: list[str] | None = None) -> None:
        """The tab was opened with these query parameters; a link with a prompt runs by itself once. `notes`:
        what the page load said about the link (its runs show them too, until the visitor's next action)."""
        self.link = dict(params)
        self.link_pending = bool(params.get("prompt", "").strip())
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

    def branches(self, run: Run) -> list[dict[str, Any]]:
        """The session's runs of the same prompt and model, each split where it leaves `run`."""
        family = [r for r in self.runs if r.prompt_ids == run.prompt_ids and r.settings.model == run.settings.model
                  and r.settings.dtype == run.settings.dtype]
        parents = {r.branch_of[0] for r in family if r.branch_of}
        family = [r for i, r in enumerate(family)  # a run repeated by a later one (Generate again) shows once
                  if r is run or r.number in parents or all(  # (an edited run with the same text is not a repeat)
                      (r.stream_ids, _variant(r.settings)) != (later.stream_ids, _variant(later.settings))
                      for later in family[i + 1:])]
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
                "rest": "".join(texts[common + 1:]),
                "edit": _edit_words(r.settings, self.lang),
            })
        return out

    def run_settings(self, run: Run) -> UISettings:
        """The settings that reproduce `run` exactly: the seed it used and the branches that led to it."""
        seed = run.cfg.seed if run.mode == "sample" else run.settings.seed
        return dataclasses.replace(run.settings, seed=seed, branches=format_branches(self.lineage(run)),
                                   lang=self.lang)

    def link_query(self, widgets: UISettings) -> str:
        """The query string of a link to what the tab shows: the current run when the widgets still
        describe it (with its seed and branches), else the widgets' settings (no branches)."""
        run = self.current
        if run is not None and not run.running and same_request(run.settings, widgets):
            return to_query(dataclasses.replace(self.run_settings(run), lang=widgets.lang))
        return to_query(dataclasses.replace(widgets, branches="", edits=""))


def _variant(settings: UISettings) -> tuple[str, ...]:
    """What makes a run of the same request another experiment: the lab's edits and its KV-cache policy."""
    return (settings.edits, settings.weight_precision, settings.draft, str(settings.draft_tokens),
            *(str(getattr(settings, name)) for name in KV_FIELDS))


def _edit_words(settings: UISettings, lang: str) -> str:
    """The causal lab's edits and the KV lab's cache policy of a run, in words ('' for a plain run)."""
    words = [describe_edits(settings.edits, lang) if settings.edits else "", policy_words(settings, lang),
             t("precision_words", lang, precision=settings.weight_precision) if has_precision(settings) else "",
             t("spec_words", lang, drafter=drafter_words(settings.draft, lang)) if settings.draft else ""]
    return "; ".join(w for w in words if w)


# Settings that change what a link shows without changing the tokens (the seed is compared apart).
_PRESENTATION = ("lang", "pace_ms", "branches", "seed", "edits")


def same_request(a: UISettings, b: UISettings) -> bool:
    """Whether two settings ask for the same run; a blank seed matches any seed (a drawn one)."""
    for f in dataclasses.fields(UISettings):
        if f.name not in _PRESENTATION and getattr(a, f.name) != getattr(b, f.name):
            return False
    return b.seed is None or a.seed == b.seed or a.mode != "sample"


SESSION_CAPTURE_BYTES = 256 * 1024**2  # a tab's runs' recorded arrays (a 256-head upload's 1,000-token run: 1 GB)
SERVER_CAPTURE_BYTES = 1024**3  # every tab's together; the oldest runs' arrays go first
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

    def enforce_memory(self, *, per_session: int = SESSION_CAPTURE_BYTES, server: int = SERVER_CAPTURE_BYTES) -> int:
        """Keep the finished runs' recorded arrays within a budget per tab and for the server: the oldest
        runs' arrays are freed first (a running run's never). Returns the bytes kept."""
        with self._lock:
            runs = [(run, key) for key, session in self._sessions.items() for run in session.runs]
        sizes = {id(run): run.capture_bytes() for run, _ in runs}
        by_tab: dict[str, int] = {}
        for run, key in runs:
            by_tab[key] = by_tab.get(key, 0) + sizes[id(run)]
        total = sum(by_tab.values())
        for run, key in sorted(runs, key=lambda rk: rk[0].started):  # oldest first
            if run.running or not sizes[id(run)]:
                continue
            if by_tab[key] > per_session or total > server:
                run.drop_captures()
                by_tab[key] -= sizes[id(run)]
                total -= sizes[id(run)]
        return total

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
