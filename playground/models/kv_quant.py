"""Quantised K/V storage (KIVI's layout): int8 or int4 codes with float scales, dequantised on read.

- K, per channel: the positions are cut into groups of `GROUP` consecutive positions; each group has
  one scale per (row, KV head, channel): absmax over the group's positions / qmax. The last,
  unfinished group stays in the cache's float dtype (the "residual") until it fills up.
- V, per token: one scale per (row, KV head, position): absmax over the head's d_head values / qmax.
- Symmetric rounding to the nearest code in [−qmax, qmax] (qmax 127 for int8, 7 for int4), so every
  value read back is within scale / 2 of what was written. int4 codes are packed two per byte
  along d_head (an odd d_head is padded by one code).
- Scales are stored in the cache's float dtype (4 bytes each in float32).
"""

from __future__ import annotations

import torch

GROUP = 32  # K positions per per-channel scale group
QMAX = {"int8": 127, "int4": 7}


def quantize(x: torch.Tensor, dim: int, bits: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax quantisation of x along `dim` (the reduced axis): (codes, scale).
    codes: int8 (int8), or uint8 with two codes per byte along the last dim (int4)."""
    qmax = QMAX[bits]
    scale = x.abs().amax(dim=dim, keepdim=True).float() / qmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero slice: any scale reads it back
    codes = torch.round(x.float() / scale).clamp(-qmax, qmax).to(torch.int8)
    return (pack4(codes) if bits == "int4" else codes), scale.to(x.dtype)


def dequantize(codes: torch.Tensor, scale: torch.Tensor, bits: str, d: int, dtype: torch.dtype) -> torch.Tensor:
    """The values `quantize` stored, in `dtype`; d: the last dim's true size (int4 may be padded)."""
    values = unpack4(codes, d) if bits == "int4" else codes
    return (values.float() * scale.float()).to(dtype)


def pack4(codes: torch.Tensor) -> torch.Tensor:
    """int8 codes in [−7, 7] -> uint8, two per byte along the last dim (low nibble first)."""
    if codes.shape[-1] % 2:
        codes = torch.nn.functional.pad(codes, (0, 1))
    biased = (codes + 8).to(torch.uint8)
    return biased[..., 0::2] | (biased[..., 1::2] << 4)


def unpack4(packed: torch.Tensor, d: int) -> torch.Tensor:
    low = (packed & 0x0F).to(torch.int8) - 8
    high = (packed >> 4).to(torch.int8) - 8
    return torch.stack((low, high), dim=-1).flatten(-2)[..., :d]


class QuantStore:
    """One layer's quantised K and V, (B, h_kv, n, d) when read back, positions in write order."""

    def __init__(self, bits: str, shape: tuple[int, int, int], dtype: torch.dtype, device: torch.device) -> None:
        B, h, d = shape
        self.bits, self.d, self.dtype = bits, d, dtype
        width = (d + 1) // 2 if bits == "int4" else d
        code = torch.uint8 if bits == "int4" else torch.int8
        self.k_codes = torch.empty((B, h, 0, width), dtype=code, device=device)
        self.k_scales = torch.empty((B, h, 0, d), dtype=dtype, device=device)  # one row per full group
        self.k_rest = torch.empty((B, h, 0, d), dtype=dtype, device=device)  # the unfinished group, float
        self.v_codes = torch.empty((B, h, 0, width), dtype=code, device=device)
        self.v_scales = torch.empty((B, h, 0, 1), dtype=dtype, device=device)

    @property
    def length(self) -> int:
        return self.k_codes.shape[2] + self.k_rest.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v (B, h_kv, T, d) after what is held."""
        v_codes, v_scale = quantize(v, -1, self.bits)
        self.v_codes = torch.cat((self.v_codes, v_codes), dim=2)
        self.v_scales = torch.cat((self.v_scales, v_scale), dim=2)
        rest = torch.cat((self.k_rest, k), dim=2)
        full = rest.shape[2] // GROUP * GROUP
        if full:
            B, h, _, d = rest.shape
            groups = rest[:, :, :full].reshape(B, h, full // GROUP, GROUP, d)
            codes, scale = quantize(groups, 3, self.bits)  # (B, h, g, GROUP, w), (B, h, g, 1, d)
            self.k_codes = torch.cat((self.k_codes, codes.flatten(2, 3)), dim=2)
            self.k_scales = torch.cat((self.k_scales, scale.squeeze(3)), dim=2)
        self.k_rest = rest[:, :, full:].clone()

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V (B, h_kv, n, d) dequantised (K's unfinished group as stored)."""
        B, h, n, _ = self.k_codes.shape
        scales = self.k_scales.repeat_interleave(GROUP, dim=2)  # (B, h, n, d)
        k = dequantize(self.k_codes, scales, self.bits, self.d, self.dtype)
        v = dequantize(self.v_codes, self.v_scales, self.bits, self.d, self.dtype)
        return torch.cat((k, self.k_rest), dim=2), v

    def drop_groups(self, groups: int) -> None:
        """Forget the first `groups` full K groups and their positions' V (a sliding layer's window moved on)."""
        n = groups * GROUP
        self.k_codes, self.k_scales = self.k_codes[:, :, n:].clone(), self.k_scales[:, :, groups:].clone()
        self.v_codes, self.v_scales = self.v_codes[:, :, n:].clone(), self.v_scales[:, :, n:].clone()

    def select_rows(self, index: torch.Tensor) -> None:
        for name in ("k_codes", "k_scales", "k_rest", "v_codes", "v_scales"):
            setattr(self, name, getattr(self, name).index_select(0, index))

    def tensors(self) -> list[torch.Tensor]:
        return [self.k_codes, self.k_scales, self.k_rest, self.v_codes, self.v_scales]

    @property
    def bytes(self) -> int:
        """Bytes actually held: codes, scales and the float residual."""
        return sum(t.numel() * t.element_size() for t in self.tensors())
