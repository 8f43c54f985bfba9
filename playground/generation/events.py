"""What the engine streams (`StepEvent`) and what `generate_all` returns (`GenerationResult`).

Everything here is plain Python / numpy, never torch tensors, so the UI can keep events in
`gr.State` and `to_dict()` is always JSON-serialisable.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from playground.generation.tokens import Tokens


def held_bytes(value: Any, skip: frozenset[int] = frozenset()) -> int:
    """Bytes `value` keeps, with everything it holds, each object once (`sys.getsizeof`, numpy arrays' data included):
    what a run's record costs in memory. Objects whose id is in `skip` are not counted (shared with a neighbour that
    counted them). A `Tokens` node counts alone: the nodes before it are counted with the events that made them."""
    seen: set[int] = set(skip)
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, bool) or id(item) in seen:
            continue
        if isinstance(item, int) and -5 <= item <= 256:  # CPython's shared small ints
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, np.ndarray):
            if item.base is not None:
                total += item.nbytes
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, Tokens):
            stack.append(item.token_id)
        elif hasattr(type(item), "__slots__") and not isinstance(item, (str, bytes, int, float)):
            stack.extend(getattr(item, name) for name in _slot_names(type(item)) if hasattr(item, name))
        elif hasattr(item, "__dict__") and not callable(item):
            stack.append(vars(item))
    return total


def _slot_names(cls: type) -> list[str]:
    return [name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ())]


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value


@dataclass
class Candidate:
    """One next-token candidate and its probability after each processor stage.

    `stages` maps stage names ("raw", "repetition_penalty", "temperature", "top_k", "top_p", "min_p")
    to probabilities; `removed_by` names the stage that filtered the token out (None: kept).
    """

    token_id: int
    text: str
    logit: float
    prob_raw: float
    prob_after_penalty: float
    prob_after_temperature: float
    prob_final: float
    removed_by: str | None = None
    chosen: bool = False
    stages: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "token_id": self.token_id, "text": self.text, "logit": self.logit, "prob_raw": self.prob_raw,
            "prob_after_penalty": self.prob_after_penalty, "prob_after_temperature": self.prob_after_temperature,
            "prob_final": self.prob_final, "removed_by": self.removed_by, "chosen": self.chosen,
            "stages": dict(self.stages),
        }


_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def shared_names(names: Sequence[str]) -> tuple[str, ...]:
    """One tuple per list of stage names for the whole process (a run's steps all name the same stages)."""
    key = tuple(names)
    return _NAMES.setdefault(key, key) if len(_NAMES) < 256 else key


class Candidates(Sequence[Candidate]):
    """One step's candidates as one table: the page shows a few per token for every token of a run, so each step
    keeps one small float64 array and one string instead of a `Candidate` object (and a dict of stages) per row.

    table (n, 3 + stages): token id, raw logit, the index in `names` of the stage that filtered the row out (-1:
    kept), then the probability after each stage of `names`; `texts` the rows' token texts one after another, row j
    ending at `ends[j]`; `chosen`: the row chosen, -1 for none. Rows read back as `Candidate`s, made when asked.
    float64 holds every token id and every float the engine gave exactly.
    """

    __slots__ = ("names", "table", "texts", "ends", "chosen")

    def __init__(self, names: tuple[str, ...], table: np.ndarray, texts: str, ends: tuple[int, ...],
                 chosen: int) -> None:
        self.names, self.table, self.texts, self.ends, self.chosen = names, table, texts, ends, chosen

    @classmethod
    def of(cls, names: Sequence[str], ids: Sequence[int], raw_logits: Sequence[float], removed: Sequence[int],
           probs: np.ndarray, texts: Sequence[str], chosen: int) -> Candidates:
        """Rows of `ids` with their raw logits, removing stages (-1: none) and probabilities (stages, n)."""
        table = np.empty((len(ids), 3 + len(names)), dtype=np.float64)
        table[:, 0], table[:, 1], table[:, 2] = ids, raw_logits, removed
        table[:, 3:] = np.asarray(probs, dtype=np.float64).reshape(len(names), len(ids)).T
        ends, end = [], 0
        for text in texts:
            end += len(text)
            ends.append(end)
        return cls(shared_names(names), table, "".join(texts), tuple(ends), chosen)

    def with_chosen(self, token_id: int) -> Candidates:
        """The same rows with `token_id`'s marked chosen (beam search: the token the winning path took)."""
        chosen = next((j for j in range(len(self)) if int(self.table[j, 0]) == token_id), -1)
        return Candidates(self.names, self.table, self.texts, self.ends, chosen)

    def __len__(self) -> int:
        return len(self.ends)

    def _row(self, j: int) -> Candidate:
        row = self.table[j]
        stages = {name: float(row[3 + i]) for i, name in enumerate(self.names)}
        after_penalty = stages.get("repetition_penalty", stages["raw"])
        removed = int(row[2])
        text = self.texts[self.ends[j - 1] if j else 0 : self.ends[j]]
        return Candidate(
            token_id=int(row[0]), text=text, logit=float(row[1]), prob_raw=stages["raw"],
            prob_after_penalty=after_penalty, prob_after_temperature=stages.get("temperature", after_penalty),
            prob_final=float(row[-1]), removed_by=self.names[removed] if removed >= 0 else None,
            chosen=j == self.chosen, stages=stages,
        )

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._row(j) for j in range(len(self))[index]]
        if not -len(self) <= index < len(self):
            raise IndexError("candidate index out of range")
        return self._row(index % len(self))

    def __iter__(self) -> Iterator[Candidate]:
        return (self._row(j) for j in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Candidates, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Candidates({list(self)!r})"


class Hypothesis:
    """A beam: generated token ids, their text, its score, and whether it ended.

    Live beams score with the summed log-probability; finished ones with it divided by
    length ** length_penalty (transformers' `sequences_scores`). `beam_path[t]` is the running beam
    (row) whose step-t distribution chose token t: the hypothesis' ancestry, its last entry the
    beam it extended at its last step. The ids and the path are a `Tokens` node (a beam search's hypotheses share
    their beginnings); the text is decoded when asked, unless it was given.
    """

    __slots__ = ("tokens", "score", "finished", "_text")

    def __init__(self, token_ids: Sequence[int] | Tokens, text: str | None, score: float, finished: bool,
                 beam_path: Sequence[int] = ()) -> None:
        self.tokens = token_ids if isinstance(token_ids, Tokens) else Tokens.of(list(token_ids), list(beam_path))
        self._text = text
        self.score = score
        self.finished = finished

    @property
    def token_ids(self) -> list[int]:
        return self.tokens.ids()

    @property
    def beam_path(self) -> list[int]:
        return [s for s in self.tokens.sources() if s is not None]

    @property
    def text(self) -> str:
        return self._text if self._text is not None else self.tokens.text

    @property
    def source_beam(self) -> int | None:
        return self.tokens.source if len(self.tokens) else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Hypothesis):
            return NotImplemented
        return (self.token_ids, self.text, self.score, self.finished, self.beam_path) == (
            other.token_ids, other.text, other.score, other.finished, other.beam_path)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"Hypothesis(token_ids={self.token_ids}, text={self.text!r}, score={self.score}, "
                f"finished={self.finished}, beam_path={self.beam_path})")

    def __reduce__(self) -> tuple[Any, ...]:
        return Hypothesis, (self.tokens, self.text, self.score, self.finished)

    def to_dict(self) -> dict[str, Any]:
        return {"token_ids": self.token_ids, "text": self.text, "score": self.score, "finished": self.finished,
                "beam_path": self.beam_path}


