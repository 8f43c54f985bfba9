"""Logit lens: what the model would predict if it stopped after each layer.

The residual stream of the query that chose a step's token is recorded after the embedding and
after every block (`GenerationConfig(capture_residual=True)`: `result.path[step].capture.residual`,
(L + 1, d)). Each row goes through the model's own final norm and head (`model.unembed`), giving a
next-token distribution per layer. The last row is the model's own output at that step, so the last
entry is exactly the distribution the step sampled from (before any temperature / top-k / top-p).
Works for decoder-only models and seq2seq decoders (whose residual stream is the decoder's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from playground.analysis.recorded import RunCache
from playground.generation import GenerationResult
from playground.loaded import LoadedModel

STRIP_STEPS = 40  # steps in the rank heat strip around the selected one (each costs one unembed)
STRIP_FLOPS = 8e9  # per call, for the UI: SmolLM2 computes 4 new strip columns per step change, tiny models all
KEEP_TOP = 10  # top tokens kept per layer in the cache (any top_k up to this is served from it)


def _residual(result: GenerationResult, step: int) -> np.ndarray:
    residual = result.path[step].capture.residual
    if residual is None:
        raise ValueError("this run has no residual stream; generate with GenerationConfig(capture_residual=True)")
    return residual  # (L + 1, d)


@torch.inference_mode()
def _lens(lm: LoadedModel, result: GenerationResult, step: int) -> torch.Tensor:
    if not 0 <= int(step) < len(result.path):
        raise ValueError(f"step {step} is outside this run's steps 0..{len(result.path) - 1}")
    x = torch.from_numpy(np.ascontiguousarray(_residual(result, int(step))))
    x = x.to(device=lm.device, dtype=lm.dtype)[None]  # (1, L + 1, d)
    # The last row alone, shaped as the step computed it (1, 1, d): a product of another shape sums in
    # another order, and the step's own logits would then differ in the last bits (2e-5 near 25).
    upper, last = lm.model.unembed(x[:, :-1])[0], lm.model.unembed(x[:, -1:])[0]
    return torch.cat([upper, last]).float()  # (L + 1, V)


def lens_logits(lm: LoadedModel, result: GenerationResult, step: int) -> np.ndarray:
    """(L + 1, V) float32 logits: the recorded residual after the embedding and each block, unembedded."""
    return _lens(lm, result, step).cpu().numpy()


def layer_names(n_layers: int) -> list[str]:
    return ["embedding"] + [f"block {i}" for i in range(n_layers)]


@torch.inference_mode()
def _summarise(logits: torch.Tensor, chosen: int, top_k: int) -> dict[str, np.ndarray]:
    """Per layer: top-k ids and probs, the chosen token's rank (1 = top) and prob. logits (L + 1, V).

    p = exp(logit − logsumexp(logits)); the rank counts the tokens with a larger logit (softmax keeps
    the order), so no (L + 1, V) probability table is built."""
    lse = torch.logsumexp(logits, dim=1).double()  # (L + 1,)
    values, ids = torch.topk(logits, min(top_k, logits.shape[1]), dim=1)
    chosen_logit = logits[:, chosen : chosen + 1]
    return {
        "top_ids": ids.cpu().numpy(), "top_probs": torch.exp(values.double() - lse[:, None]).cpu().numpy(),
        "rank": ((logits > chosen_logit).sum(dim=1) + 1).cpu().numpy(),
        "prob": torch.exp(chosen_logit[:, 0].double() - lse).cpu().numpy(),
    }


def _row(lm: LoadedModel, result: GenerationResult, step: int, top_k: int, cache: RunCache | None) -> dict:
    if cache is not None:
        cache.check_result(result)
        if step in cache.lens_rows and cache.lens_rows[step]["top_ids"].shape[1] >= top_k:
            return cache.lens_rows[step]
    row = _summarise(_lens(lm, result, step), result.path[step].token_id, max(top_k, KEEP_TOP))
    if cache is not None:
        cache.lens_rows[step] = row
    return row


def logit_lens(
    lm: LoadedModel, result: GenerationResult, step: int, top_k: int = 5, *, cache: RunCache | None = None
) -> list[dict[str, Any]]:
    """One entry per layer, in order: "embedding", then after block 0 … block L−1 (the last entry is
    the model's own next-token distribution at that step).

    Each entry: layer (0 = embedding, i + 1 = after block i), name, token_ids (top-k, most likely
    first), token_texts, probs, and the chosen token's rank (1 = the top token) and prob.
    """
    step = int(step)
    if not 0 <= step < len(result.path):
        raise ValueError(f"step {step} is outside this run's steps 0..{len(result.path) - 1}")
    row = _row(lm, result, step, top_k, cache)
    names = layer_names(row["rank"].shape[0] - 1)
    entries = []
    for i, name in enumerate(names):
        ids = [int(t) for t in row["top_ids"][i, :top_k]]
        entries.append({
            "layer": i, "name": name, "token_ids": ids, "token_texts": lm.token_texts(ids),
            "probs": [float(p) for p in row["top_probs"][i, :top_k]], "rank": int(row["rank"][i]),
            "prob": float(row["prob"][i]),
        })
    return entries


def strip_steps(n_steps: int, selected: int, width: int = STRIP_STEPS) -> list[int]:
    """The steps a rank strip shows: all of them when few, else a window of `width` around `selected`."""
    if n_steps <= width:
        return list(range(n_steps))
    start = min(max(0, selected - width // 2), n_steps - width)
    return list(range(start, start + width))


def lens_flops(lm: LoadedModel) -> int:
    """FLOPs of one step's lens: (L + 1) rows through the head, 2 · (L + 1) · d · V."""
    c = lm.config
    return 2 * (c.n_layers + 1) * c.d_model * c.vocab_size


def logit_lens_ranks(
    lm: LoadedModel,
    result: GenerationResult,
    steps: Sequence[int] | None = None,
    *,
    cache: RunCache | None = None,
    around: int | None = None,
    max_flops: float | None = None,
) -> dict[str, Any]:
    """The chosen token's rank and prob per layer × step (the heat strip).

    steps: which steps (default: all; `strip_steps` picks a window around the selected one).
    max_flops: a budget for one call, for big models: only the uncomputed steps nearest to `around`
    (default: the middle of `steps`) that fit are computed, at least one; the others are NaN until a
    later call (with the same `cache`) reaches them. None: compute every step asked for.
    Returns ranks (L + 1, n) float (NaN: not computed yet), probs (L + 1, n), computed (n,) bool,
    steps, layer_names, token_texts (the chosen tokens).
    """
    steps = list(range(len(result.path))) if steps is None else [int(s) for s in steps]
    if cache is not None:
        cache.check_result(result)
    held = cache.lens_rows if cache is not None else {}
    missing = [s for s in steps if s not in held]
    if max_flops is not None and missing:
        centre = (steps[0] + steps[-1]) / 2 if around is None else around
        missing.sort(key=lambda s: (abs(s - centre), s))
        missing = missing[: max(1, int(max_flops // lens_flops(lm)))]
    fresh = {s: _row(lm, result, s, 1, cache) for s in missing}
    rows = [held.get(s) or fresh.get(s) for s in steps]
    layers = lm.config.n_layers + 1
    blank = np.full(layers, np.nan)
    ranks, probs = np.zeros((layers, len(rows))), np.zeros((layers, len(rows)))
    for j, r in enumerate(rows):
        ranks[:, j], probs[:, j] = (blank, blank) if r is None else (r["rank"], r["prob"])
    return {
        "ranks": ranks, "probs": probs, "computed": np.array([r is not None for r in rows], dtype=bool),
        "steps": steps, "layer_names": layer_names(layers - 1),
        "token_texts": lm.token_texts([result.path[s].token_id for s in steps]),
    }
