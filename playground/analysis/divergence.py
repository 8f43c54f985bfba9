"""What an edit changed: per-step divergence of an edited run from the original, and a head sweep.

`divergence` compares the two runs' next-token distributions step by step along the original's
tokens (teacher forcing): at step t both the original model (with the original's own edits, if any)
and the edited one read the same sequence, prompt + the original's first t tokens, and give a raw
next-token distribution (softmax of the logits, before temperature, top-k or top-p). Per step:
KL(original ‖ edited) in nats, the original token's rank (0 = top) and probability under the edited
model; and, from the tokens each run actually chose, the first step where the edited text differs.
Reading the same prefix keeps every step comparable even after the texts part.

`head_sweep` ablates every head of one layer, one at a time, at one position, and ranks the heads by
how much the chosen token's log-probability falls without them (its total effect, through every later
layer, unlike direct attribution).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from playground.interventions import Ablate, Intervention, as_interventions, check
from playground.loaded import LoadedModel


@dataclass
class Divergence:
    kl: np.ndarray  # (n,) KL(original ‖ edited) per step, nats
    rank: np.ndarray  # (n,) rank of the original token under the edited model (0 = its top token)
    prob: np.ndarray  # (n,) the edited model's probability of the original token
    original_prob: np.ndarray  # (n,) the original model's probability of its own token
    tokens: list[int]  # the original tokens compared
    first_difference: int | None  # first step where the edited run chose another token (None: same text)

    def to_dict(self) -> dict[str, Any]:
        return {"kl": self.kl.tolist(), "rank": self.rank.tolist(), "prob": self.prob.tolist(),
                "original_prob": self.original_prob.tolist(), "tokens": list(self.tokens),
                "first_difference": self.first_difference}


def _logits(lm: LoadedModel, ids: list[int], source: list[int] | None, edits: Sequence[Intervention]) -> torch.Tensor:
    if lm.kind == "seq2seq":
        return lm.logits([source], [ids], interventions=edits)[0].double()
    return lm.logits([ids], interventions=edits)[0].double()


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token lists differ (a length difference counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def divergence(
    lm: LoadedModel,
    prefix_ids: Sequence[int],
    original_tokens: Sequence[int],
    edits: Sequence[Intervention | dict],
    *,
    original_edits: Sequence[Intervention | dict] = (),
    edited_tokens: Sequence[int] | None = None,
    source_ids: Sequence[int] | None = None,
) -> Divergence:
    """Per-step divergence of the model under `edits` from the model under `original_edits` along
    `original_tokens` generated after `prefix_ids` (the decoder stream's start; seq2seq models also
    need `source_ids`). `edited_tokens`: what the edited run chose, for the first differing step."""
    edits, base = as_interventions(edits), as_interventions(original_edits)
    check(edits, lm.config)
    check(base, lm.config)
    if lm.kind == "seq2seq" and source_ids is None:
        raise ValueError("a seq2seq model needs source_ids (what the encoder reads)")
    tokens = [int(t) for t in original_tokens]
    if not tokens:
        raise ValueError("the original run has no tokens to compare")
    ids = [int(i) for i in prefix_ids] + tokens[:-1]
    n, start = len(tokens), len(prefix_ids) - 1
    source = None if source_ids is None else [int(i) for i in source_ids]
    with torch.inference_mode():
        p = torch.log_softmax(_logits(lm, ids, source, base)[start:start + n], dim=-1)  # (n, V)
        q = torch.log_softmax(_logits(lm, ids, source, edits)[start:start + n], dim=-1)
    kl = (p.exp() * (p - q)).sum(-1).clamp_min(0.0)
    index = torch.tensor(tokens, device=q.device)[:, None]  # on the logits' device: gather needs both there
    q_tok = q.gather(1, index)[:, 0]
    rank = (q > q_tok[:, None]).sum(-1)
    diff = None if edited_tokens is None else first_difference(tokens, [int(t) for t in edited_tokens])
    host = [t.cpu().numpy() for t in (kl, rank, q_tok.exp(), p.gather(1, index)[:, 0].exp())]
    return Divergence(*host, tokens, diff)


def divergence_of_runs(lm: LoadedModel, original: Any, edited: Any) -> Divergence:
    """`divergence` of two GenerationResults of the same prompt: each run's own edits (`.interventions`)."""
    if list(original.prompt_ids) != list(edited.prompt_ids) or list(original.decoder_prefix) != list(edited.decoder_prefix):
        raise ValueError("the two runs start from different prompts; compare a run with a branch of the same prompt")
    return divergence(
        lm, original.decoder_prefix, original.token_ids, edited.interventions, original_edits=original.interventions,
        edited_tokens=edited.token_ids, source_ids=original.prompt_ids if lm.kind == "seq2seq" else None,
    )


