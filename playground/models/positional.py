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
    layout: Literal["interleaved", "halves", "fairseq"] = "interleaved",
) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)). (length, dim)

    "interleaved" is the paper's layout (sin, cos, sin, cos...); "halves" puts all sines first
    and then all cosines, as Marian's and Pegasus' checkpoints expect. "fairseq" gives rows
    0..length-1 of `fairseq_sinusoidal` (whose models read it from row pad + 1 on).
    """
    if layout == "fairseq":
        return fairseq_sinusoidal(torch.arange(length), dim, base)
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


def fairseq_sinusoidal(
    rows: torch.Tensor, dim: int, base: float = 10000.0, padding_idx: int | None = None
) -> torch.Tensor:
    """Rows of fairseq's sinusoidal table (M2M100, NLLB) for integer row indices of any shape -> (..., dim).

    Row r is [sin(r·w_0) … sin(r·w_{h-1}) | cos(r·w_0) … cos(r·w_{h-1})] with w_i = base^(-i/(h-1)),
    h = dim // 2, and a zero last column when dim is odd; row `padding_idx` is all zeros. Computed in
    float32 exactly as transformers builds its table, so nothing needs to be stored.
    """
    half = dim // 2
    rate = math.log(base) / (half - 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.int64, device=rows.device).float() * -rate)  # (h,)
    angles = rows.float().unsqueeze(-1) * freqs  # (..., h)
    parts = [torch.sin(angles), torch.cos(angles)]
    if dim % 2:
        parts.append(torch.zeros_like(angles[..., :1]))
    table = torch.cat(parts, dim=-1)
    if padding_idx is not None:
        table = table.masked_fill((rows == padding_idx).unsqueeze(-1), 0.0)
    return table


def position_vectors(config: ModelConfig, length: int, base: float | None = None) -> torch.Tensor:
    """What a sinusoidal model adds to the embeddings at positions 0..length-1 of an unpadded
    sequence, (length, d_model); `base` replaces the config's base (to compare wavelengths)."""
    base = config.sinusoidal_base if base is None else base
    if config.sinusoidal_layout == "fairseq":
        pad = config.pad_token_id
        return fairseq_sinusoidal(torch.arange(length) + pad + 1, config.d_model, base, pad)
    return sinusoidal_table(length, config.d_model, base, config.sinusoidal_layout)


_SINUSOIDAL_LABELS = {
    "interleaved": ")",
    "halves": ", sin half | cos half)",
    "fairseq": ", fairseq: sin half | cos half, positions from row pad + 1)",
}


def positional_kind_label(config: ModelConfig) -> str:
    """A human name for the config's positional scheme (model card, `info`)."""
    return {
        "rope": f"RoPE (rotary, base {config.rope_theta:g})",
        "learned": "learned absolute positions"
        + (f" (offset {config.learned_position_offset})" if config.learned_position_offset else ""),
        "sinusoidal": f"sinusoidal (base {config.sinusoidal_base:g}" + _SINUSOIDAL_LABELS[config.sinusoidal_layout],
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

    def forward(self, start: int, length: int, ids: torch.Tensor | None = None) -> torch.Tensor:
        """Vectors for positions [start, start + length), (T, d); the token ids do not matter here."""
        return self.table[start : start + length]


class FairseqSinusoidalPositions(nn.Module):
    """fairseq's sinusoidal positions (M2M100, NLLB), computed on the fly rather than stored.

    As transformers does: a token's row counts the non-padding tokens up to and including it, plus
    `start` (the cached tokens) and pad_token_id; padding tokens get the zero row pad_token_id. An
    unpadded sequence thus reads rows pad + 1 + position.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.dim, self.base, self.pad = config.d_model, config.sinusoidal_base, config.pad_token_id

    def forward(self, start: int, length: int, ids: torch.Tensor | None = None) -> torch.Tensor:
        """(T, d) for positions [start, start + length), or (B, T, d) following the padding in ids (B, T)."""
        if ids is None:
            rows = torch.arange(start, start + length) + self.pad + 1
        else:
            real = ids.ne(self.pad).int()
            rows = (torch.cumsum(real, dim=1).type_as(real) + start) * real + self.pad
        return fairseq_sinusoidal(rows, self.dim, self.base, self.pad)


class LearnedPositions(nn.Embedding):
    """Learned absolute positions; BART stores row p + offset for position p (offset 2)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config.max_positions + config.learned_position_offset, config.d_model)
        self.offset = config.learned_position_offset

    def forward(self, start: int, length: int, ids: torch.Tensor | None = None) -> torch.Tensor:  # type: ignore[override]
        """Vectors for positions [start, start + length), (T, d); the token ids do not matter here."""
        positions = torch.arange(start + self.offset, start + self.offset + length, device=self.weight.device)
        return super().forward(positions)  # (T, d)


def absolute_positions(config: ModelConfig) -> nn.Module | None:
    """The module adding position vectors to the embeddings, or None (RoPE, relative bias, none)."""
    if config.positional == "sinusoidal":
        fairseq = config.sinusoidal_layout == "fairseq"
        return FairseqSinusoidalPositions(config) if fairseq else SinusoidalPositions(config)
    if config.positional == "learned":
        return LearnedPositions(config)
    return None
