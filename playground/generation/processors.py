"""Logits processors with Hugging Face semantics, chained as a pipeline.

Each processor maps `(input_ids (B, T), scores (B, V)) -> scores (B, V)` and never changes its input
in place. Order (as `transformers.generate()` builds it): repetition penalty, forced BOS/EOS, then —
only when sampling — temperature, top-k, top-p, min-p. `run_stages` keeps every intermediate result
so the step inspector can show the sampling funnel; `run` is the fast path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from playground.generation.config import GenerationConfig

NEG_INF = float("-inf")


class LogitsProcessor:
    name = "processor"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class RepetitionPenalty(LogitsProcessor):
    """Seen tokens: positive scores divided by `penalty`, negative ones multiplied (CTRL paper, as HF)."""

    name = "repetition_penalty"

    def __init__(self, penalty: float) -> None:
        if penalty <= 0:
            raise ValueError(f"repetition penalty must be positive, got {penalty}")
        self.penalty = float(penalty)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        vocab = scores.shape[-1]
        ids = input_ids.clamp(max=vocab)  # ids outside the head's vocabulary land in a dropped pad column
        padded = torch.nn.functional.pad(scores, (0, 1))
        score = torch.gather(padded, 1, ids)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        return padded.scatter(1, ids, score)[..., :vocab]


class Temperature(LogitsProcessor):
    name = "temperature"

    def __init__(self, temperature: float) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be positive for sampling, got {temperature}")
        self.temperature = float(temperature)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores / self.temperature


class TopK(LogitsProcessor):
    """Keep the k highest scores (ties with the k-th are kept too)."""

    name = "top_k"

    def __init__(self, top_k: int, min_tokens_to_keep: int = 1) -> None:
        if top_k <= 0:
            raise ValueError(f"top_k must be a positive integer, got {top_k}")
        self.top_k = max(int(top_k), min_tokens_to_keep)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, scores.shape[-1])
        kth = torch.topk(scores, k)[0][..., -1, None]
        return scores.masked_fill(scores < kth, NEG_INF)


class TopP(LogitsProcessor):
    """Nucleus: keep the smallest set of most likely tokens whose probability reaches `top_p`."""

    name = "top_p"

    def __init__(self, top_p: float, min_tokens_to_keep: int = 1) -> None:
        if not 0.0 <= top_p <= 1.0:
            raise ValueError(f"top_p must be in [0, 1], got {top_p}")
        self.top_p, self.min_tokens_to_keep = float(top_p), min_tokens_to_keep

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - self.top_p)
        remove[..., -self.min_tokens_to_keep :] = False
        remove = remove.scatter(1, sorted_indices, remove)
        return scores.masked_fill(remove, NEG_INF)


class MinP(LogitsProcessor):
    """Keep tokens whose probability is at least `min_p` times the most likely token's."""

    name = "min_p"

    def __init__(self, min_p: float, min_tokens_to_keep: int = 1) -> None:
        if not 0.0 <= min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {min_p}")
        self.min_p, self.min_tokens_to_keep = float(min_p), min_tokens_to_keep

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores, dim=-1)
        threshold = self.min_p * probs.amax(dim=-1, keepdim=True)
        remove = probs < threshold
        keep = torch.topk(probs, min(self.min_tokens_to_keep, probs.shape[-1]), dim=-1).indices
        remove.scatter_(-1, keep, False)
        return scores.masked_fill(remove, NEG_INF)


class ForcedToken(LogitsProcessor):
    """Force `token_id` when the sequence is `at_length` long (BART's forced BOS / EOS)."""

    def __init__(self, token_id: int | list[int], at_length: int, name: str) -> None:
        self.token_id = int(token_id) if isinstance(token_id, int) else [int(t) for t in token_id]
        self.at_length, self.name = at_length, name

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[-1] != self.at_length:
            return scores
        forced = torch.full_like(scores, NEG_INF)
        forced[:, self.token_id] = 0
        return forced


@dataclass
class Pipeline:
    """An ordered list of processors; `sampling` tells whether the result is sampled from."""

    processors: list[LogitsProcessor]
    sampling: bool

    def run(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for p in self.processors:
            scores = p(input_ids, scores)
        return scores

    def run_stages(self, input_ids: torch.Tensor, scores: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """[("raw", scores), (processor name, scores after it), ...]."""
        stages = [("raw", scores)]
        for p in self.processors:
            scores = p(input_ids, scores)
            stages.append((p.name, scores))
        return stages


def build_pipeline(
    cfg: GenerationConfig,
    *,
    forced_bos: tuple[int, int] | None = None,
    forced_eos: tuple[int | list[int], int] | None = None,
    min_tokens_to_keep: int = 1,
) -> Pipeline:
    """The processors `cfg` asks for, in transformers' order.

    forced_bos / forced_eos: (token id, sequence length at which it is forced), for models whose
    config forces them (BART). Sampling warpers only join when `cfg.do_sample`.
    """
    processors: list[LogitsProcessor] = []
    if cfg.repetition_penalty != 1.0:
        processors.append(RepetitionPenalty(cfg.repetition_penalty))
    if forced_bos is not None:
        processors.append(ForcedToken(forced_bos[0], forced_bos[1], "forced_bos"))
    if forced_eos is not None:
        processors.append(ForcedToken(forced_eos[0], forced_eos[1], "forced_eos"))
    if cfg.do_sample:
        if cfg.temperature != 1.0:
            processors.append(Temperature(cfg.temperature))
        if cfg.top_k:
            processors.append(TopK(cfg.top_k, min_tokens_to_keep))
        if cfg.top_p < 1.0:
            processors.append(TopP(cfg.top_p, min_tokens_to_keep))
        if cfg.min_p > 0.0:
            processors.append(MinP(cfg.min_p, min_tokens_to_keep))
    return Pipeline(processors, sampling=cfg.do_sample)
