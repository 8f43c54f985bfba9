"""What a KV-cache policy does to a run: attention-sink mass, bytes saved, divergence, long-context perplexity.

- `sink_mass`: how much attention every head gives the first token, averaged over a run's steps
  (StreamingLLM's observation: many heads park their weight there, which is why evicting it hurts).
- `bytes_saved`: the KV bytes each run holds at its end against the plain run's.
- `policy_divergence`: per step, KL(plain ‖ policy) of the next-token distributions along the plain
  run's tokens (teacher forcing: both read the same prefix), the plain token's rank and probability
  under the policy, and the first step where the policy's own (free-running) tokens differ.
- `continuation_nll`: the teacher-forced negative log-likelihood of a given continuation after a
  context, under a run's RoPE scaling (or none): the perplexity past the trained length.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from playground.analysis.divergence import Divergence, first_difference
from playground.generation.config import GenerationConfig, SettingsError
from playground.generation.engine import drain, generate, generate_all
from playground.generation.plan import Plan, as_ids, plan
from playground.loaded import LoadedModel
from playground.models.kv_policy import KVPolicy
from playground.models.rope_scaling import RopeScalingError, rotary_override


def sink_mass(lm: LoadedModel, prompt: str | list[int], cfg: GenerationConfig | None = None) -> np.ndarray:
    """(layers, heads): the attention weight the new token puts on position 0, averaged over every step of
    the run `cfg` describes (greedy, 32 tokens by default). Each layer computes the explicit softmax."""
    return drain(iter_sink_mass(lm, prompt, cfg))


def iter_sink_mass(lm: LoadedModel, prompt: str | list[int], cfg: GenerationConfig | None = None,
                   ) -> Generator[None, None, np.ndarray]:
    """`sink_mass` one decoding step per `next()` (for callers sharing the torch thread)."""
    cfg = (cfg or GenerationConfig()).replace(capture_attention=True, attention_layers=None, top_candidates=0)
    per_step = []
    for event in generate(lm, prompt, cfg):
        per_step.append(np.stack([w[:, 0] for w in event.attention["self"]]))  # (L, h)
        yield
    if not per_step:
        raise ValueError("the run produced no step to measure")
    return np.mean(per_step, axis=0)


def bytes_saved(runs: Mapping[str, Any], plain: str = "plain") -> list[dict[str, Any]]:
    """One row per run (name -> a GenerationResult, or its final `cache` dict): the KV bytes held at the
    end, the plain run's, and the saving in bytes and as a fraction."""
    caches = {name: getattr(run, "cache", run) for name, run in runs.items()}
    base = caches[plain]["bytes"]
    return [{"run": name, "bytes": c["bytes"], "plain_bytes": base, "saved_bytes": base - c["bytes"],
             "saved_fraction": (base - c["bytes"]) / base if base else 0.0, "kept_positions": c.get("kept_positions", c["tokens"])}
            for name, c in caches.items()]


def _teacher_forced(p: Plan, tokens: Sequence[int]) -> Generator[None, None, torch.Tensor]:
    """(n, V) float64 next-token log-probabilities of plan `p`'s model and cache along `tokens`, one forward pass
    per `next()` (inference mode within each pass only, as the engine's steps)."""
    lm = p.lm
    stepper = p.stepper(lm.model, batch=1, max_tokens=p.max_length, use_cache=True, policy=p.policy)
    device = lm.device
    with torch.inference_mode():
        rows = [stepper.start(torch.tensor(p.prompt_ids, device=device), torch.tensor(p.prefix_ids, device=device))]
    yield
    for t in tokens[:-1]:
        with torch.inference_mode():
            rows.append(stepper.step(torch.tensor([int(t)], device=device)))
        yield
    return torch.log_softmax(torch.cat(rows).double(), dim=-1)


def policy_divergence(
    lm: LoadedModel, prompt: str | list[int], policy_cfg: GenerationConfig, plain_cfg: GenerationConfig | None = None
) -> Divergence:
    """How a policy run (`policy_cfg`: kv_window, kv_dtype, rope_scaling ...) departs from the plain run
    (`plain_cfg`, default: `policy_cfg` with every KV setting off), step by step (see the module doc)."""
    plain_cfg = plain_cfg or policy_cfg.replace(kv_window=None, kv_sink=0, kv_heavy=0, kv_dtype=None, rope_scaling=None)
    plain_run = generate_all(lm, prompt, plain_cfg)
    policy_run = generate_all(lm, prompt, policy_cfg)
    return divergence_along(lm, prompt, plain_cfg, policy_cfg, list(plain_run.token_ids), list(policy_run.token_ids))


