"""Positional encodings: rotary (RoPE), sinusoidal and learned absolute positions.

The tables are pure functions of the config so the positional-encoding panel can plot exactly what
the model uses. (T5's relative position bias lives in `relative_bias`.)
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn

from playground.config import ModelConfig
from playground.models.rope_scaling import RotaryOverride


def rope_inverse_frequencies(config: ModelConfig, *, local: bool = False, seq_len: int | None = None) -> torch.Tensor:
    """theta_i = base^(-2i/r) for each rotating pair of dims (r = rotary_dims), scaling applied. (r/2,)

    local: the table of sliding layers when the config gives them their own base (Gemma 3: unscaled).
    seq_len: the length a forward pass reaches; only longrope depends on it (long factors past the
    original context, short ones before, as transformers switches them per forward pass).
    """
    dim = config.rotary_dims
    base = config.rope_local_theta if local and config.rope_local_theta is not None else config.rope_theta
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    scaling = {} if local else config.rope_scaling or {}
    kind = scaling.get("rope_type", "default")
    if kind == "longrope":
        long = seq_len is not None and seq_len > scaling["original_max_position_embeddings"]
        factors = torch.tensor(scaling["long_factor" if long else "short_factor"], dtype=torch.float32)
        return 1.0 / (factors * base**exponents)
    inv_freq = 1.0 / (base**exponents)
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        inv_freq = _llama3_scaled(inv_freq, scaling)
    return inv_freq


def rope_attention_factor(config: ModelConfig, *, local: bool = False) -> float:
    """Factor on cos and sin (longrope: sqrt(1 + ln(factor) / ln(original context)); otherwise 1)."""
    scaling = {} if local else config.rope_scaling or {}
    if scaling.get("rope_type") != "longrope":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    original = scaling["original_max_position_embeddings"]
    # transformers derives the factor from the context lengths when the config does not give it
    factor = scaling.get("factor") or config.max_positions / original
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


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
    """cos/sin for positions [start, start + T) over the rotary dims (Llama's halves layout).

    local: the sliding layers' own table (Gemma 3). Longrope switches to its long factors for a
    forward pass that reaches past the original context, exactly as transformers does.
    """

    def __init__(self, config: ModelConfig, *, local: bool = False) -> None:
        super().__init__()
        self.config, self.local = config, local
        scaling = {} if local else config.rope_scaling or {}
        self.switch_after = scaling.get("original_max_position_embeddings") if scaling.get("rope_type") == "longrope" else None
        self.attention_factor = rope_attention_factor(config, local=local)
        self.register_buffer("inv_freq", rope_inverse_frequencies(config, local=local), persistent=False)
        self.register_buffer("long_inv_freq", self._long(), persistent=False)

    def _long(self) -> torch.Tensor | None:
        if self.switch_after is None:
            return None
        return rope_inverse_frequencies(self.config, local=self.local, seq_len=self.switch_after + 1)

    def reset_buffers(self) -> None:
        """Recompute the table after the module was built on the meta device."""
        self.inv_freq = rope_inverse_frequencies(self.config, local=self.local)
        self.long_inv_freq = self._long()

    def forward(
        self, start: int, length: int, dtype: torch.dtype, override: RotaryOverride | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (T, r) for positions [start, start + length); `override`: one run's own scaled table
        (`rope_scaling`), used instead of this module's buffers, which stay as loaded."""
        inv_freq, attention_factor = self.inv_freq, self.attention_factor
        if override is not None:
            inv_freq, attention_factor = override.inv_freq.to(inv_freq.device), override.attention_factor
        elif self.switch_after is not None and start + length > self.switch_after:
            inv_freq = self.long_inv_freq
        positions = torch.arange(start, start + length, device=inv_freq.device, dtype=torch.float32)
        return self._tables(torch.outer(positions, inv_freq), attention_factor, dtype)  # (T, r)

    def at(self, positions: torch.Tensor, dtype: torch.dtype, *, long: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (N, r) at a tensor of positions (N,): what a captured step reads, without a Python int.
        `long`: longrope's long factors (a run that is past the original context from its prompt on)."""
        inv_freq = self.long_inv_freq if long else self.inv_freq
        freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (N, r/2), as `outer` computes it
        return self._tables(freqs, self.attention_factor, dtype)

    @staticmethod
    def _tables(freqs: torch.Tensor, attention_factor: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.cat((freqs, freqs), dim=-1)  # (., r)
        if attention_factor != 1.0:
            return (angles.cos() * attention_factor).to(dtype), (angles.sin() * attention_factor).to(dtype)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, h, T, d); cos/sin: (T, r), r <= d. Rotates (x_i, x_{i+r/2}) by angle_i for i < r/2;
    dims r..d-1 pass through unchanged (partial rotary)."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        return torch.cat((apply_rope(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    half = r // 2
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


def positional_layout(config: ModelConfig) -> dict[str, Any]:
    """Where positions enter the model, per layer: the positional-encoding panel's data (JSON-serialisable).

    Keys: "scheme" (config.positional); "head_dim"; "rotary_dims" (leading dims of each head that
    rotate, 0 without RoPE); "rotary_pairs" ([i, i + r/2] dims turned together by angle i);
    "pass_through_dims" (dims never rotated: partial rotary); "tables" ({"global"/"local": {"base",
    "scaling", "attention_factor", "inv_freq" (r/2 floats), "layers"}}); "nope_layers" (RoPE models'
    layers without positional information); "layers" (per layer: index, attention, window, rope,
    rope_theta, rope_scaling, rotary_dims, as `ModelConfig.layer_kinds()`).
    """
    kinds = config.layer_kinds()
    rope = config.positional == "rope"
    r = config.rotary_dims if rope else 0
    tables: dict[str, Any] = {}
    for name in ("global", "local"):
        layers = [k.index for k in kinds if k.rope == name]
        if not layers:
            continue
        local = name == "local"
        tables[name] = {
            "base": config.rope_local_theta if local else config.rope_theta,
            "scaling": None if local or not config.rope_scaling else config.rope_scaling.get("rope_type"),
            "attention_factor": rope_attention_factor(config, local=local),
            "inv_freq": rope_inverse_frequencies(config, local=local).double().tolist(),
            "layers": layers,
        }
    return {
        "scheme": config.positional,
        "head_dim": config.head_dim,
        "rotary_dims": r,
        "rotary_pairs": [[i, i + r // 2] for i in range(r // 2)],
        "pass_through_dims": list(range(r, config.head_dim)) if rope else [],
        "tables": tables,
        "nope_layers": [k.index for k in kinds if rope and k.rope is None],
        "layers": [k.to_dict() for k in kinds],
    }


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

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Vectors at a tensor of positions (N,) -> (N, d) (a captured step's)."""
        return self.table[positions]


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

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Vectors at a tensor of positions (N,) -> (N, d) (a captured step's)."""
        return super().forward(positions + self.offset)


def absolute_positions(config: ModelConfig) -> nn.Module | None:
    """The module adding position vectors to the embeddings, or None (RoPE, relative bias, none)."""
    if config.positional == "sinusoidal":
        fairseq = config.sinusoidal_layout == "fairseq"
        return FairseqSinusoidalPositions(config) if fairseq else SinusoidalPositions(config)
    if config.positional == "learned":
        return LearnedPositions(config)
    return None
