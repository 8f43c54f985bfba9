"""Weight-only int8 and int4 products for real: the weights held as integer codes and their scales (no
float copy anywhere), multiplied by this machine's kernels.

The codes are those `models.quantize` simulates (int8: per output channel, int4: groups of 32 inputs,
both symmetric), so a real variant rounds its weights exactly as the simulated one does; only the sums
differ (the kernels dequantize and accumulate in their own order). On the CPU:

- int8: `torch.ops.aten._weight_int8pack_mm(x, codes (out, in) int8, scales (out,))`;
- int4: `torch.ops.aten._weight_int4pack_mm_for_cpu` over the codes packed two per byte
  (`_convert_weight_to_int4pack_for_cpu`), with (scale, zero 0) per group: where every matrix has
  out % 16 == 0 and in % 32 == 0 (the kernel's tiles; `fits`).

Both read the activations and the scales in bfloat16 where the CPU has AVX-512 BF16 (their fast path;
in float32 they are plain loops, 10-100× slower than a float32 product): a real variant thus also
rounds each product's input to bfloat16, as the real bfloat16 variant does, and its scales.

The token embedding keeps its codes for the lookup (a looked-up row is dequantized: the simulated
variant's row, bitwise); a tied head multiplies by the same int8 codes, or by an int4-packed copy of them.
"""

from __future__ import annotations

import torch
from torch import nn

from playground.models.layers import TiedHead
from playground.models.quantize import INT4_GROUP, int4_groupwise, int8_per_channel

INT4_TILE = 16  # the int4 kernel packs output channels in tiles of 16
FASTER_ON_CPU: tuple[str, ...] = ()  # where the real products are also faster (the default choice): see docs/speed.md


def available(precision: str, device: torch.device) -> bool:
    """Whether this machine multiplies by `precision` codes for real (CPU kernels in this torch)."""
    ops = torch.ops.aten
    if device.type != "cpu":
        return False
    if precision == "int8":
        return hasattr(ops, "_weight_int8pack_mm")
    if precision == "int4":
        return hasattr(ops, "_weight_int4pack_mm_for_cpu") and hasattr(ops, "_convert_weight_to_int4pack_for_cpu")
    return False


def fits(precision: str, out_features: int, in_features: int) -> bool:
    """Whether a matrix (out, in) has the shape the `precision` kernel takes."""
    return precision == "int8" or (out_features % INT4_TILE == 0 and in_features % INT4_GROUP == 0)


def product_bytes(precision: str, out_features: int, in_features: int) -> int:
    """The bytes of a `_Product`'s codes and scales for an (out, in) matrix (the scales in `activation_dtype()`)."""
    act = activation_dtype().itemsize
    if precision == "int8":
        return out_features * in_features + out_features * act
    return out_features * in_features // 2 + -(-in_features // INT4_GROUP) * out_features * 2 * act


def embedding_bytes(precision: str, vocab: int, dim: int) -> int:
    """The bytes of a `QuantizedEmbedding`'s codes (one byte each) and float32 scales."""
    return vocab * dim + vocab * (1 if precision == "int8" else -(-dim // INT4_GROUP)) * 4


def _codes(precision: str, w_out_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes int8 (out, in), scales float32): (out,) per channel for int8, (out, in / 32) for int4."""
    if precision == "int8":
        q, scale = int8_per_channel(w_out_in)
        return q.contiguous(), scale[:, 0].contiguous()
    q, scale = int4_groupwise(w_out_in)
    return q.contiguous(), scale.contiguous()


def activation_dtype() -> torch.dtype:
    """What the kernels read activations (and scales) in: bfloat16 where the CPU has its fast path (the
    float32 path is a plain loop, 10-100× slower), else float32."""
    return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32


class _Product(nn.Module):
    """x (..., in) @ Wᵀ with W (out, in) held as `precision` codes (buffers, so the module moves with `.to()`);
    the activations cast to `activation_dtype()` for the kernel, the result back in x's dtype."""

    def __init__(self, precision: str, codes: torch.Tensor, scales: torch.Tensor) -> None:
        super().__init__()
        self.precision, self.dtype = precision, activation_dtype()
        self.out_features, self.in_features = codes.shape
        if precision == "int8":
            self.register_buffer("codes", codes)
            self.register_buffer("scales", scales.to(self.dtype))
        else:  # q in [-7, 7] as the kernel's unsigned nibbles q + 8, with (scale, zero 0) per group: (in/32, out, 2)
            self.register_buffer("codes", torch.ops.aten._convert_weight_to_int4pack_for_cpu((codes + 8).to(torch.int32), 2))
            scales = torch.stack((scales.t(), torch.zeros_like(scales.t())), dim=-1).contiguous()
            self.register_buffer("scales", scales.to(self.dtype))

    def product(self, x: torch.Tensor) -> torch.Tensor:
        lead, rows = x.shape[:-1], x.reshape(-1, self.in_features).to(self.dtype).contiguous()
        if self.precision == "int8":
            y = torch.ops.aten._weight_int8pack_mm(rows, self.codes, self.scales)
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.codes, INT4_GROUP, self.scales)
        return y.to(x.dtype).reshape(*lead, self.out_features)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales))


class QuantizedLinear(_Product):
    """A `Linear` whose product runs on its int8 / int4 codes; the bias (if any) stays float32."""

    def __init__(self, linear: nn.Module, precision: str) -> None:
        codes, scales = _codes(precision, linear.weight.detach().t())
        super().__init__(precision, codes, scales)
        self.bias = linear.bias

    @property
    def weight(self) -> torch.Tensor:
        """The weight as its codes say, (in, out) float32, for what reads weights: a copy each time."""
        return self.product(torch.eye(self.in_features, device=self.codes.device))

    def forward(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        y = self.product(x)
        return y + self.bias if self.bias is not None else y


class QuantizedEmbedding(nn.Module):
    """The token embedding held as codes: a lookup dequantizes the rows it reads (codes × their scales)."""

    def __init__(self, embedding: nn.Embedding, precision: str) -> None:
        super().__init__()
        self.precision, self.dtype = precision, embedding.weight.dtype
        self.num_embeddings, self.embedding_dim = embedding.weight.shape
        codes, scales = _codes(precision, embedding.weight.detach())
        self.register_buffer("codes", codes)  # (V, d) int8 (int4's values in [-7, 7])
        self.register_buffer("scales", scales)  # (V,) or (V, d / 32)

    @property
    def device(self) -> torch.device:
        return self.codes.device

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        scale = self.scales[ids]
        if self.precision == "int8":
            scale = scale[..., None]
        else:
            scale = scale.repeat_interleave(INT4_GROUP, dim=-1)[..., : self.embedding_dim]
        return (self.codes[ids].float() * scale).to(self.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.rows(ids)

    @property
    def weight(self) -> torch.Tensor:
        """The whole matrix dequantized (V, d), for what reads it: a copy each time."""
        return self.rows(torch.arange(self.num_embeddings, device=self.codes.device))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales))


class QuantizedHead(TiedHead):
    """The tied head (x · Eᵀ) on the embedding's codes: the same int8 codes, or an int4-packed copy."""

    def __init__(self, embedding: QuantizedEmbedding) -> None:
        super().__init__(embedding)
        self.product = _Product(embedding.precision, embedding.codes, embedding.scales)

    def prepare(self) -> None:
        """Nothing to lay out: the product reads the codes."""

    def __call__(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        return self.product.product(x)

    def nbytes(self) -> int:
        """Bytes beyond the embedding's own (an int4 head packs a copy; an int8 one shares the codes)."""
        return 0 if self.product.precision == "int8" else self.product.nbytes()
