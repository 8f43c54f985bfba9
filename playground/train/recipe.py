"""The seeds' training recipe, shared by both tasks.

- teacher forcing: the model reads the target shifted right and predicts every next token at once
  (the tasks build `inputs` / `targets` pairs; positions with target -100 are ignored);
- cross-entropy with label smoothing 0.1: (1 - ε)·NLL + ε·mean over the vocabulary of -log p;
- AdamW (β = 0.9, 0.98, ε = 1e-9 as in "Attention is all you need"), weight decay on matrices only;
- learning rate: linear warm-up, then inverse-square-root ("noam") or cosine decay;
- gradient clipping at global norm 1.0;
- seeded: the same seed and thread count give the same losses, step for step;
- periodic evaluation, optionally keeping the weights of the best evaluation.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from playground.train.progress import Progress

IGNORE = -100


@dataclass
class Recipe:
    steps: int
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up
    warmup: int = 100
    schedule: Literal["cosine", "inverse_sqrt"] = "cosine"
    min_lr_ratio: float = 0.1  # cosine: final lr = peak · min_lr_ratio
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    clip: float = 1.0
    label_smoothing: float = 0.1
    eval_every: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps <= 0 or self.warmup < 0:
            raise ValueError("steps must be positive and warmup non-negative")
        if self.schedule not in ("cosine", "inverse_sqrt"):
            raise ValueError(f"schedule {self.schedule!r}: use 'cosine' or 'inverse_sqrt'")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def lr_factor(step: int, recipe: Recipe) -> float:
    """Multiplier of the peak lr for optimiser step `step` (0-based).

    Warm-up rises linearly to 1 at `warmup`; then `inverse_sqrt` follows sqrt(warmup / step) (the
    seeds' d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), rescaled so the peak is `lr`), and
    `cosine` falls along half a cosine to `min_lr_ratio` at the last step.
    """
    s = step + 1
    w = max(1, recipe.warmup)
    if s <= w:
        return s / w
    if recipe.schedule == "inverse_sqrt":
        return math.sqrt(w / s)
    progress = min(1.0, (s - w) / max(1, recipe.steps - w))
    return recipe.min_lr_ratio + (1 - recipe.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def label_smoothed_loss(
    logits: torch.Tensor, targets: torch.Tensor, smoothing: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(smoothed loss, plain NLL, counted tokens), both means over targets != IGNORE.

    logits (B, T, V), targets (B, T). Same definition as `F.cross_entropy(label_smoothing=ε)`; the
    plain NLL comes from the same log-softmax, for perplexity.
    """
    logp = F.log_softmax(logits.float().flatten(0, 1), dim=-1)  # (N, V)
    flat = targets.flatten()
    keep = flat != IGNORE
    logp, flat = logp[keep], flat[keep]
    nll = -logp.gather(1, flat[:, None]).squeeze(1)  # (N,)
    smooth = -logp.mean(dim=-1)
    loss = (1 - smoothing) * nll + smoothing * smooth
    return loss.mean(), nll.mean().detach(), int(flat.numel())


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass


def make_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.AdamW:
    """AdamW; matrices (incl. the tied embedding) decay, norms and biases do not (as nanoGPT)."""
    decay, plain = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else plain).append(p)
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas, eps=recipe.eps)


@dataclass
class TrainResult:
    history: list[dict[str, float]] = field(default_factory=list)  # one row per logged step
    evals: list[dict[str, float]] = field(default_factory=list)  # one row per evaluation
    best: dict[str, float] | None = None
    seconds: float = 0.0
    recipe: dict[str, Any] = field(default_factory=dict)  # the Recipe the run followed

    @property
    def losses(self) -> list[float]:
        return [row["loss"] for row in self.history]

    def curves(self, digits: int = 6) -> dict[str, list[float]]:
        """Per logged step: step, loss, nll, lr, grad_norm as parallel lists (what the training view draws)."""
        keys = ("step", "loss", "nll", "lr", "grad_norm")
        return {k: [row[k] if k == "step" else float(f"{row[k]:.{digits}g}") for row in self.history] for k in keys}


def train(
    model: nn.Module,
    recipe: Recipe,
    batch_fn: Callable[[int], tuple[tuple[torch.Tensor, ...], torch.Tensor]],
    forward_fn: Callable[[nn.Module, tuple[torch.Tensor, ...]], torch.Tensor],
    *,
    evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
    keep_best: str | None = None,
    progress: Progress | None = None,
) -> TrainResult:
    """Run `recipe.steps` optimiser steps with teacher forcing.

    batch_fn(step) -> (model inputs, targets); forward_fn(model, inputs) -> logits (B, T, V).
    evaluate(model) -> metrics, every `eval_every` steps and at the end (model in eval mode, no grads).
    keep_best: a metric to minimise; the weights of the best evaluation are restored at the end.
    """
    seed_everything(recipe.seed)
    optimizer = make_optimizer(model, recipe)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, recipe))
    result = TrainResult(recipe=recipe.to_dict())
    best_state: dict[str, torch.Tensor] | None = None
    started = time.perf_counter()
    for step in range(recipe.steps):
        model.train()
        inputs, targets = batch_fn(step)
        logits = forward_fn(model, inputs)
        loss, nll, _ = label_smoothed_loss(logits, targets, recipe.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        row = {"step": step + 1, "loss": loss.item(), "nll": nll.item(), "lr": lr, "grad_norm": float(grad_norm)}
        result.history.append(row)
        if progress is not None:
            progress.update(step + 1, row["loss"], lr)
        last = step + 1 == recipe.steps
        if evaluate is not None and ((step + 1) % recipe.eval_every == 0 or last):
            model.eval()
            with torch.no_grad():
                metrics = {"step": step + 1, **evaluate(model)}
            result.evals.append(metrics)
            if progress is not None:
                progress.write("eval " + "  ".join(_fmt(k, v) for k, v in metrics.items()))
            if keep_best is not None and (result.best is None or metrics[keep_best] < result.best[keep_best]):
                result.best = metrics
                best_state = copy.deepcopy(model.state_dict())
    if best_state is not None:
        model.load_state_dict(best_state)
    elif result.evals:
        result.best = result.evals[-1]
    model.eval()
    result.seconds = time.perf_counter() - started
    if progress is not None:
        progress.close()
    return result


def _fmt(key: str, value: float) -> str:
    return f"{key} {value}" if isinstance(value, int) else f"{key} {value:.4f}"
