"""Choosing the next token on the device: the processors of `generation.processors`, one row per request,
every knob a tensor, so a captured step chooses its tokens without the host.

Each row carries its own settings (`Knobs`): repetition penalty, temperature, top-k, top-p and min-p
with transformers' semantics and order, greedy or sampled. The stages are the pipeline's (`STAGES`);
a stage a row does not use leaves its scores as they were, so a row's numbers are those its own
`Pipeline` computes (`tests/library/test_sampler.py` holds them equal, bitwise). Sampling draws as
`torch.multinomial` does for one sample: argmax(probs / q) with q ~ Exp(1), q drawn by the run's
own generator (`draw_noise`, outside the step), so a seeded run picks the same tokens captured or not.

`candidates` gives the page's top candidates with their probability after every stage, as
`sampling.candidates` does from the eager pipeline's stages.
"""

from __future__ import annotations

import dataclasses

import torch

from playground.generation.processors import MinP, RepetitionPenalty, Temperature, TopK, TopP

STAGES = ("raw", "repetition_penalty", "temperature", "top_k", "top_p", "min_p")
RANKED = STAGES.index("temperature")  # candidates are ranked after penalty and temperature (truncations after)
NEG_INF = float("-inf")
SUPPORTED = (RepetitionPenalty, Temperature, TopK, TopP, MinP)


@dataclasses.dataclass(frozen=True)
class RowKnobs:
    """One row's settings as the pipeline holds them (Python numbers); `values()` gives its buffers."""

    sample: bool = False
    penalty: float | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None

    @classmethod
    def of(cls, pipeline) -> RowKnobs:  # noqa: ANN001 - a generation.processors.Pipeline
        """The knobs of a pipeline made only of the processors this module mirrors (else ValueError)."""
        found = {}
        for p in pipeline.processors:
            if not isinstance(p, SUPPORTED) or (isinstance(p, (TopK, TopP, MinP)) and getattr(p, "min_tokens_to_keep", 1) > 1):
                raise ValueError(f"the {p.name} stage has no captured form")
            found[p.name] = p
        get = found.get
        return cls(
            sample=pipeline.sampling,
            penalty=get("repetition_penalty") and get("repetition_penalty").penalty,
            temperature=get("temperature") and get("temperature").temperature,
            top_k=get("top_k") and get("top_k").top_k,
            top_p=get("top_p") and get("top_p").top_p,
            min_p=get("min_p") and get("min_p").min_p,
        )

    def stages(self) -> tuple[str, ...]:
        """The stage names this row's pipeline has (what its candidates report)."""
        used = {"repetition_penalty": self.penalty, "temperature": self.temperature, "top_k": self.top_k,
                "top_p": self.top_p, "min_p": self.min_p}
        return ("raw",) + tuple(name for name in STAGES[1:] if used[name] is not None)

    def values(self, vocab: int) -> dict[str, float | int | bool]:
        """Per-buffer values. Scalars are rounded to float32 as the processors' Python numbers are when they
        meet float32 scores; top-p's threshold 1 - p is taken in double first, as `TopP` does."""
        return {
            "sample": self.sample,
            "penalize": self.penalty is not None, "penalty": self.penalty or 1.0,
            "temper": self.temperature is not None, "temperature": self.temperature or 1.0,
            "cut_k": self.top_k is not None, "top_k": min(self.top_k or vocab, vocab),
            "cut_p": self.top_p is not None, "top_p_floor": 1 - (self.top_p if self.top_p is not None else 1.0),
            "cut_min": self.min_p is not None, "min_p": self.min_p or 0.0,
        }


KNOB_DTYPES = {"sample": torch.bool, "penalize": torch.bool, "penalty": torch.float32, "temper": torch.bool,
               "temperature": torch.float32, "cut_k": torch.bool, "top_k": torch.long, "cut_p": torch.bool,
               "top_p_floor": torch.float32, "cut_min": torch.bool, "min_p": torch.float32}


