"""Positional encodings: rotary (RoPE), sinusoidal and learned absolute positions.

The tables are pure functions of the config so the positional-encoding panel can plot exactly what
the model uses. (T5's relative position bias lives in `relative_bias`.)
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from playground.config import ModelConfig


def rope_inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """theta_i = base^(-2i/d) for each dimension pair, with the config's RoPE scaling applied. (d/2,)"""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = config.rope_scaling or {}
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        inv_freq = _llama3_scaled(inv_freq, scaling)
    return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    # Llama 3.1: long wavelengths are slowed down by `factor`, short ones kept, smooth in between.
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = original / low, original / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    """cos/sin for positions [start, start + T), rotating the two halves of each head (Llama layout)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("inv_freq", rope_inverse_frequencies(config), persistent=False)

    def reset_buffers(self) -> None:
        """Recompute the table after the module was built on the meta device."""
        self.inv_freq = rope_inverse_frequencies(self.config)

    def forward(self, start: int, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start, start + length, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)  # (T, d/2)
        angles = torch.cat((freqs, freqs), dim=-1)  # (T, d)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, h, T, d); cos/sin: (T, d). Rotates (x_i, x_{i+d/2}) by angle_i."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def sinusoidal_table(
    length: int,
    dim: int,
    base: float = 10000.0,
    layout: Literal["interleaved", "halves"] = "interleaved",
) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)). (length, dim)

    "interleaved" is the paper's layout (sin, cos, sin, cos...); "halves" puts all sines first
    and then all cosines, as Marian's checkpoints expect.
    """
    positions = torch.arange(length, dtype=torch.float64)[:, None]
    rates = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (ceil(d/2),)
    angles = positions * rates
    table = torch.zeros(length, dim, dtype=torch.float64)
    n_sin, n_cos = (dim + 1) // 2, dim // 2
    if layout == "interleaved":
        table[:, 0::2] = torch.sin(angles)[:, :n_sin]
        table[:, 1::2] = torch.cos(angles)[:, :n_cos]
    else:
        table[:, :n_sin] = torch.sin(angles)[:, :n_sin]
        table[:, n_sin:] = torch.cos(angles)[:, :n_cos]
    return table.float()


def positional_kind_label(config: ModelConfig) -> str:
    """A human name for the config's positional scheme (model card, `info`)."""
    return {
        "rope": f"RoPE (rotary, base {config.rope_theta:g})",
        "learned": "learned absolute positions"
        + (f" (offset {config.learned_position_offset})" if config.learned_position_offset else ""),
        "sinusoidal": f"sinusoidal (base {config.sinusoidal_base:g}"
        + (", sin half | cos half)" if config.sinusoidal_layout == "halves" else ")"),
        "relative": f"T5 relative position bias ({config.relative_buckets} buckets)",
        "none": "none",
    }[config.positional]


class SinusoidalPositions(nn.Module):
    """A fixed sin/cos table (max_positions, d_model), recomputed rather than stored in checkpoints."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("table", self._table(), persistent=False)

    def _table(self) -> torch.Tensor:
        c = self.config
        return sinusoidal_table(c.max_positions, c.d_model, c.sinusoidal_base, c.sinusoidal_layout)

    def reset_buffers(self) -> None:
        """Recompute the table after the module was built on the meta device."""
        self.table = self._table()

    def forward(self, start: int, length: int) -> torch.Tensor:
        return self.table[start : start + length]  # (T, d)


class LearnedPositions(nn.Embedding):
    """Learned absolute positions; BART stores row p + offset for position p (offset 2)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config.max_positions + config.learned_position_offset, config.d_model)
        self.offset = config.learned_position_offset

    def forward(self, start: int, length: int) -> torch.Tensor:  # type: ignore[override]
        positions = torch.arange(start + self.offset, start + self.offset + length, device=self.weight.device)
        return super().forward(positions)  # (T, d)


def absolute_positions(config: ModelConfig) -> nn.Module | None:
    """The module adding position vectors to the embeddings, or None (RoPE, relative bias, none)."""
    if config.positional == "sinusoidal":
        return SinusoidalPositions(config)
    if config.positional == "learned":
        return LearnedPositions(config)
    return None