class Beams(Sequence[Hypothesis]):
    """One beam step's hypotheses, the running ones (best first) then the finished ones: their token nodes (branches
    of the search's one tree) and their scores as one array of doubles. A run keeps this for every step (the beam
    table draws them), so it keeps no `Hypothesis` object and no float object per beam; they are made when read.
    """

    __slots__ = ("nodes", "scores", "running")

    def __init__(self, nodes: Sequence[Tokens], scores: Iterable[float], running: int) -> None:
        self.nodes = tuple(nodes)
        self.scores = array("d", scores)  # float64: each score exactly as the search gave it
        self.running = running  # the first `running` nodes are still open

    @classmethod
    def of(cls, hypotheses: Sequence[Hypothesis]) -> Beams:
        """The same hypotheses, compact (the running ones must come first)."""
        running = sum(not h.finished for h in hypotheses)
        assert all(not h.finished for h in hypotheses[:running]), "running hypotheses come first"
        return cls([h.tokens for h in hypotheses], [h.score for h in hypotheses], running)

    def __len__(self) -> int:
        return len(self.nodes)

    def _hypothesis(self, i: int) -> Hypothesis:
        return Hypothesis(self.nodes[i], None, self.scores[i], i >= self.running)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._hypothesis(i) for i in range(len(self))[index]]
        if not -len(self) <= index < len(self):
            raise IndexError("beam index out of range")
        return self._hypothesis(index % len(self))

    def __iter__(self) -> Iterator[Hypothesis]:
        return (self._hypothesis(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Beams, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Beams({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Beams, (self.nodes, list(self.scores), self.running)


AttentionRows = dict[str, list[np.ndarray | None]]  # kind -> per layer (h, S), None where not recorded


@dataclass(slots=True)
class StepCapture:
    """What a run recorded for one step of one sequence, when asked.

    attention: per kind ("self", and "cross" for seq2seq) and layer, the (h, S) attention row of
    the query that chose this step's token; residual: (L + 1, d) that query's residual stream after
    the embedding and after each block.
    """

    attention: AttentionRows | None = None
    residual: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"attention": _jsonable(self.attention), "residual": _jsonable(self.residual)}


class Timing(array):
    """A step's clock, five floats (`tail.Clock.timing`) in one array of doubles (a tuple of float objects costs twice
    as much, per step of every run kept), read as the dict the event's `timing` gives."""

    __slots__ = ()
    KEYS = ("prefill_ms", "step_ms", "decode_ms_per_token", "tokens_per_s", "elapsed_ms")

    def __new__(cls, values: Iterable[float]) -> Timing:
        return super().__new__(cls, "d", values)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.KEYS, self))

    def __reduce__(self) -> tuple[Any, ...]:
        return Timing, (list(self),)


@dataclass(slots=True)
class StepEvent:
    """One generated token (one beam step) and what the page shows of it.

    Compact by design, since a run keeps every event: `tokens` is a node of the run's one shared chain (the ids and
    the text so far are rebuilt from it when asked, never copied per step), `kv` the cache's stats object (its dict
    is made when `cache` is read), `clock` the step's timing as a tuple, `candidates` a table.
    """

    step: int
    token_id: int
    token_text: str
    prob: float
    tokens: Tokens  # the generated ids so far (beam search: the best hypothesis'), as a node of a shared chain
    candidates: Sequence[Candidate] | None
    beams: Sequence[Hypothesis] | None  # beam search: `Beams`
    kv: Any  # the KV cache's stats (anything with `to_dict()`) or their dict
    clock: Timing | dict[str, float]
    attention: AttentionRows | None = None
    finished: bool = False
    finish_reason: str | None = None
    residual: np.ndarray | None = None  # (L + 1, d), with capture_residual
    prompt_attention: dict[str, list[np.ndarray | None]] | None = None  # step 0 only: kind -> per layer (h, T, S)
    source_beam: int | None = None  # beam search: the running beam whose distribution chose token_id
    # Beam search with captures: every running beam's rows, (num_beams, ...) per array, so that the
    # final hypothesis' rows can be followed back along its beam path.
    beam_captures: dict[str, Any] | None = None
    # Speculative decoding (GenerationConfig.draft): how this token came: kind ("prefill", "accepted",
    # "rejected": drawn from the residual instead of the draft, "bonus", "plain": a pass without drafts), the
    # draft token, q(x), p(x), accept_prob, coin, accepted, resampled_token and residual_top on rejection,
    # the pass (pass_index), this token's place in it (position), its drafted tokens and the running totals
    # (proposed, accepted, target_passes).
    speculation: dict[str, Any] | None = None

    @property
    def token_ids(self) -> list[int]:
        """The generated ids so far (beam search: the best hypothesis')."""
        return self.tokens.ids()

    @property
    def text(self) -> str:
        """Their text, decoded (special tokens skipped)."""
        return self.tokens.text

    @property
    def cache(self) -> dict[str, Any]:
        """The KV-cache stats, JSON-serialisable (see `CacheStats.to_dict`)."""
        return self.kv if isinstance(self.kv, dict) else self.kv.to_dict()

    @property
    def timing(self) -> dict[str, float]:
        return self.clock.as_dict() if isinstance(self.clock, Timing) else dict(self.clock)

    @property
    def capture(self) -> StepCapture:
        return StepCapture(self.attention, self.residual)

    def record_bytes(self, before: StepEvent | None = None) -> int:
        """Bytes this event keeps besides what it recorded (attention and residual rows, counted by the run's
        `capture_bytes`): itself, its node, stats, clock, candidates, beams, speculation. What it shares with the
        event `before` (a pass's stats, the cache's windows) was counted there."""
        shared = frozenset() if before is None else frozenset(
            id(x) for x in (before.kv, getattr(before.kv, "windows", None), getattr(before.kv, "dtype", None),
                            getattr(before.candidates, "names", None)) if x is not None)
        beam = self.beam_captures  # its dict and what it keeps besides recorded rows (a finished run's: nothing)
        kept = () if beam is None else (beam.get("candidates"), beam.get("kept"))
        parts = (self.tokens, self.token_text, self.prob, self.kv, self.clock, self.candidates, self.beams, *kept,
                 self.speculation)
        own = sys.getsizeof(self) + (0 if beam is None else sys.getsizeof(beam))
        return own + held_bytes(parts, shared) - sys.getsizeof(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "token_id": self.token_id, "token_text": self.token_text, "prob": self.prob,
            "token_ids": self.token_ids, "text": self.text,
            "candidates": None if self.candidates is None else [c.to_dict() for c in self.candidates],
            "beams": None if self.beams is None else [b.to_dict() for b in self.beams],
            "cache": _jsonable(self.cache), "timing": self.timing,
            "attention": None if self.attention is None else _jsonable(self.attention),
            "residual": None if self.residual is None else _jsonable(self.residual),
            "source_beam": self.source_beam, "finished": self.finished, "finish_reason": self.finish_reason,
            **({"speculation": _jsonable(self.speculation)} if self.speculation is not None else {}),
        }


@dataclass(slots=True)
class TokenStep:
    """One token of a returned sequence and how it was chosen (beam search: on its own beam path).

    For greedy and sampled runs this repeats the step's event; for beam search the events describe
    the best beam *at each step*, while these follow the hypothesis that won in the end.
    """

    step: int
    token_id: int
    token_text: str
    prob: float
    candidates: Sequence[Candidate] | None
    source_beam: int | None
    capture: StepCapture

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "token_id": self.token_id, "token_text": self.token_text, "prob": self.prob,
            "candidates": None if self.candidates is None else [c.to_dict() for c in self.candidates],
            "source_beam": self.source_beam, "capture": self.capture.to_dict(),
        }