def process(logits: torch.Tensor, seen: torch.Tensor, k: dict[str, torch.Tensor], *, sampling: bool) -> list[torch.Tensor]:
    """logits (R, V) float32, seen (R, V) bool (the tokens of each row's sequence so far), knobs (R,) each ->
    the scores after every stage of `STAGES` (R, V) each. `sampling` False: no row samples (the warpers
    are skipped; their stages repeat the scores)."""
    col = lambda name: k[name][:, None]  # noqa: E731
    penalized = torch.where(logits < 0, logits * col("penalty"), logits / col("penalty"))
    scores = torch.where(col("penalize") & seen, penalized, logits)
    stages = [logits, scores]
    if not sampling:
        return stages + [scores] * 4
    scores = torch.where(col("sample") & col("temper"), scores / col("temperature"), scores)
    stages.append(scores)
    ranked = torch.sort(scores, dim=-1, descending=True).values  # the k-th largest, whatever k per row
    kth = ranked.gather(1, col("top_k") - 1)
    scores = torch.where(col("sample") & col("cut_k") & (scores < kth), NEG_INF, scores)
    stages.append(scores)
    ascending, order = torch.sort(scores, dim=-1, descending=False)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= col("top_p_floor")
    remove[:, -1] = False  # min_tokens_to_keep = 1
    remove = remove.scatter(1, order, remove)
    scores = torch.where(col("sample") & col("cut_p") & remove, NEG_INF, scores)
    stages.append(scores)
    probs = torch.softmax(scores, dim=-1)
    below = probs < col("min_p") * probs.amax(dim=-1, keepdim=True)  # the most likely token is never below
    scores = torch.where(col("sample") & col("cut_min") & below, NEG_INF, scores)
    stages.append(scores)
    return stages


def choose(
    scores: torch.Tensor, sample: torch.Tensor, noise: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scores (R, V) after every stage -> (token (R,), numerator (R,), denominator (R,)): the token's
    probability is numerator / denominator, taken on the host in double as `sampling.choose` does
    (greedy: 1 / Σ exp(s - s[token]); sampled: softmax(s)[token])."""
    greedy = scores.argmax(dim=-1)
    denominator = torch.exp(scores - scores.gather(1, greedy[:, None])).sum(dim=-1)
    if noise is None:
        return greedy, torch.ones_like(denominator), denominator
    probs = torch.softmax(scores, dim=-1)
    drawn = (probs / noise).argmax(dim=-1)  # torch.multinomial(probs, 1) with the same exponential draws
    token = torch.where(sample, drawn, greedy)
    numerator = torch.where(sample, probs.gather(1, drawn[:, None])[:, 0], torch.ones_like(denominator))
    return token, numerator, torch.where(sample, torch.ones_like(denominator), denominator)


def draw_noise(noise: torch.Tensor, generator: torch.Generator) -> None:
    """Fill one row (V,) with what `torch.multinomial` draws for one sample from `generator`."""
    noise.exponential_(1, generator=generator)


def candidates(
    stages: list[torch.Tensor], chosen: torch.Tensor, count: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The `count` best candidates of each row, ranked after penalty and temperature, the chosen token
    always among them (in the last place when it would not be): ids (R, count), their raw logits
    (R, count), their probability after every stage (R, stages, count) and whether their score was
    finite there (R, stages, count)."""
    ids = torch.topk(stages[RANKED], count, dim=-1).indices
    listed = (ids == chosen[:, None]).any(dim=-1, keepdim=True)
    ids = torch.cat((ids[:, :-1], torch.where(listed, ids[:, -1:], chosen[:, None])), dim=1)
    probs = torch.stack([torch.softmax(s, dim=-1).gather(1, ids) for s in stages], dim=1)
    finite = torch.stack([torch.isfinite(s.gather(1, ids)) for s in stages], dim=1)
    return ids, stages[0].gather(1, ids), probs, finite
