"""Cross-attention: decoder queries attend to the encoder's output.

The keys and values depend only on the encoder output, so they are projected once per source
(`project_kv`) and reused for every generated token; the decoder's cache keeps them.
"""

from __future__ import annotations

import torch
from torch import nn

from playground.config import ModelConfig
from playground.models.attention import attend, attend_pool
from playground.models.layers import Linear
from playground.models.rows import Batch, Rows


class CrossAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.scale = config.scale
        q_size, kv_size = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.kv_size = kv_size
        self.q = Linear(config.d_model, q_size, bias=config.attention_bias)
        self.kv = Linear(config.d_model, 2 * kv_size, bias=config.attention_bias)
        self.out = Linear(q_size, config.d_model, bias=config.attention_out_bias)

    def project_kv(self, memory: torch.Tensor, invariant: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """memory: encoder output (B, S, d_model) -> keys, values (B, h_kv, S, d_head)."""
        B, S, _ = memory.shape
        k, v = self.kv(memory, invariant).split(self.kv_size, dim=-1)
        k = k.view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return k, v

    def forward(self, x: torch.Tensor, *, layer: int, batch: Batch) -> torch.Tensor:
        """x: (L0, L1, d_model), the decoder tokens of a pass in its batch's layout; each segment's queries
        read its own source (`Segment.cross_kv`, `cross_mask` hiding its padding). Returns (L0, L1, d_model)."""
        L0, L1, _ = x.shape
        q = self.q(x, batch.invariant).view(L0, L1, self.n_heads, self.head_dim).transpose(1, 2)  # (L0, h, L1, d)
        out = self.out(batch.edit_heads(layer, batch.cross_attend(self, layer, q), self.head_dim, cross=True), batch.invariant)
        batch.attended(layer, out)
        return out

    def attend_rows(self, rows: Rows, layer: int, q: torch.Tensor) -> torch.Tensor:
        """q (L0, h, L1, d) -> (L0, L1, h·d). In a shared pass the one-token rows whose sources are rows
        of one pool (`Seq2SeqCache.cross`) read them in one call."""
        parts: list[torch.Tensor | None] = [None] * len(rows.segments)
        pooled: dict[int, list[int]] = {}
        for i, s in enumerate(rows.segments):
            rec, store = s.recorder, getattr(s.cache, "cross", None)
            keep = rec is not None and rec.wants(layer)
            inner = rec is not None and rec.wants_internals(layer)
            if rows.poolable(i, store) and not keep and not inner:
                pooled.setdefault(id(store.pool), []).append(i)
                continue
            qs = rows.view(i, q)  # (B, h, T, d)
            ks, vs = s.cross_kv[0][layer], s.cross_kv[1][layer]
            out, weights = attend(qs, ks, vs, scale=self.scale, mask=s.cross_mask, need_weights=keep)
            if keep:
                rec.record_attention("cross", layer, weights)  # (B, h, T, S)
            if inner:
                rows.keep_internals(rec, i, "cross", qs, ks, vs)
            parts[i] = rows.to_layout(i, out)
        for group in pooled.values():
            caches = [rows.segments[i].cache.cross for i in group]
            attend_pool(q, layer, rows, group, caches, parts, scale=self.scale)
        return rows.join(parts)
