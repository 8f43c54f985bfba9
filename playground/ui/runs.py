"""What the app remembers per visitor: the model they use, their language, their runs. No Gradio here.

Each browser tab is a session (Gradio's session hash). A session keeps its last few runs so a branch
can be compared with the run it came from; everything else about a run (the events, what was
recorded) lives in its `RunState`. Runs are also reachable by an unguessable token, which the page's
own scripts use to ask for numbers (an attention row of another layer): the token is only ever sent
to the tab that made the run.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from playground.generation import GenerationConfig, Hypothesis, StepEvent, TokenStep
from playground.ui.settings import UISettings

MAX_RUNS_PER_SESSION = 4  # the current run and the branches it can be compared with


@dataclass
class LiveView:
    """What the live panels show: which attention (kind, layer, head or aggregate, colour scale)."""

    kind: str = ""  # "self" or "cross"; "": cross-attention for seq2seq models, self-attention otherwise
    layer: int = -1  # -1: the last layer
    head: str = "mean"  # a head index as text, "mean", "max" or "group:<kv head>"


@dataclass
class RunState:
    """One generation: its settings, the engine's events and what the page derives from them."""

    token: str  # unguessable id the page uses to ask for this run's numbers
    number: int  # 1, 2, 3... within the session (shown to people)
    owner: str  # the session that made the run (its model may be that visitor's own upload)
    settings: UISettings
    cfg: GenerationConfig  # clamped, as run
    kind: str  # "decoder" or "seq2seq"
    prompt_ids: list[int]  # decoder prompt, or seq2seq source
    prompt_texts: list[str]
    prefix_ids: list[int]  # decoder stream start: the prompt (decoder) or the decoder start token(s)
    live_layer: int  # the layer whose attention is recorded at every step
    notes: list[str] = field(default_factory=list)
    events: list[StepEvent] = field(default_factory=list)
    finish_reason: str | None = None  # None while running; "eos", "length", "stop_string", "stopped", "error"
    error: str | None = None
    branch_of: tuple[int, int] | None = None  # (run number, step) this run continues from
    inherited: list[list[Any]] = field(default_factory=list)  # [text, id, p] taken over from the run branched from
    forced: list[int] = field(default_factory=list)  # tokens placed by hand at the branch point
    forced_texts: list[str] = field(default_factory=list)
    prefix_texts: list[str] = field(default_factory=list)  # the decoder start token(s) of a seq2seq run
    started: float = field(default_factory=time.monotonic)
    path: list[TokenStep] = field(default_factory=list)  # the displayed sequence, token by token
    final: Hypothesis | None = None  # beam search: the winning hypothesis
    maps: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)  # (kind, layer) -> (h, T, S), whole run
    compact: list[Any] = field(default_factory=list)  # per path entry, what the page receives (see frames)
    analysis: Any = None  # the lessons' RunCache (one whole-sequence pass, shared by step changes)
    cache_timing: dict[str, Any] | None = None  # the KV lesson's timed comparison, when measured

    @property
    def beam(self) -> bool:
        return self.cfg.num_beams > 1

    @property
    def running(self) -> bool:
        return self.finish_reason is None

    @property
    def generated_ids(self) -> list[int]:
        return [p.token_id for p in self.path]

    @property
    def stream_ids(self) -> list[int]:
        """Everything after the prompt: inherited tokens, the forced ones, then what this run generated."""
        return [int(i) for _, i, _ in self.inherited] + self.forced + self.generated_ids


@dataclass
class Session:
    """One browser tab."""

    key: str = "anonymous"  # Gradio's session hash: also the owner of this tab's uploads
    model: str | None = None
    dtype: str = "float32"
    lang: str = "en"
    runs: list[RunState] = field(default_factory=list)
    selected_step: int | None = None  # None: follow the newest token
    deep_tab: str = "inspector"
    lesson: str = "steps"
    sdpa: dict[str, Any] | None = None  # the SDPA-vs-explicit measurement of the session's model
    view: LiveView = field(default_factory=LiveView)
    stop: threading.Event | None = None  # the running generation's stop flag
    stopped_before: float = 0.0  # Stop pressed at this client time: tickets issued before it never start
    next_number: int = 1
    link_prompt: bool = False  # the page was opened from a link that names a prompt: keep it on the first load
    seen: float = field(default_factory=time.monotonic)

    @property
    def current(self) -> RunState | None:
        return self.runs[-1] if self.runs else None

    def run(self, number: int) -> RunState | None:
        return next((r for r in self.runs if r.number == number), None)

    def add_run(self, run: RunState) -> None:
        self.runs.append(run)
        del self.runs[:-MAX_RUNS_PER_SESSION]
        for old in self.runs[:-1]:  # the lessons read only the current run: free the rest's big captures
            old.analysis = None
            for step in old.path:
                step.capture.residual = None


class Sessions:
    """Every tab's Session, by Gradio session hash; and runs by token. Thread-safe."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def get(self, key: str | None) -> Session:
        key = key or "anonymous"
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = Session(key=key)
            session.seen = time.monotonic()
            return session

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

    def run_by_token(self, token: str) -> RunState | None:
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
