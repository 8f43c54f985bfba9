"""The precision what-if: the same prompt and seed in float32 and at lower weight precisions, aligned.

Per precision (a branch of the float32 run; `playground.models.quantize` says what each does to the
weights, `playground.variants` how the run's model is built):
- free running: its own tokens with the same settings and seed, the first generated token that differs
  from float32's, and its measured decode speed (tokens/s);
- teacher-forced on float32's tokens, so the steps stay comparable after the texts part: per step
  KL(p_fp32 ‖ p_prec) in nats and whether both put the same token on top, from the raw next-token
  distributions (softmax of the logits, before temperature, top-k or top-p);
- at the first differing step (or, without one, the step of the largest KL): the relative error
  ‖h_prec − h_fp32‖ / ‖h_fp32‖ of the residual stream after the embedding and after each block, both
  models reading the same prefix — the layer where it jumps is where the error gets in;
- the bytes of weights one generated token reads at that precision (`playground.variants.weight_bytes_per_token`).

`kl_per_step`, `top1_agreement`, `relative_errors` and `first_difference` are pure; `compare_precisions`
runs the passes they need. Everything returned is plain JSON-ready data (`to_dict`).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from playground.analysis.divergence import first_difference
from playground.generation.config import GenerationConfig
from playground.generation.engine import drain, generate_all, iter_generate_all
from playground.generation.events import GenerationResult
from playground.loaded import LoadedModel
from playground.models.quantize import PRECISIONS
from playground.variants import Variant, describe, variant, weight_bytes_per_token

Choice = str | tuple[str, bool]  # a precision, or (precision, real): real=False forces the simulated variant


def kl_per_step(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    """KL(softmax(reference) ‖ softmax(other)) per row, nats; logits (n, V) -> (n,)."""
    p = torch.log_softmax(torch.as_tensor(reference, dtype=torch.float64), dim=-1)
    q = torch.log_softmax(torch.as_tensor(other, dtype=torch.float64), dim=-1)
    return (p.exp() * (p - q)).sum(-1).clamp_min(0.0).numpy()


def top1_agreement(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Whether each row's highest logit is the same token; (n, V) -> (n,) bool."""
    return np.argmax(reference, axis=-1) == np.argmax(other, axis=-1)


def relative_errors(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    """‖other − reference‖ / ‖reference‖ per row (per layer of a residual stream (L + 1, d))."""
    ref, oth = np.asarray(reference, dtype=np.float64), np.asarray(other, dtype=np.float64)
    return np.linalg.norm(oth - ref, axis=-1) / np.maximum(np.linalg.norm(ref, axis=-1), 1e-30)


def error_entry(errors: Sequence[float]) -> int | None:
    """Where the residual stream's relative error grows most: 0 = the embedding, k + 1 = block k."""
    if not errors:
        return None
    return int(np.argmax(np.diff(np.concatenate([[0.0], np.asarray(errors, dtype=np.float64)]))))


@dataclass
class PrecisionBranch:
    precision: str
    label: str  # the precision, with " (simulated)" when forced to simulate a natively run dtype
    simulated: bool
    compute: str  # the dtype the weight products ran in
    description: str
    token_ids: list[int]
    text: str
    first_difference: int | None  # first generated token (free running) that differs from float32's; None: same
    kl: list[float]  # per step, teacher-forced on float32's tokens, nats
    top1: list[bool]  # per step, the same top token as float32 on the same prefix
    residual_step: int | None  # the step whose residual stream is compared
    residual_reason: str  # "first difference", "largest KL" or "none"
    residual_error: list[float]  # after the embedding, then after each block
    error_entry: int | None  # where that error grows most: 0 = the embedding, k + 1 = block k
    weight_bytes_per_token: int
    tokens_per_s: float
    build_seconds: float

    @property
    def mean_kl(self) -> float:
        return float(np.mean(self.kl)) if self.kl else 0.0

    @property
    def agreement(self) -> float:
        return float(np.mean(self.top1)) if self.top1 else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mean_kl": self.mean_kl, "agreement": self.agreement}


@dataclass
class PrecisionReport:
    prompt_ids: list[int]
    decoder_prefix: list[int]
    reference_ids: list[int]  # float32's tokens, the ones every branch is teacher-forced on
    reference_text: str
    branches: list[PrecisionBranch] = field(default_factory=list)

    def branch(self, label: str) -> PrecisionBranch:
        return next(b for b in self.branches if b.label == label)

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_ids": list(self.prompt_ids), "decoder_prefix": list(self.decoder_prefix),
                "reference_ids": list(self.reference_ids), "reference_text": self.reference_text,
                "branches": [b.to_dict() for b in self.branches]}


def _label(precision: str, real: bool | None, simulated: bool) -> str:
    """The precision, marked when a choice forced its simulated or its native variant."""
    if real is False and precision in ("bfloat16", "float16"):
        return f"{precision} (simulated)"
    if real is True and not simulated:  # a native dtype, or int8 / int4 codes on their own kernels
        return f"{precision} (native)"
    return precision