@dataclass
class GenerationResult:
    token_ids: list[int]
    text: str
    sequences: list[Hypothesis]
    prompt_ids: list[int]
    cache: dict[str, Any]
    timing: dict[str, float]
    finish_reason: str | None
    steps: list[StepEvent]
    attention: dict[str, np.ndarray] | None = None
    notes: list[str] = field(default_factory=list)
    # One entry per token of the returned sequence (beam search: along the winning hypothesis).
    path: list[TokenStep] = field(default_factory=list)
    prompt_attention: dict[str, list[np.ndarray | None]] | None = None
    decoder_prefix: list[int] = field(default_factory=list)  # the decoder stream's start: prompt, or start ids
    interventions: list[dict[str, Any]] = field(default_factory=list)  # the run's edits, as Intervention.to_dict()
    precision: dict[str, Any] | None = None  # with weight_precision: the variant (precision, simulated, bytes/token)
    # With a draft: proposed, accepted, target_passes, acceptance_rate, tokens_per_pass (speculative.summary).
    speculation: dict[str, Any] | None = None
    # With a model loaded with compile=True: {"captured": True, "rows", "length"} (the step's shape), or
    # {"captured": False, "reason": why this run decoded eagerly} (generation.captured). None otherwise.
    decoding: dict[str, Any] | None = None

    @property
    def captures(self) -> list[StepCapture]:
        """What was recorded while choosing each returned token (empty captures without recording)."""
        return [p.capture for p in self.path]

    def to_dict(self, *, steps: bool = False) -> dict[str, Any]:
        """JSON-ready summary; per-step events only with `steps` (they can be large)."""
        data = {
            "token_ids": list(self.token_ids), "text": self.text,
            "sequences": [s.to_dict() for s in self.sequences], "prompt_ids": list(self.prompt_ids),
            "cache": _jsonable(self.cache), "timing": dict(self.timing), "finish_reason": self.finish_reason,
            "notes": list(self.notes), "interventions": list(self.interventions),
        }
        if self.precision is not None:
            data["precision"] = dict(self.precision)
        if self.speculation is not None:
            data["speculation"] = dict(self.speculation)
        if self.decoding is not None:
            data["decoding"] = dict(self.decoding)
        if steps:
            data["steps"] = [e.to_dict() for e in self.steps]
        if self.attention is not None:
            data["attention_shapes"] = {k: list(v.shape) for k, v in self.attention.items()}
        return data
