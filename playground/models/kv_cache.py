"""A static key/value cache: buffers allocated once, filled in place, never grown by concatenation."""

from __future__ import annotations

from typing import Any

import torch


class KVCache:
    """Per-layer K and V buffers of shape (B, h_kv, T_max, d_head).

    `length` tokens are valid. Grouped-query / multi-query models store only their KV heads, which is
    where their memory saving comes from; `stats()` reports it against full multi-head attention.
    """

    def __init__(
        self,
        *,
        layers: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        max_tokens: int,
        query_heads: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (batch, kv_heads, max_tokens, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.layers, self.batch, self.kv_heads, self.head_dim = layers, batch, kv_heads, head_dim
        self.max_tokens, self.query_heads = max_tokens, query_heads
        self.length = 0

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, h_kv, T, d) after the valid tokens; return views of all keys and values."""
        start, end = self.length, self.length + k.shape[2]
        if end > self.max_tokens:
            raise ValueError(f"KV cache holds {self.max_tokens} tokens; cannot store {end}")
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, tokens: int) -> None:
        """Mark `tokens` more positions valid (called once per forward, after every layer wrote)."""
        self.length += tokens

    def reorder(self, batch_index: torch.Tensor) -> None:
        """Beam search: row b of the cache becomes old row batch_index[b]."""
        n = self.length
        for buffers in (self.keys, self.values):
            for buf in buffers:
                buf[:, :, :n] = buf[:, :, :n].index_select(0, batch_index)

    @property
    def element_size(self) -> int:
        return self.keys[0].element_size() if self.keys else 0

    def stats(self) -> dict[str, Any]:
        """JSON-serialisable cache statistics; `bytes` is 2·layers·batch·kv_heads·tokens·head_dim·element_size."""
        per_token = 2 * self.layers * self.batch * self.kv_heads * self.head_dim * self.element_size
        shape = [self.batch, self.kv_heads, self.length, self.head_dim]
        return {
            "layers": self.layers,
            "batch": self.batch,
            "kv_heads": self.kv_heads,
            "query_heads": self.query_heads,
            "head_dim": self.head_dim,
            "tokens": self.length,
            "max_tokens": self.max_tokens,
            "dtype": str(self.keys[0].dtype).removeprefix("torch.") if self.keys else None,
            "element_size": self.element_size,
            "bytes_per_token": per_token,
            "bytes": per_token * self.length,
            "allocated_bytes": per_token * self.max_tokens,
            "mha_equivalent_bytes": per_token * self.length * self.query_heads // self.kv_heads,
            "per_layer": [{"layer": i, "k_shape": shape, "v_shape": shape} for i in range(self.layers)],
        }
