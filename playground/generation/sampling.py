"""Choosing the next token (greedy or sampled) and describing the candidates it was chosen from."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import torch

from playground.generation.events import Candidates, shared_names

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
    return describe_rows(names, np.asarray(ids, dtype=np.int64).reshape(1, n), np.asarray(raw_logits).reshape(1, n),
                         np.asarray(probs).reshape(1, len(names), n), np.asarray(finite, dtype=bool).reshape(1, len(names), n),
                         np.array([chosen]), lambda row: [token_text(i) for i in row])[0]


def describe_rows(
    names: Sequence[str], ids: np.ndarray, raw_logits: np.ndarray, probs: np.ndarray, finite: np.ndarray,
    chosen: np.ndarray, token_texts: Callable[[list[int]], list[str]],
) -> list[Candidates]:
    """`describe` for G rows at once, all with the stages `names`: ids (G, n), raw_logits (G, n), probs and
    finite (G, stages, n), chosen (G,). A class's captured step describes every row of a step in one pass
    (`shared_step`): numpy per step, not per row; only each row's table and texts are its own."""
    g, n = ids.shape
    # the first stage where a finite score became -inf removed it (-1: kept)
    removed = np.full((g, n), -1)
    if len(names) > 1:
        drops = finite[:, :-1] & ~finite[:, 1:]  # (G, stages - 1, n)
        removed = np.where(drops.any(axis=1), drops.argmax(axis=1) + 1, -1)
    tables = np.empty((g, n, 3 + len(names)), dtype=np.float64)
    tables[:, :, 0], tables[:, :, 1], tables[:, :, 2] = ids, raw_logits, removed
    tables[:, :, 3:] = probs.transpose(0, 2, 1)
    hits = ids == np.asarray(chosen).reshape(g, 1)
    at = np.where(hits.any(axis=1), hits.argmax(axis=1), -1)
    names = shared_names(names)
    out = []
    for r in range(g):
        texts = token_texts(ids[r].tolist())
        out.append(Candidates(names, tables[r].copy(), "".join(texts), tuple(itertools.accumulate(map(len, texts))),
                              int(at[r])))
    return out