def _forced_logits(lm: LoadedModel, run: GenerationResult, tokens: list[int]) -> np.ndarray:
    """The raw logits (n, V) of each of `tokens`' positions, the model (with the run's edits, if any)
    reading the run's prefix + tokens."""
    prefix = list(run.decoder_prefix)
    ids = prefix + tokens[:-1]
    edits = run.interventions
    with torch.inference_mode():
        if lm.kind == "seq2seq":
            logits = lm.logits([list(run.prompt_ids)], [ids], interventions=edits)[0]
        else:
            logits = lm.logits([ids], interventions=edits)[0]
    start = len(prefix) - 1
    return logits[start:start + len(tokens)].double().cpu().numpy()


def _residual(lm: LoadedModel, run: GenerationResult, cfg: GenerationConfig, step: int) -> np.ndarray:
    """(L + 1, d): the residual stream of the position that chooses token `step`, the model reading the
    run's prompt and its first `step` tokens (the engine's own capture, on a one-token forced branch)."""
    probe = cfg.replace(max_new_tokens=1, capture_residual=True, capture_attention=False, num_beams=1,
                        temperature=0.0, top_candidates=0, chat=False, stop_strings=(), weight_precision=None)
    ids = list(run.prompt_ids)
    out = generate_all(lm, ids, probe, forced_prefix=run.token_ids[:step])
    return np.asarray(out.steps[0].residual)


def _timed_run(lm: LoadedModel, prompt: Any, cfg: GenerationConfig, repeats: int,
               ) -> Generator[None, None, tuple[GenerationResult, float]]:
    """The run and its best decode rate over `repeats` runs (a shared machine's noise only slows a run), one
    step per slice."""
    best, run = 0.0, None
    for _ in range(max(1, repeats)):
        run = yield from iter_generate_all(lm, prompt, cfg)
        best = max(best, float(run.timing.get("tokens_per_s", 0.0)))
    return run, best


def compare_precisions(
    lm: LoadedModel,
    prompt: str | list[int],
    cfg: GenerationConfig | None = None,
    precisions: Sequence[Choice] = PRECISIONS,
    *,
    repeats: int = 1,
) -> PrecisionReport:
    """Run `prompt` with `cfg` (same seed) in float32 and in each of `precisions`, and compare them
    (module docstring). A precision may be `(precision, False)` to force its simulated variant.
    `repeats`: free runs per precision, the best decode rate kept."""
    return drain(iter_compare_precisions(lm, prompt, cfg, precisions, repeats=repeats))


def iter_compare_precisions(
    lm: LoadedModel,
    prompt: str | list[int],
    cfg: GenerationConfig | None = None,
    precisions: Sequence[Choice] = PRECISIONS,
    *,
    repeats: int = 1,
) -> Generator[None, None, PrecisionReport]:
    """`compare_precisions` in slices: one decoding step, one teacher-forced pass or one residual probe per
    `next()` (for callers that share the torch thread); returns the report."""
    cfg = (cfg or GenerationConfig()).replace(weight_precision=None)
    reference_variant = variant(lm, "float32")
    reference_lm = reference_variant.lm
    reference, reference_rate = yield from _timed_run(reference_lm, prompt, cfg, repeats)
    tokens = list(reference.token_ids)
    report = PrecisionReport(list(reference.prompt_ids), list(reference.decoder_prefix), tokens, reference.text)
    if not tokens:
        return report
    ref_logits = _forced_logits(reference_lm, reference, tokens)
    yield
    residuals: dict[int, np.ndarray] = {}
    for choice in precisions:
        precision, real = (choice, None) if isinstance(choice, str) else choice
        started = time.perf_counter()
        chosen: Variant = variant(lm, precision, real=real)
        built = time.perf_counter() - started
        if chosen.lm is reference_lm:
            run, rate = reference, reference_rate
        else:
            run, rate = yield from _timed_run(chosen.lm, prompt, cfg, repeats)
        logits = ref_logits if chosen.lm is reference_lm else _forced_logits(chosen.lm, reference, tokens)
        yield
        kl = kl_per_step(ref_logits, logits)
        diff = first_difference(tokens, list(run.token_ids))
        step, reason = (diff, "first difference") if diff is not None and diff < len(tokens) else (None, "none")
        if step is None and float(kl.max()) > 0.0:
            step, reason = int(np.argmax(kl)), "largest KL"
        errors: list[float] = []
        if step is not None:
            if step not in residuals:
                residuals[step] = _residual(reference_lm, reference, cfg, step)
                yield
            errors = relative_errors(residuals[step], _residual(chosen.lm, reference, cfg, step)).tolist()
            yield
        report.branches.append(PrecisionBranch(
            precision=precision, label=_label(precision, real, chosen.simulated),
            simulated=chosen.simulated, compute=chosen.compute,
            description=describe(precision, simulated=chosen.simulated), token_ids=list(run.token_ids),
            text=run.text, first_difference=diff, kl=kl.tolist(), top1=top1_agreement(ref_logits, logits).tolist(),
            residual_step=step, residual_reason=reason, residual_error=errors, error_entry=error_entry(errors),
            weight_bytes_per_token=weight_bytes_per_token(reference_lm, precision),
            tokens_per_s=round(rate, 3), build_seconds=round(built, 4),
        ))
    return report