@dataclass
class HeadSweep:
    layer: int
    token_id: int
    attention: str
    base_logprob: float  # the chosen token's log-probability without the sweep's ablation
    logprob_drop: np.ndarray  # (H,) base − ablated log-probability of the token, per head
    logit_drop: np.ndarray  # (H,) base − ablated logit
    order: list[int]  # heads from the largest drop to the smallest

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "token_id": self.token_id, "attention": self.attention,
                "base_logprob": self.base_logprob, "logprob_drop": self.logprob_drop.tolist(),
                "logit_drop": self.logit_drop.tolist(), "order": list(self.order)}


def head_sweep(
    lm: LoadedModel,
    ids: Sequence[int],
    token_id: int,
    layer: int,
    *,
    source_ids: Sequence[int] | None = None,
    interventions: Sequence[Intervention | dict] = (),
    attention: str = "self",
    progress: Callable[[int, int], bool | None] | None = None,
) -> HeadSweep:
    """Ablate each head of decoder block `layer` in turn (on top of the run's own `interventions`) and
    measure the chosen token's log-probability and logit at the last position of `ids`.
    `progress(done, total)` is called after each head; returning False stops the sweep early (the
    heads not reached get NaN and come last)."""
    sweep = iter_head_sweep(lm, ids, token_id, layer, source_ids=source_ids, interventions=interventions,
                            attention=attention)
    for item in sweep:
        if isinstance(item, HeadSweep):
            return item
        done, total = item
        if done and progress is not None and progress(done, total) is False:
            return sweep.send(False)
    raise AssertionError("a head sweep ends with its result")


def iter_head_sweep(
    lm: LoadedModel,
    ids: Sequence[int],
    token_id: int,
    layer: int,
    *,
    source_ids: Sequence[int] | None = None,
    interventions: Sequence[Intervention | dict] = (),
    attention: str = "self",
) -> Generator[tuple[int, int] | HeadSweep, bool | None, None]:
    """`head_sweep` one pass at a time: yields (heads done, heads) after the plain pass and after each
    head, then the HeadSweep. `send(False)` in place of `next()` stops it: the HeadSweep of what was
    done comes next (the heads not reached get NaN and come last)."""
    base = as_interventions(interventions)
    heads = lm.config.n_heads
    check(base + (Ablate(layer, head=0, attention=attention),), lm.config)
    ids = [int(i) for i in ids]
    source = None if source_ids is None else [int(i) for i in source_ids]

    def last(edits) -> torch.Tensor:
        with torch.inference_mode():
            return _logits(lm, ids, source, edits)[-1]

    plain = last(base)
    base_lp = float(torch.log_softmax(plain, -1)[token_id])
    lp_drop, logit_drop = np.full(heads, np.nan), np.full(heads, np.nan)
    go_on = yield 0, heads
    for h in range(heads):
        if go_on is False:
            break
        logits = last(base + (Ablate(layer, head=h, attention=attention),))
        lp_drop[h] = base_lp - float(torch.log_softmax(logits, -1)[token_id])
        logit_drop[h] = float(plain[token_id] - logits[token_id])
        go_on = yield h + 1, heads
    order = sorted(range(heads), key=lambda h: (np.isnan(lp_drop[h]), -np.nan_to_num(lp_drop[h])))
    yield HeadSweep(layer, int(token_id), attention, base_lp, lp_drop, logit_drop, order)


def sweep_step(lm: LoadedModel, result: Any, step: int, layer: int, **kwargs: Any) -> HeadSweep:
    """`head_sweep` at the position that chose a recorded run's token at `step`, under the run's edits."""
    ids, token_id, source = _sweep_inputs(lm, result, step)
    return head_sweep(lm, ids, token_id, layer, source_ids=source, interventions=result.interventions, **kwargs)


def iter_sweep_step(lm: LoadedModel, result: Any, step: int, layer: int) -> Generator[Any, bool | None, None]:
    """`iter_head_sweep` at a recorded run's `step` (as `sweep_step`), one pass per `next()`."""
    ids, token_id, source = _sweep_inputs(lm, result, step)
    return iter_head_sweep(lm, ids, token_id, layer, source_ids=source, interventions=result.interventions)


def _sweep_inputs(lm: LoadedModel, result: Any, step: int) -> tuple[list[int], int, list[int] | None]:
    if not 0 <= int(step) < len(result.token_ids):
        raise ValueError(f"step {step} is outside this run's steps 0..{len(result.token_ids) - 1}")
    ids = list(result.decoder_prefix) + list(result.token_ids[:step])
    source = list(result.prompt_ids) if lm.kind == "seq2seq" else None
    return ids, result.token_ids[step], source