def divergence_along(
    lm: LoadedModel, prompt: str | list[int], plain_cfg: GenerationConfig, policy_cfg: GenerationConfig,
    tokens: Sequence[int], policy_tokens: Sequence[int],
) -> Divergence:
    """`policy_divergence` for two runs already made: the plain run's `tokens` read teacher-forced by both
    caches, and the first step where the policy run's own `policy_tokens` differ."""
    return drain(iter_divergence_along(lm, prompt, plain_cfg, policy_cfg, tokens, policy_tokens))


def iter_divergence_along(
    lm: LoadedModel, prompt: str | list[int], plain_cfg: GenerationConfig, policy_cfg: GenerationConfig,
    tokens: Sequence[int], policy_tokens: Sequence[int],
) -> Generator[None, None, Divergence]:
    """`divergence_along` one forward pass per `next()` (for callers sharing the torch thread)."""
    tokens = [int(t) for t in tokens]
    if not tokens:
        raise ValueError("the plain run has no tokens to compare")
    n = len(tokens)
    a = yield from _teacher_forced(plan(lm, prompt, plain_cfg.replace(max_new_tokens=n)), tokens)
    b = yield from _teacher_forced(plan(lm, prompt, policy_cfg.replace(max_new_tokens=n)), tokens)
    kl = (a.exp() * (a - b)).sum(-1).clamp_min(0).numpy()
    idx = torch.tensor(tokens)[:, None]
    chosen_b = b.gather(1, idx)[:, 0]
    rank = (b > chosen_b[:, None]).sum(-1).numpy()
    return Divergence(kl=kl, rank=rank, prob=chosen_b.exp().numpy(), original_prob=a.gather(1, idx)[:, 0].exp().numpy(),
                      tokens=tokens, first_difference=first_difference(tokens, list(policy_tokens)))


def continuation_nll(
    lm: LoadedModel, context: str | list[int], continuation: str | list[int], rope_scaling: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Teacher-forced NLL (nats) of each `continuation` token after `context`, in one pass with the run's
    own RoPE table for `rope_scaling` (None: the checkpoint's). Returns {"nll": [...], "mean_nll",
    "perplexity", "positions": the sequence length, "rope_scaling"}."""
    if lm.kind != "decoder":
        raise SettingsError("continuation_nll reads a decoder-only model")
    cfg = GenerationConfig()
    ctx = as_ids(lm, context, cfg) if not isinstance(context, list) else list(context)
    cont = as_ids(lm, continuation, cfg) if not isinstance(continuation, list) else list(continuation)
    if not ctx or not cont:
        raise SettingsError("continuation_nll needs a non-empty context and continuation")
    ids = torch.tensor([ctx + cont], device=lm.device)
    cache = None
    if rope_scaling is not None:
        try:
            policy = KVPolicy(rotary=rotary_override(lm.config, rope_scaling))
        except RopeScalingError as error:
            raise SettingsError(str(error)) from None
        cache = lm.model.new_cache(1, ids.shape[1], policy=policy)
    limit = cache.position_limit if cache is not None else lm.config.max_positions
    if ids.shape[1] > limit:
        raise SettingsError(
            f"context plus continuation is {ids.shape[1]} tokens; the model reaches {limit}: shorten them or set rope_scaling"
        )
    with torch.inference_mode():
        logits = lm.model(ids, cache).double()[0]  # (T, V)
    logp = torch.log_softmax(logits[len(ctx) - 1 : -1], dim=-1)
    nll = -logp.gather(1, torch.tensor(cont, device=lm.device)[:, None])[:, 0].cpu()
    mean = float(nll.mean())
    return {"nll": nll.tolist(), "mean_nll": mean, "perplexity": math.exp(mean), "positions": int(ids.shape[1]),
            "rope_scaling": dict(rope_scaling) if rope_scaling is not None else None}
