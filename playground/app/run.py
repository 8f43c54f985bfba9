"""One generation as the app keeps it: the one copy of its path, candidates, captures, caches and timings.

A `Run` is built once from the engine's events (`add_event`, then `finish`) and answers every
question the panels ask of it: the step on screen, an attention row of any layer, the run as the
analyses take it (`as_result`), the labels of its tokens. Nothing else keeps a second copy of the run.
No Gradio, no threads: the caller decides where the model work runs.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from playground.app import frames
from playground.app.numbers import numbers_note
from playground.generation import GenerationConfig, GenerationResult, Hypothesis, StepEvent, TokenStep, token_path
from playground.generation.budget import check_full_attention
from playground.generation.engine import final_hypothesis
from playground.generation.events import held_bytes
from playground.generation.stepper import full_attention
from playground.steps import step_number

if TYPE_CHECKING:
    from playground.app.settings import UISettings

MAX_CACHED_LAYERS = 2  # whole-run attention maps kept per run: every kind of this many layers


@dataclass
class Run:
    """One generation: its settings, the engine's events and what the panels read from them."""

    token: str  # unguessable id the page uses to ask for this run's numbers
    number: int  # 1, 2, 3... within the session (shown to people)
    owner: str  # the session that made the run (its model may be that visitor's own upload)
    settings: UISettings
    cfg: GenerationConfig  # clamped, as run (its seed is the one used)
    kind: str  # "decoder" or "seq2seq"
    prompt_ids: list[int]  # decoder prompt, or seq2seq source
    prompt_texts: list[str]
    prefix_ids: list[int]  # decoder stream start: the prompt (decoder) or the decoder start token(s), + forced
    live_layer: int  # the layer whose attention is recorded at every step
    notes: list[str] = field(default_factory=list)  # keyed notes (playground.notes.Note), rendered at the edge
    events: list[StepEvent] = field(default_factory=list)
    finish_reason: str | None = None  # None while running; "eos", "length", "stop_string", "stopped", "error"
    error: str | None = None
    # Where it came from, set when it is made and never found again by comparing settings: the run it forked from
    # (a branch's parent, a lab fork's run on screen, a link's plain run), what made it ("" for a plain run,
    # "branch", or the experiment's name) and the settings it changed from its origin.
    origin: int | None = None
    experiment: str = ""
    changes: dict[str, Any] = field(default_factory=dict)
    about: list[str] = field(default_factory=list)  # what it changed from its origin, as keyed notes (its label)
    results: dict[str, Any] = field(default_factory=dict)  # what was measured on it on request (a head sweep), by name
    branch_of: tuple[int, int] | None = None  # (run number, step) this run continues from
    inherited: list[list[Any]] = field(default_factory=list)  # [text, id, p] taken over from the run branched from
    forced: list[int] = field(default_factory=list)  # tokens placed by hand at the branch point
    forced_texts: list[str] = field(default_factory=list)
    prefix_texts: list[str] = field(default_factory=list)  # the decoder start token(s) of a seq2seq run
    started: float = field(default_factory=time.monotonic)
    path: list[TokenStep] = field(default_factory=list)  # the displayed sequence, token by token
    final: Hypothesis | None = None  # beam search: the winning hypothesis
    analysis: Any = None  # the lessons' RunCache (one whole-sequence pass, shared by step changes)
    maps: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # layer -> kind -> (h, T, S), whole run
    head_stats: dict[str, Any] = field(default_factory=dict)  # kind -> per-layer head summary (small), whole run
    captures_dropped: bool = False  # its recorded arrays were freed under the memory budget (recomputed when asked)
    numbers_noted: bool = False  # a step's numbers could not be right, and a note says so (once per run)
    event_bytes: int = 0  # what its events keep besides their captures, summed as they come (`record_bytes`)
    fixed_bytes: int | None = None  # what its prompt and branch point keep (set once, when first counted)
    tally: _Tally | None = field(default=None, repr=False, compare=False)  # its recorded arrays counted so far

    # --- what it is ------------------------------------------------------------------------------

    @property
    def beam(self) -> bool:
        return self.cfg.num_beams > 1

    @property
    def mode(self) -> str:
        return "beam" if self.beam else ("sample" if self.cfg.do_sample else "greedy")

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

    @property
    def stream_texts(self) -> list[str]:
        return [x[0] for x in self.inherited] + self.forced_texts + [s.token_text for s in self.path]

    # --- built from the engine's events ----------------------------------------------------------

    @property
    def opening(self) -> int:
        """How many of the prompt's tokens the chat template wrote before the visitor's typed text (its system
        message and role markers), which a switch folds away; 0 without chat or where the typed text is not found."""
        typed = self.settings.prompt.strip() if self.settings.chat and self.kind == "decoder" else ""
        at = "".join(self.prompt_texts).rfind(typed) if typed else -1
        if at <= 0:
            return 0
        ends = np.cumsum([len(text) for text in self.prompt_texts])
        return int(np.searchsorted(ends, at, side="right"))

    def add_event(self, event: StepEvent, lm: Any) -> None:
        """Take the engine's next event and bring the path up to date."""
        self.events.append(event)
        self.event_bytes += event.record_bytes(self.events[-2] if len(self.events) > 1 else None)
        if not self.numbers_noted:
            found = numbers_note(event, lm.config.vocab_size, not self.cfg.do_sample)
            if found:
                self.notes.append(found)
                self.numbers_noted = True
        if not self.beam:
            self.path.append(token_path(lm, [event], None)[0])
            return
        beams = event.beams or []
        best = next((b for b in beams if b.tokens is event.tokens), None)  # the engine's one node for both
        best = best or next((b for b in beams if b.token_ids == event.token_ids), None)  # events that were pickled
        if best is not None:
            self._follow(lm, best)

    def finish(self, lm: Any, error: str | None = None) -> None:
        """The engine is done (or failed, or was stopped): record why, and the beam search's winner."""
        last = self.events[-1] if self.events else None
        self.error = error
        if error:
            self.finish_reason = "error"
        elif last is not None and last.finished:
            self.finish_reason = last.finish_reason
        else:
            self.finish_reason = "stopped"
        if self.beam and last is not None and last.finished and last.beams:
            self.final = final_hypothesis(last)
            self._follow(lm, self.final)
        if self.beam:
            self._keep_the_path_only()

    def _keep_the_path_only(self) -> None:
        """A beam search that ended (or was stopped) shows its path's candidates and probabilities only (`path`, the
        winner's or the best so far): what every running beam kept while any of them could still win (their
        candidates, the continuations kept from them) goes. An event's candidates become its path step's, so each
        step keeps one table, shared by the event and the path."""
        for t, event in enumerate(self.events):
            event.candidates = self.path[t].candidates if t < len(self.path) else None
            if event.beam_captures is not None:  # what stays is what it recorded (`capture_bytes`)
                rows = {k: v for k, v in event.beam_captures.items() if k in ("attention", "residual") and v is not None}
                event.beam_captures = rows or None
        self._count_events()

    def _follow(self, lm: Any, hypothesis: Hypothesis) -> None:
        """Beam search: the displayed path becomes `hypothesis`'s; the shared beginning is kept as it is."""
        path = token_path(lm, self.events, hypothesis)
        keep = 0
        while keep < min(len(path), len(self.path)) and (path[keep].token_id, path[keep].source_beam) == (
                self.path[keep].token_id, self.path[keep].source_beam):
            keep += 1
        self.path[keep:] = path[keep:]

    # --- what the page receives --------------------------------------------------------------------

    def compact_from(self, start: int = 0) -> list[list[Any]]:
        """The page's entries (`frames.compact_step`) of the path from `start` on, made when sent: a run keeps its
        events and path once, never a second copy of them in the page's form."""
        stages = frames.stage_names(self.events)
        entries = []
        for step in self.path[start:]:
            event = self.events[step.step]
            kind = "" if self.beam else (event.speculation or {}).get("kind", "")
            entries.append(frames.compact_step(step, event.cache, stages,
                                               kind if kind in ("accepted", "rejected", "bonus") else ""))
        return entries

    @property
    def compact(self) -> list[list[Any]]:
        """Every entry of the path as the page receives it."""
        return self.compact_from(0)

    # --- queries ---------------------------------------------------------------------------------

    def step_number(self, index: int) -> int:
        """The step people read for the 0-based `index` into `path` / `events`: step 1 is a run's first generated
        token (index 0, the prefill pass that also reads the prompt). A branch does not restart the count: its
        inherited and forced tokens come first, so a branch from step 6 continues at step 7. The one
        numbering of every screen (live screen, inspector, KV chart, lab, a link's branches)."""
        return step_number(index, self.steps_before)

    @property
    def steps_before(self) -> int:
        """Tokens this run continues after: a branch's inherited and forced ones (0 for a plain run)."""
        return len(self.inherited) + len(self.forced)

    def step(self, selected: int | None) -> int:
        """The step on screen: the selected one, or the newest token; always inside the path."""
        n = len(self.path)
        step = selected if selected is not None else n - 1
        return int(min(max(step, 0), max(n - 1, 0)))

    def as_result(self) -> GenerationResult:
        """The run as the analyses take it: what the engine's generate_all would have returned."""
        last = self.events[-1]
        final = self.final or Hypothesis(self.generated_ids, last.text, 0.0, last.finish_reason == "eos")
        return GenerationResult(
            token_ids=self.generated_ids, text=last.text, sequences=[final], prompt_ids=list(self.prompt_ids),
            cache=dict(last.cache), timing=dict(last.timing), finish_reason=self.finish_reason, steps=self.events,
            notes=list(self.notes), path=self.path, prompt_attention=self.events[0].prompt_attention,
            decoder_prefix=list(self.prefix_ids),
        )

    def analysis_cache(self, lm: Any) -> Any:
        """The lessons' shared whole-sequence pass over this (finished) run, made once."""
        from playground import analysis  # the analyses are needed only once a lesson is drawn

        result = self.as_result()
        if self.analysis is None or self.analysis.result.token_ids != result.token_ids:
            self.analysis = analysis.RunCache(lm, result)
        self.analysis.result = result
        return self.analysis

    def attention_maps(self, lm: Any, kind: str, layer: int) -> np.ndarray:
        """(h, T, S) attention of one layer over the whole (finished) run, through the engine; the last
        MAX_CACHED_LAYERS layers asked for are kept. Raises BudgetError over the memory budget."""
        if layer not in self.maps:
            check_full_attention(lm, len(self.prompt_ids), len(self.stream_ids), [layer])
            computed = full_attention(lm, self.prompt_ids, self.stream_ids, layers=[layer])
            while len(self.maps) >= MAX_CACHED_LAYERS:
                self.maps.pop(next(iter(self.maps)))
            self.maps[layer] = {k: stacked[0] for k, stacked in computed.items()}
        else:
            self.maps[layer] = self.maps.pop(layer)  # the newest asked for goes last
        return self.maps[layer][kind]

    def attention_row(self, lm: Any, kind: str, layer: int, step: int) -> np.ndarray:
        """(h, S) attention of `step`'s query for one layer: what was recorded while choosing the token,
        or else computed through the engine (cached for a finished run, up to the step while running)."""
        rows = frames.recorded_row(self.path[step], kind, layer)
        if rows is not None:
            return rows
        query = len(self.prefix_ids) - 1 + step
        if self.running:
            upto = self.stream_ids[: len(self.inherited) + len(self.forced) + step]
            check_full_attention(lm, len(self.prompt_ids), len(upto), [layer])
            maps = full_attention(lm, self.prompt_ids, upto, layers=[layer])[kind][0]
        else:
            maps = self.attention_maps(lm, kind, layer)
        keys = query + 1 if kind == "self" else maps.shape[-1]
        return maps[:, query, :keys]

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(query labels, key labels) of an attention map of `kind` over the whole run."""
        if self.kind == "decoder":
            toks = self.prompt_texts + self.stream_texts
            return toks, toks
        dec = self.prefix_texts + self.stream_texts
        return {"self": (dec, dec), "cross": (dec, self.prompt_texts), "encoder": (self.prompt_texts, self.prompt_texts)}[kind]

    def cut_to(self, steps: int) -> None:
        """Keep the first `steps` events and path entries (a Stop ends the run where the page showed it)."""
        del self.path[steps:], self.events[steps:]
        self._count_events()

    def _count_events(self) -> None:
        """`event_bytes` again, from every event (after some of them changed or left)."""
        self.event_bytes = sum(e.record_bytes(b) for e, b in zip(self.events, [None, *self.events[:-1]]))
        self.tally = None  # some recorded arrays may have left with them: counted again when asked

    def record_bytes(self) -> int:
        """Bytes the run keeps besides its recorded arrays (`capture_bytes`): its events (each a node of the shared
        token chain, its stats, clock and candidates' table), its path, its prompt and notes. What the memory budget
        and the holdings line count, with the captures, as the run's whole cost."""
        if self.fixed_bytes is None:
            self.fixed_bytes = sys.getsizeof(self) + held_bytes((
                self.token, self.prompt_ids, self.prompt_texts, self.prefix_ids, self.inherited, self.forced,
                self.forced_texts, self.prefix_texts))
        path = sys.getsizeof(self.path)
        if self.path:  # every entry is one slotted step and its capture (the budget asks after every run: O(1))
            path += len(self.path) * (sys.getsizeof(self.path[0]) + sys.getsizeof(self.path[0].capture))
        if self.beam:  # the path's own probabilities, and its texts and candidates where not its event's
            path += sum(sys.getsizeof(s.prob) + self._unshared(s.token_text, e.token_text)
                        + self._unshared(s.candidates, e.candidates) for s, e in zip(self.path, self.events))
        small = held_bytes((self.notes, self.changes, self.about, self.head_stats, self.final))
        return self.fixed_bytes + self.event_bytes + sys.getsizeof(self.events) + path + small

    @staticmethod
    def _unshared(value: Any, event_keeps: Any) -> int:
        """`value`'s own size (a candidates' object without its table, which an event keeps), unless it is the event's."""
        return 0 if value is event_keeps or value is None else sys.getsizeof(value)

    def kept_bytes(self) -> int:
        """Everything the run keeps: its record and its recorded arrays."""
        return self.record_bytes() + self.capture_bytes()

    def capture_bytes(self) -> int:
        """Bytes of what the run keeps beyond its path: recorded attention rows and residuals (each array
        counted once, however many events and steps share it), whole-run maps, the lessons' pass."""
        total = self.recorded_bytes()
        for layer in list(self.maps.values()):
            total += sum(a.nbytes for a in layer.values())
        return total + (self.analysis.budget_bytes if self.analysis is not None else 0)  # its internals' cap

    def recorded_bytes(self) -> int:
        """Bytes of the arrays its events recorded, each counted once (its path's are the same arrays, or a beam's
        rows of them: views). Counted as they come: the memory budget asks after every few MiB a run records, for
        every run of the server, so a finished run answers at once and a running one counts its new events only."""
        tally = self.tally
        if tally is None:
            tally = self.tally = _Tally()
        events = self.events
        upto = len(events)
        for e in events[tally.steps:upto]:
            beams = e.beam_captures or {}  # its candidates and kept continuations are the record's (`record_bytes`)
            arrays = _arrays((e.attention, e.residual, e.prompt_attention, beams.get("attention"), beams.get("residual")))
            tally.bytes += sum(a.nbytes for a in arrays.values())
        tally.steps = max(tally.steps, upto)
        return tally.bytes

    def drop_captures(self, keep_newest: bool = False) -> None:
        """Free every recorded array over the memory budget: an attention row asked for later is computed
        through the engine (`attention_row`), the lessons' pass is made again; the page's own copy of
        the path (`compact`) stays. `keep_newest`: a running run keeps its newest step's, which its next frame
        draws (the steps it records next are counted and freed in turn)."""
        self.forget_derived()
        events, path = list(self.events), list(self.path)
        if keep_newest and events:  # step t's path entry holds its event's arrays (or views of them)
            events, path = events[:-1], path[: len(events) - 1]
        for e in events:
            e.attention = e.residual = e.prompt_attention = None
            if e.beam_captures is not None:  # the beams' rows go; their candidates and kept continuations stay
                e.beam_captures = {k: v for k, v in e.beam_captures.items()
                                   if k in ("candidates", "kept") and v is not None} or None
        for step in path:
            step.capture.attention = step.capture.residual = None
        self.captures_dropped = True
        self.tally = None

    def forget_derived(self) -> None:
        """A run that is not on screen: free what is made again when it is (the lessons' pass, the whole-run maps).
        What it recorded stays, for the history's pick (the memory budget frees that: `drop_captures`)."""
        self.analysis = None
        self.maps.clear()


@dataclass
class _Tally:
    """A run's recorded arrays counted so far: its first `steps` steps hold `bytes`."""

    steps: int = 0
    bytes: int = 0


def _arrays(value: Any, found: dict[int, np.ndarray] | None = None) -> dict[int, np.ndarray]:
    """The numpy arrays inside nested dicts, lists and tuples, by id (one entry for an array held twice)."""
    found = {} if found is None else found
    if isinstance(value, np.ndarray):
        found[id(value)] = value
    elif isinstance(value, dict):
        for v in value.values():
            _arrays(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _arrays(v, found)
    return found
