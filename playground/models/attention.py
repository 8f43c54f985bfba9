"""Multi-head attention with grouped key/value heads (MHA, GQA, MQA).

Two paths that compute the same thing:
- fast: `F.scaled_dot_product_attention`, used unless weights are asked for;
- explicit: softmax(q·kᵀ·scale + mask) · v, returning the per-head weights for the attention panel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from playground.config import LayerKind, ModelConfig
from playground.models.kv_cache import KVCache
from playground.models.kv_pool import key_width
from playground.models.layers import Linear, make_norm
from playground.models.positional import apply_rope
from playground.models.rows import Batch, Rows, Segment


def causal_mask(
    queries: int, keys: int, *, window: int | None = None, device: torch.device | None = None
) -> torch.Tensor | None:
    """Boolean (T, S) mask, True where query i (absolute position S - T + i) may see key j.

    Returns None when every query sees every key (one new token, no sliding window).
    """
    offset = keys - queries
    if queries == 1 and (window is None or keys <= window):
        return None
    q_pos = torch.arange(offset, keys, device=device)[:, None]
    k_pos = torch.arange(keys, device=device)[None, :]
    mask = k_pos <= q_pos
    if window is not None:
        mask &= k_pos > q_pos - window
    return mask


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q: (B, h, T, d); k, v: (B, h_kv, S, d); mask: bool (True = visible) or additive float,
    broadcastable to (B, h, T, S); `is_causal` (with mask None, T == S) means a plain causal mask.
    Returns the output (B, h, T, d) and, if asked, the weights (B, h, T, S).
    """
    B, h, T, d = q.shape
    h_kv, S = k.shape[1], k.shape[2]
    if not need_weights:
        if T == 1 and mask is None and h != h_kv:
            # One new token: the g query heads that share a KV head are g queries of that head,
            # which avoids SDPA's slow grouped-query path and any copy of K/V.
            out = F.scaled_dot_product_attention(q.reshape(B, h_kv, h // h_kv, d), k, v, scale=scale)
            return out.reshape(B, h, 1, d), None
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=h != h_kv
        )
        return out, None
    if is_causal and mask is None:
        mask = causal_mask(T, S, device=q.device)
    # Group the query heads that share a KV head instead of copying K/V (head i uses KV head i // g).
    qg = q.reshape(B, h_kv, h // h_kv, T, d)
    scores = (qg @ k.unsqueeze(2).transpose(-1, -2)).reshape(B, h, T, S) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    out = (weights.reshape(B, h_kv, h // h_kv, T, S) @ v.unsqueeze(2)).reshape(B, h, T, d)
    return out, weights


def attend_padded(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, *, scale: float
) -> torch.Tensor:
    """One new token per row against that row's keys, every row padded to one width: q (R, h, 1, d);
    k, v (R, h_kv, L, d); mask (R, 1, 1, L) bool (True: a key the row holds) or additive (R, h, 1, L).
    The query heads that share a KV head are that head's queries (no copy of K/V). Returns (R, h, 1, d)."""
    R, h, _, d = q.shape
    h_kv = k.shape[1]
    if mask.shape[1] != 1:
        mask = mask.reshape(R, h_kv, h // h_kv, -1)
    out = F.scaled_dot_product_attention(q.reshape(R, h_kv, h // h_kv, d), k, v, attn_mask=mask, scale=scale)
    return out.reshape(R, h, 1, d)


class QKNorm(nn.Module):
    """RMSNorm on queries and keys before RoPE: per head over head_dim (Qwen3, Gemma 3), or over the
    whole query / key projection (OLMo 2). Values pass through."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.heads = (config.n_heads, config.n_kv_heads, config.n_kv_heads)
        self.per_head = config.qk_norm == "head"
        d = config.head_dim
        self.q = make_norm(config, d if self.per_head else config.n_heads * d)
        self.k = make_norm(config, d if self.per_head else config.n_kv_heads * d)

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        """qkv: (B, T, h + 2·h_kv, d) -> the same with q and k normalised."""
        q, k, v = qkv.split(self.heads, dim=2)
        if self.per_head:
            q, k = self.q(q), self.k(k)
        else:
            q, k = self.q(q.flatten(2)).view_as(q), self.k(k.flatten(2)).view_as(k)
        return torch.cat((q, k, v), dim=2)


class SelfAttention(nn.Module):
    """Self-attention with fused q/k/v projection, optional q/k norm, RoPE and KV cache.

    `layer_kind` (decoder layers) sets this layer's own window; without it the config's
    `sliding_window` applies (None for encoders and cross-attending decoders).
    """

    def __init__(self, config: ModelConfig, layer_kind: LayerKind | None = None) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.scale = config.scale
        self.window = layer_kind.window if layer_kind is not None else config.sliding_window
        q_size, kv_size = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.qkv = Linear(config.d_model, q_size + 2 * kv_size, bias=config.attention_bias)
        self.qk_norm = QKNorm(config) if config.qk_norm != "none" else None
        self.out = Linear(q_size, config.d_model, bias=config.attention_out_bias)

    def forward(
        self, x: torch.Tensor, *, layer: int, batch: Batch, rope: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """x: (L0, L1, d_model), the tokens of a pass in its batch's layout; each attends to its own keys
        as the batch stores them (`Batch.attend`). Returns (L0, L1, d_model)."""
        L0, L1, _ = x.shape
        h, h_kv = self.n_heads, self.n_kv_heads
        qkv = self.qkv(x, batch.invariant).view(L0, L1, h + 2 * h_kv, self.head_dim)
        if self.qk_norm is not None:
            qkv = self.qk_norm(qkv)
        qkv = qkv.transpose(1, 2)  # (L0, h + 2·h_kv, L1, d)
        qk, v = qkv[:, : h + h_kv], qkv[:, h + h_kv :]
        if rope is not None:  # queries and keys rotate together: one pass of small ops instead of two
            qk = apply_rope(qk, *rope)
        q, k = qk[:, :h], qk[:, h:]  # (L0, h, L1, d), (L0, h_kv, L1, d)
        heads = batch.edit_heads(layer, batch.attend(self, layer, q, k, v), self.head_dim)  # (L0, L1, h·d)
        out = self.out(heads, batch.invariant)
        batch.attended(layer, out)
        return out

    def attend_rows(self, rows: Rows, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """An eager pass (`Rows`): each segment writes its keys to its own cache and attends through
        `attend_segment`; in a shared pass the one-token rows whose caches share a pool attend together,
        in one call per pool."""
        parts: list[torch.Tensor | None] = [None] * len(rows.segments)
        pooled: dict[int, list[int]] = {}
        for i, s in enumerate(rows.segments):
            rec, cache = s.recorder, s.self_cache
            keep = rec is not None and rec.wants(layer)
            inner = rec is not None and rec.wants_internals(layer)
            if rows.poolable(i, cache) and not keep and not inner:
                pooled.setdefault(id(cache.pool), []).append(i)
                continue
            qs, ks, vs = rows.view(i, q), rows.view(i, k), rows.view(i, v)
            out, ks, vs = self.attend_segment(layer, s, qs, ks, vs, keep=keep, ordered=keep or inner)
            if inner:
                rows.keep_internals(rec, i, s.kind, qs, ks, vs)
            parts[i] = rows.to_layout(i, out)
        for group in pooled.values():
            self._attend_pooled(layer, q, k, v, rows, group, parts)
        return rows.join(parts)

    def attend_segment(
        self, layer: int, s: Segment, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, keep: bool, ordered: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One segment's attention, whatever its cache: write, mask, attend, record.

        q (B, h, T, d), k and v (B, h_kv, T, d) at positions [start, start + T). Its cache (a `KVCache`, a
        run's `PolicyCache`, or none) stores the new keys and returns the keys the queries attend to, with
        the mask and positions of what it holds when they are not a contiguous run (a policy's evictions);
        otherwise the causal rule applies (the segment's own mask replaces it: T5's bias, an encoder's
        padding). Returns the output (B, h, T, d) and the keys and values as attended."""
        B, h, T, d = q.shape
        cache, mask, positions = s.self_cache, s.self_mask, None
        if cache is not None:
            # (B, h_kv, S, d): a sliding layer's cache returns its window only, in position order when
            # recording (otherwise one new token may see it unordered)
            k, v, held, positions = cache.write_masked(layer, s.start, k, v, ordered=ordered)
            if positions is not None:
                mask = held  # None only for one new token that sees every key the policy left
        S = k.shape[2]
        is_causal = False
        if positions is None:
            # A prompt processed from position 0 without a window is the plain causal case SDPA does fastest.
            is_causal = mask is None and s.causal and T == S and (self.window is None or S <= self.window)
            if mask is None and s.causal and not is_causal:
                mask = causal_mask(T, S, window=self.window, device=q.device)
        wants = cache is not None and cache.wants_weights(layer)  # a heavy-hitter layer accumulates attention
        if wants and not keep:  # heavy hitters: scored in chunks of bounded memory
            out, weights = cache.attend_scored(layer, q, k, v, mask, self.scale, attend), None
        else:
            out, weights = attend(q, k, v, scale=self.scale, mask=mask, is_causal=is_causal, need_weights=keep or wants)
            if cache is not None:
                cache.after_attention(layer, weights if wants else None)
        if keep:
            if positions is not None:  # spread over absolute positions 0..start+T-1 (evicted keys: weight 0)
                full = weights.new_zeros((B, h, T, s.start + T))
                weights = full.scatter_(3, positions[:, None, None].expand(-1, h, T, -1), weights)
            elif s.start + T - S:  # keys before the window have weight 0: show them as such
                weights = F.pad(weights, (s.start + T - S, 0))
            s.recorder.record_attention(s.kind, layer, weights)
        return out, k, v

    def _attend_pooled(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: Rows, group: list[int],
        parts: list[torch.Tensor | None],
    ) -> None:
        """The one-token rows of `group` (segments whose caches are rows of one pool): their new keys
        stored with one indexed write, then attended together (`attend_pool`)."""
        segments = [rows.segments[i] for i in group]
        caches = [s.self_cache for s in segments]
        pool = caches[0].pool
        place = rows.pool_rows(pool, group, caches)
        at = rows.slots(pool, group, [c.advance(layer, s.start) for c, s in zip(caches, segments)])
        keys, values = pool.keys[layer], pool.values[layer]  # (rows, h_kv, width, d)
        keys[place.rows, :, at] = k[place.source, :, 0]
        values[place.rows, :, at] = v[place.source, :, 0]
        attend_pool(q, layer, rows, group, caches, parts, scale=self.scale, biased=segments[0].self_mask is not None)


def attend_pool(
    q: torch.Tensor, layer: int, rows: Rows, group: list[int], caches: list[KVCache], parts: list[torch.Tensor | None],
    *, scale: float, biased: bool = False,
) -> None:
    """One new token per row of segments `group`, whose keys for this layer are `caches` (rows of one
    pool): one masked SDPA over the pool's rows [lo, hi) per key width. Each row reads the slots its
    cache holds, padded to `key_width` of its own length, so its numbers never depend on the other rows
    (rows of different widths take one call each). q: (N, h, 1, d) for every row of the pass; each
    segment's output (B, 1, h·d) goes to `parts`. `biased`: T5's position bias (the segments' `self_mask`)."""
    pool = caches[0].pool
    keys, values = pool.keys[layer], pool.values[layer]  # (rows, h_kv, width, d)
    held = [c.held(layer) for c in caches]
    widths: dict[int, list[int]] = {}
    for j, n in enumerate(held):
        widths.setdefault(key_width(n, keys.shape[2]), []).append(j)
    for width, members in widths.items():
        sub, sub_caches = [group[j] for j in members], [caches[j] for j in members]
        place = rows.pool_rows(pool, sub, sub_caches)
        mask = rows.pool_mask(pool, place, sub, sub_caches, [held[j] for j in members], width, biased, q.shape[1])
        qs = q[place.source]  # (R, h, 1, d)
        if not place.dense:  # rows of the span that are not attending here get a query of zeros
            qs = q.new_zeros((place.hi - place.lo, *q.shape[1:])).index_copy_(0, place.local, qs)
        span = slice(place.lo, place.hi)
        out = attend_padded(qs, keys[span, :, :width], values[span, :, :width], mask, scale=scale)
        if not place.dense:
            out = out.index_select(0, place.local)
        r = 0
        for i, c in zip(sub, sub_caches):
            parts[i] = out[r : r + c.batch].reshape(c.batch, 1, -1)
            r += c.batch
