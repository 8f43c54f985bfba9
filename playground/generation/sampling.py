"""Choosing the next token (greedy or sampled) and describing the candidates it was chosen from."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from playground.generation.events import Candidates

TRUNCATION_STAGES = ("top_k", "top_p", "min_p", "forced_bos", "forced_eos")


def choose(scores: torch.Tensor, *, sample: bool, generator: torch.Generator | None) -> tuple[torch.Tensor, float]:
    """scores: (1, V) processed logits. Returns the chosen id (1,) and its final probability.

    Greedy takes the argmax; sampling draws from softmax(scores) with `generator` (seeded runs repeat).
    """
    if sample:
        probs = torch.softmax(scores, dim=-1)
        token = torch.multinomial(probs, num_samples=1, generator=generator)[:, 0]
        return token, float(probs[0, token])
    token = torch.argmax(scores, dim=-1)
    # softmax(scores)[argmax] without materialising the distribution
    prob = 1.0 / float(torch.exp(scores[0] - scores[0, token]).sum())
    return token, prob


def candidates(
    stages: list[tuple[str, torch.Tensor]],
    chosen: int,
    count: int,
    token_text: Callable[[int], str],
    include: Sequence[int] = (),
) -> Candidates:
    """The `count` best candidates and their probability after every stage.

    stages: [("raw", (V,) logits), (stage name, (V,) scores after it), ...] as `Pipeline.run_stages`
    gives them (log-probabilities also work: softmax is shift-invariant). Candidates are ranked by
    the scores top-k / top-p act on (after repetition penalty and temperature); the chosen token
    (-1: none) is always included, and so is every id in `include` (appended after the best).
    """
    names = [name for name, _ in stages]
    rank_at = max((i for i, n in enumerate(names) if n not in TRUNCATION_STAGES), default=0)
    ids = torch.topk(stages[rank_at][1], min(count, stages[rank_at][1].shape[-1])).indices
    if chosen >= 0 and not bool((ids == chosen).any()):
        ids[-1] = chosen
    extra = [i for i in dict.fromkeys(include) if not bool((ids == i).any())]
    if extra:
        ids = torch.cat((ids, torch.tensor(extra, dtype=ids.dtype, device=ids.device)))
    scores = torch.stack([s for _, s in stages])[:, ids]  # (stages, n)
    probs = torch.stack([torch.softmax(s, dim=-1)[ids] for _, s in stages]).tolist()
    return describe(names, ids.tolist(), scores[0].tolist(), probs, torch.isfinite(scores).tolist(), chosen, token_text)


def describe(
    names: Sequence[str], ids: Sequence[int], raw_logits: Sequence[float], probs: Sequence[Sequence[float]],
    finite: Sequence[Sequence[bool]], chosen: int, token_text: Callable[[int], str],
) -> Candidates:
    """Candidates from their numbers: each id's raw logit, its probability after every stage `names`
    (probs[stage][j]) and whether its score was finite there (the first stage where it is not removed it).
    What a captured step reads back (`generation.captured`) and the eager path computes meet here."""
    n = len(ids)
    finite_at = np.asarray(finite, dtype=bool).reshape(len(names), n)
    removed = np.full(n, -1)
    for i in range(len(names) - 1, 0, -1):  # the first stage where a finite score became -inf (the last one set wins)
        removed[finite_at[i - 1] & ~finite_at[i]] = i
    ids = [int(i) for i in ids]
    return Candidates.of(names, ids, raw_logits, removed, np.asarray(probs, dtype=np.float64),
                         [token_text(i) for i in ids], ids.index(chosen) if chosen in ids else -1)
