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
from playground.models.recorder import Recorder
from playground.models.rows import Rows


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

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """memory: encoder output (B, S, d_model) -> keys, values (B, h_kv, S, d_head)."""
        B, S, _ = memory.shape
        k, v = self.kv(memory).split(self.kv_size, dim=-1)
        k = k.view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return k, v

    def forward(
        self,
        x: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        layer: int,
        mask: torch.Tensor | None = None,
        recorder: Recorder | None = None,
    ) -> torch.Tensor:
        """x: (B, T, d_model); k, v from `project_kv`; mask: additive (B, 1, 1, S) hiding source padding."""
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, h, T, d)
        keep = recorder is not None and recorder.wants(layer)
        out, weights = attend(q, k, v, scale=self.scale, mask=mask, need_weights=keep)
        if keep:
            recorder.record_attention("cross", layer, weights)  # (B, h, T, S)
        out = self.out(out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))
        if recorder is not None and recorder.wants_internals(layer):
            recorder.record_internals("cross", layer, q=q, k=k, v=v, output=out)
        return out

    def forward_rows(self, x: torch.Tensor, rows: Rows, layer: int) -> torch.Tensor:
        """x (N, 1, d_model), the stacked rows of several segments -> (N, 1, d_model): each segment's
        queries read its own source (the segment's `cross_kv`), as `forward` does for it alone; the
        one-token rows whose sources are rows of one pool (`Seq2SeqCache.cross`) read them in one call."""
        h, d = self.n_heads, self.head_dim
        q = self.q(x)
        parts: list[torch.Tensor | None] = [None] * len(rows.segments)
        internals, pooled = [], {}
        for i, (s, (a, b)) in enumerate(zip(rows.segments, rows.bounds)):
            B, T = s.ids.shape
            rec, store = s.recorder, getattr(s.cache, "cross", None)
            keep = rec is not None and rec.wants(layer)
            inner = rec is not None and rec.wants_internals(layer)
            if T == 1 and store is not None and not keep and not inner:
                pooled.setdefault(id(store.pool), []).append(i)
                continue
            qs = q[a:b].reshape(B, T, h, d).transpose(1, 2)  # (B, h, T, d)
            ks, vs = s.cross_kv[0][layer], s.cross_kv[1][layer]
            out, weights = attend(qs, ks, vs, scale=self.scale, mask=None, need_weights=keep)
            if keep:
                rec.record_attention("cross", layer, weights)
            if inner:
                internals.append((rec, a, b, B, T, qs, ks, vs))
            parts[i] = out.transpose(1, 2).reshape(B * T, 1, h * d)
        heads = q.reshape(-1, h, 1, d)  # one token per row: (N, h, 1, d)
        for group in pooled.values():
            caches = [rows.segments[i].cache.cross for i in group]
            attend_pool(heads, layer, rows, group, caches, parts, scale=self.scale)
        out = self.out(torch.cat(parts))
        for rec, a, b, B, T, qs, ks, vs in internals:
            rec.record_internals("cross", layer, q=qs, k=ks, v=vs, output=out[a:b].reshape(B, T, -1))
        return out
