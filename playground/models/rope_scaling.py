"""RoPE scaling chosen per run (to read past the trained length), without touching the shared model.

A run's `rope_scaling={"type": ..., "factor": f}` becomes a `RotaryOverride`: the global table's
inverse frequencies, the factor on cos/sin and the longer position limit. It travels with the run's
own KV cache (`models.kv_policy.PolicyCache`), so other runs of the same loaded model, at the same
time, keep the checkpoint's table. The formulas are transformers' rope init functions:

- linear (position interpolation): theta_i / f, i.e. every position read as p / f;
- ntk (NTK-aware, static): base' = base · f^(r / (r − 2)) over the r rotary dims (transformers'
  dynamic NTK reaches the same base at length L·(2f − 1)/f; here it is fixed for the whole run);
- yarn: per pair of dims, interpolated (theta_i / f) below `beta_slow` rotations over the trained
  length L, kept (theta_i) above `beta_fast`, a linear ramp between (bounds floored / ceiled as
  transformers truncates them); cos and sin are multiplied by 0.1 · ln(f) + 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from playground.config import ModelConfig

SCALINGS = ("linear", "ntk", "yarn")
MAX_FACTOR = 64.0  # beyond this the table reads nothing a model was trained on; refuse it


class RopeScalingError(ValueError):
    """A rope_scaling setting that cannot work here; the message says what to change."""


@dataclass(frozen=True)
class RotaryOverride:
    """What a run uses instead of the checkpoint's global rotary table."""

    kind: str
    factor: float
    inv_freq: torch.Tensor  # (r/2,) float32
    attention_factor: float  # on cos and sin (YaRN's temperature; 1 otherwise)
    max_positions: int  # the longest sequence the run may reach: trained length · factor

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "factor": self.factor, "attention_factor": self.attention_factor,
                "max_positions": self.max_positions}


def check_rope_scaling(value: Any) -> tuple[str, float]:
    """Validate a `rope_scaling` setting; returns (type, factor) or raises RopeScalingError (one line)."""
    if not isinstance(value, dict) or set(value) - {"type", "factor"} or "type" not in value or "factor" not in value:
        raise RopeScalingError(
            f"rope_scaling is {value!r}; give a dict like {{'type': 'linear', 'factor': 2.0}} (type: linear, ntk or yarn)"
        )
    kind, factor = value["type"], value["factor"]
    if kind not in SCALINGS:
        raise RopeScalingError(f"rope_scaling type is {kind!r}; use 'linear', 'ntk' or 'yarn'")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) \
            or not 1.0 <= factor <= MAX_FACTOR:
        raise RopeScalingError(f"rope_scaling factor is {factor!r}; use a number between 1 and {MAX_FACTOR:g} (2 doubles the context)")
    return kind, float(factor)


def rotary_override(config: ModelConfig, scaling: dict[str, Any]) -> RotaryOverride:
    """The run's table for `scaling` on a RoPE model whose checkpoint does not scale RoPE itself."""
    kind, factor = check_rope_scaling(scaling)
    if config.positional != "rope":
        raise RopeScalingError(
            f"rope_scaling needs a RoPE model; this one uses {config.positional} positions: leave rope_scaling off"
        )
    if config.rope_scaling:
        raise RopeScalingError(
            f"this checkpoint already scales RoPE ({config.rope_scaling.get('rope_type')}); leave rope_scaling off"
        )
    dim, base, trained = config.rotary_dims, float(config.rope_theta), config.max_positions
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    attention_factor = 1.0
    if kind == "linear":
        inv_freq = 1.0 / (base**exponents) / factor
    elif kind == "ntk":
        inv_freq = 1.0 / ((base * factor ** (dim / (dim - 2))) ** exponents)
    else:
        inv_freq, attention_factor = _yarn(dim, base, factor, trained)
    return RotaryOverride(kind, factor, inv_freq, attention_factor, int(trained * factor))


def _yarn(dim: int, base: float, factor: float, trained: int, beta_fast: float = 32.0, beta_slow: float = 1.0
          ) -> tuple[torch.Tensor, float]:
    def dim_for(rotations: float) -> float:  # the dim whose wavelength fits `rotations` times in `trained`
        return dim * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(dim_for(beta_fast)), 0), min(math.ceil(dim_for(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (the original frequency), 0: interpolate (divided by factor)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep
    attention = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
    return inv_freq, attention
