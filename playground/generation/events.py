"""What the engine streams (`StepEvent`) and what `generate_all` returns (`GenerationResult`).

Everything here is plain Python / numpy, never torch tensors, so the UI can keep events in
`gr.State` and `to_dict()` is always JSON-serialisable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


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


@dataclass
class Hypothesis:
    """A beam: generated token ids, their text, its score, and whether it ended.

    Live beams score with the summed log-probability; finished ones with it divided by
    length ** length_penalty (transformers' `sequences_scores`). `beam_path[t]` is the running beam
    (row) whose step-t distribution chose token t: the hypothesis' ancestry, its last entry the
    beam it extended at its last step.
    """

    token_ids: list[int]
    text: str
    score: float
    finished: bool
    beam_path: list[int] = field(default_factory=list)

    @property
    def source_beam(self) -> int | None:
        return self.beam_path[-1] if self.beam_path else None

    def to_dict(self) -> dict[str, Any]:
        return {"token_ids": list(self.token_ids), "text": self.text, "score": self.score, "finished": self.finished,
                "beam_path": list(self.beam_path)}


AttentionRows = dict[str, list[np.ndarray | None]]  # kind -> per layer (h, S), None where not recorded


@dataclass
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


@dataclass
class StepEvent:
    step: int
    token_id: int
    token_text: str
    prob: float
    token_ids: list[int]
    text: str
    candidates: list[Candidate] | None
    beams: list[Hypothesis] | None
    cache: dict[str, Any]
    timing: dict[str, float]
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
    def capture(self) -> StepCapture:
        return StepCapture(self.attention, self.residual)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "token_id": self.token_id, "token_text": self.token_text, "prob": self.prob,
            "token_ids": list(self.token_ids), "text": self.text,
            "candidates": None if self.candidates is None else [c.to_dict() for c in self.candidates],
            "beams": None if self.beams is None else [b.to_dict() for b in self.beams],
            "cache": _jsonable(self.cache), "timing": dict(self.timing),
            "attention": None if self.attention is None else _jsonable(self.attention),
            "residual": None if self.residual is None else _jsonable(self.residual),
            "source_beam": self.source_beam, "finished": self.finished, "finish_reason": self.finish_reason,
            **({"speculation": _jsonable(self.speculation)} if self.speculation is not None else {}),
        }


@dataclass
class TokenStep:
    """One token of a returned sequence and how it was chosen (beam search: on its own beam path).

    For greedy and sampled runs this repeats the step's event; for beam search the events describe
    the best beam *at each step*, while these follow the hypothesis that won in the end.
    """

    step: int
    token_id: int
    token_text: str
    prob: float
    candidates: list[Candidate] | None
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
