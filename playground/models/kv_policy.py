"""KV-cache policies of one run: eviction (window, attention sink, heavy hitters) and a quantised cache.

`KVPolicy` is what a run asks for (`GenerationConfig.kv_window`, `kv_sink`, `kv_heavy`, `kv_dtype`,
`rope_scaling`); `PolicyCache` is the run's cache that carries it out, with `KVCache`'s interface.

Eviction (window W, sink S, heavy H) keeps, after every forward pass, the first S positions, the
last W and the H others with the largest accumulated attention (H2O: every query's softmax weight
on a key, summed over query heads and steps, per layer and batch row); the others are dropped from
memory. Keys are stored after RoPE, and every new query takes its true absolute position, so the
kept positions keep their own rotation. Query p sees key j iff j <= p and (j > p − W, or j is a
sink or a heavy hitter still held): in a prompt pass each query has its own window, as if the
tokens came one by one. A layer with a sliding window of its own (Mistral, Gemma 3) keeps it; a
policy window shorter than that window replaces it (sinks and heavy hitters apply to full layers).
A layer the policy can never evict from (W at least the run's length, or the layer's own window no
longer than W) is an ordinary `KVCache`: the same buffers, kernels and numbers as a plain run.

A quantised cache (`kv_dtype`, see `kv_quant`) keeps every position in int8 or int4 codes and reads
them back dequantised; it does not combine with eviction.

A heavy-hitter layer needs its attention weights, so it attends with the explicit softmax; over a prompt that is
(h, T, S) scores, 1 GiB for 64 heads and 2,000 tokens. `attend_scored` computes them in chunks of queries whose
scores stay within `POLICY_SCRATCH_BYTES` (each query's softmax is its own row: the same numbers, the sum of the
weights in another order), and the run's estimate counts that scratch (`generation.budget`, `policy_scratch`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.models.kv_cache import CacheStats, KVCache, dtype_name
from playground.models.kv_quant import GROUP, QuantStore
from playground.models.rope_scaling import RotaryOverride

POLICY_SCRATCH_BYTES = 8 * 1024**2  # one query chunk's float32 scores in a heavy-hitter layer's prompt pass


def policy_chunk(heads: int, keys: int, rows: int = 1) -> int:
    """Queries per chunk of a heavy-hitter layer's explicit attention over `keys` keys: (rows, heads, chunk, keys)
    float32 scores within POLICY_SCRATCH_BYTES, at least one query."""
    return max(1, POLICY_SCRATCH_BYTES // (4 * max(1, rows * heads * keys)))


@dataclass(frozen=True)
class KVPolicy:
    window: int | None = None  # keep the last `window` positions (None: no eviction)
    sink: int = 0  # and the first `sink`
    heavy: int = 0  # and this many others with the largest accumulated attention
    dtype: str | None = None  # "int8" | "int4": quantised storage
    rotary: RotaryOverride | None = None  # the run's own RoPE table (rope_scaling)

    @property
    def label(self) -> str:
        parts = []
        if self.sink:
            parts.append(f"sink {self.sink}")
        if self.heavy:
            parts.append(f"heavy {self.heavy}")
        if self.window is not None:
            parts.append(f"window {self.window}")
        if self.dtype:
            parts.append(f"{self.dtype} cache")
        if self.rotary is not None:
            parts.append(f"rope {self.rotary.kind} ×{self.rotary.factor:g}")
        return " + ".join(parts) or "plain"

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "window": self.window, "sink": self.sink, "heavy": self.heavy, "dtype": self.dtype,
                "rope_scaling": None if self.rotary is None else self.rotary.to_dict()}


@dataclass(frozen=True)
class PolicyStats(CacheStats):
    """`CacheStats` of a policy cache: `bytes` is what each layer really holds (`held_bytes`)."""

    held: tuple[int, ...] = ()  # positions each layer holds
    held_bytes: tuple[int, ...] = ()  # K/V bytes each layer holds (codes and scales for a quantised one)
    policy: dict[str, Any] = field(default_factory=dict)
    kept: tuple[tuple[int, ...] | None, ...] = ()  # evicting layers: the positions batch row 0 holds

    def kept_tokens(self, layer: int) -> int:
        return self.held[layer]

    @property
    def bytes(self) -> int:
        return sum(self.held_bytes)

    @property
    def allocated_bytes(self) -> int:
        return self.bytes

    @property
    def plain_bytes(self) -> int:
        """What a plain cache would hold at this length (the model's own sliding windows included)."""
        return self.bytes_per_token_per_layer * sum(CacheStats.kept_tokens(self, i) for i in range(self.layers))

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        for entry, n, kind, kept in zip(data["per_layer"], self.held_bytes, self.policy.get("layer_kinds", ()), self.kept):
            entry.update(bytes=n, policy=kind, positions=None if kept is None else list(kept))
        data.update(policy=self.policy, kept_positions=max(self.held, default=0), plain_bytes=self.plain_bytes,
                    saved_bytes=self.plain_bytes - self.bytes)
        return data


class PolicyCache:
    """A run's KV cache under a `KVPolicy`; per layer one of three kinds:
    "plain" (a one-layer `KVCache`), "evict" (the kept positions only, compacted after every pass) or
    "quant" (a `QuantStore`). `length` counts every position written: it is the next query's position."""

    pool = None  # never rows of a shared pool: such a run takes its own turn in the batch

    def __init__(
        self, policy: KVPolicy, *, layers: int, batch: int, kv_heads: int, head_dim: int, max_tokens: int,
        query_heads: int, dtype: torch.dtype, device: torch.device | str, windows: list[int | None],
    ) -> None:
        self.policy, self.rotary = policy, policy.rotary
        self.layers, self.batch, self.kv_heads, self.head_dim = layers, batch, kv_heads, head_dim
        self.max_tokens, self.query_heads, self.dtype, self.device = max_tokens, query_heads, dtype, torch.device(device)
        self.windows = list(windows)
        self.position_limit = policy.rotary.max_positions if policy.rotary is not None else None
        self.kinds: list[str] = []
        self.params: list[tuple[int, int, int]] = []  # evict layers: (window, sink, heavy)
        self._plain: dict[int, KVCache] = {}
        self._quant: dict[int, QuantStore] = {}
        self._k: dict[int, torch.Tensor] = {}
        self._v: dict[int, torch.Tensor] = {}
        self._pos: dict[int, torch.Tensor] = {}  # (B, n) absolute positions held, ascending
        self._score: dict[int, torch.Tensor] = {}  # (B, n) accumulated attention (heavy hitters)
        self._written = [0] * layers
        for layer, own in enumerate(self.windows):
            self.kinds.append(self._kind(own))
            W = policy.window if own is None else min(policy.window or own, own)
            full = own is None
            self.params.append((W if W is not None else max_tokens, policy.sink if full else 0, policy.heavy if full else 0))
            self._reset(layer)

    def _kind(self, own: int | None) -> str:
        p = self.policy
        if p.dtype is not None:
            return "quant"
        if p.window is None or p.window >= self.max_tokens or (own is not None and own <= p.window):
            return "plain"
        return "evict"

    def _reset(self, layer: int) -> None:
        B, h, d, kind = self.batch, self.kv_heads, self.head_dim, self.kinds[layer]
        if kind == "plain":
            self._plain[layer] = KVCache(layers=1, batch=B, kv_heads=h, head_dim=d, max_tokens=self.max_tokens,
                                         query_heads=self.query_heads, dtype=self.dtype, device=self.device,
                                         windows=[self.windows[layer]])
            return
        if kind == "quant":
            self._quant[layer] = QuantStore(self.policy.dtype, (B, h, d), self.dtype, self.device)
        else:
            self._k[layer] = torch.empty((B, h, 0, d), dtype=self.dtype, device=self.device)
            self._v[layer] = torch.empty((B, h, 0, d), dtype=self.dtype, device=self.device)
            self._score[layer] = torch.zeros((B, 0), dtype=torch.float32, device=self.device)
        self._pos[layer] = torch.zeros((B, 0), dtype=torch.long, device=self.device)

    @property
    def length(self) -> int:
        return min(self._written) if self._written else 0

    def wants_weights(self, layer: int) -> bool:
        """Whether the layer's attention probabilities must be computed (heavy hitters accumulate them)."""
        return self.kinds[layer] == "evict" and self.params[layer][2] > 0

    def write_masked(
        self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor, *, ordered: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Store k, v (B, h_kv, T, d) at positions [start, start + T); return the keys and values the new
        queries attend, the bool mask (B, 1, T, S) of what each query sees (None: the plain layer's own
        causal rule) and the keys' absolute positions (B, S) (None for a plain layer: a contiguous run)."""
        T = k.shape[2]
        end = start + T
        if end > self.max_tokens:
            raise ValueError(f"KV cache holds {self.max_tokens} tokens; cannot store {end}")
        kind = self.kinds[layer]
        if kind == "plain":
            keys, values = self._plain[layer].write(0, start, k, v, ordered=ordered)
            self._written[layer] = end
            return keys, values, None, None
        if start != self._written[layer]:
            raise ValueError(f"a policy cache appends only: layer {layer} holds {self._written[layer]} positions, "
                             f"a write starts at {start}")
        B = k.shape[0]
        new = torch.arange(start, end, device=self.device).expand(B, T)
        W, S, H = self.params[layer]
        if kind == "quant":
            store = self._quant[layer]
            store.append(k, v)
            self._pos[layer] = torch.cat((self._pos[layer], new), dim=1)
            keys, values = store.read()
        else:
            if T == 1 and H == 0:  # the one new query sees all that stays: drop the rest first, no mask
                self._evict(layer, start, keep_before=True)
            keys = torch.cat((self._k[layer], k), dim=2)
            values = torch.cat((self._v[layer], v), dim=2)
            self._k[layer], self._v[layer] = keys, values
            self._pos[layer] = torch.cat((self._pos[layer], new), dim=1)
            self._score[layer] = torch.cat((self._score[layer], self._score[layer].new_zeros((B, T))), dim=1)
        self._written[layer] = end
        pos = self._pos[layer]
        q_pos = new[:, :, None]  # (B, T, 1)
        k_pos = pos[:, None, :]  # (B, 1, S)
        visible = (k_pos <= q_pos) & ((k_pos > q_pos - W) | (k_pos < max(S, start - W)))
        mask = None if bool(visible.all()) else visible[:, None]
        return keys, values, mask, pos

    def after_attention(self, layer: int, weights: torch.Tensor | None) -> None:
        """The pass has attended: accumulate the weights (B, h, T, S) of a heavy-hitter layer, then drop
        what the policy no longer keeps."""
        kind = self.kinds[layer]
        if kind == "plain":
            return
        end = self._written[layer]
        if kind == "quant":
            W = self.params[layer][0]
            old = int((self._pos[layer][0] <= end - W).sum()) if self.windows[layer] is not None else 0
            if old >= GROUP:  # whole groups left every later query's window
                self._quant[layer].drop_groups(old // GROUP)
                self._pos[layer] = self._pos[layer][:, old // GROUP * GROUP :]
            return
        if weights is not None:
            self._score[layer] += weights.float().sum(dim=(1, 2))
        self._evict(layer, end)

    def attend_scored(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float,
        attend: Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
    ) -> torch.Tensor:
        """A heavy-hitter layer's attention (q (B, h, T, d) over the keys and the mask `write_masked` returned):
        the explicit softmax whose weights the keys' scores accumulate, then `after_attention`'s eviction. A pass
        of more queries than one chunk (`policy_chunk`) goes chunk by chunk through two score buffers reused by
        every chunk (the same kernels per query row as `attend`'s explicit path). Returns the output (B, h, T, d)."""
        B, h, T, d = q.shape
        h_kv, S = k.shape[1], k.shape[2]
        chunk = policy_chunk(h, S, B)
        if T <= chunk:  # one chunk: exactly the unchunked computation
            out, weights = attend(q, k, v, scale=scale, mask=mask, need_weights=True)
            self.after_attention(layer, weights)
            return out
        g = h // h_kv  # the query heads sharing a KV head attend to it without copies (as `attend` does)
        qg, kt, vg = q.reshape(B, h_kv, g, T, d), k.unsqueeze(2).transpose(-1, -2), v.unsqueeze(2)
        scores = q.new_empty(B * h * chunk * S)
        probs = torch.empty(B * h * chunk * S, dtype=torch.float32, device=q.device)
        summed = torch.zeros((B, S), dtype=torch.float32, device=q.device)
        outs = []
        for a in range(0, T, chunk):
            n = min(chunk, T - a)
            shape = (B, h_kv, g, n, S)
            s, w = scores[: B * h * n * S].view(shape), probs[: B * h * n * S].view(shape)
            torch.matmul(qg[:, :, :, a : a + n], kt, out=s)
            s.mul_(scale)
            if mask is not None:  # (B, 1, T, S): True where the query sees the key
                s.masked_fill_(~mask[:, :, a : a + n].unsqueeze(1), float("-inf"))
            torch.ops.aten._softmax.out(s if s.dtype == torch.float32 else s.float(), -1, False, out=w)
            summed += w.sum(dim=(1, 2, 3))
            outs.append(w.to(q.dtype) @ vg)  # (B, h_kv, g, n, d)
        self._score[layer] += summed
        self._evict(layer, self._written[layer])
        return torch.cat(outs, dim=3).reshape(B, h, T, d)

    def _evict(self, layer: int, end: int, *, keep_before: bool = False) -> None:
        """Keep the sinks, the last W positions before `end` (and, with keep_before, the query at `end`
        that is about to be added: its window's first position is end − W + 1) and the heavy hitters."""
        W, S, H = self.params[layer]
        pos, score = self._pos[layer], self._score[layer]
        last = end - W + (1 if keep_before else 0)  # first position of the window kept
        keep = (pos < S) | (pos >= last)
        if H:
            others = score.masked_fill(keep, float("-inf"))
            extra = min(H, int((~keep[0]).sum()))
            if extra:
                keep = keep.scatter(1, others.topk(extra, dim=1).indices, True)
        if bool(keep.all()):
            return
        B = pos.shape[0]
        idx = keep.nonzero()[:, 1].view(B, -1)  # (B, m) ascending: positions stay sorted
        gather = idx[:, None, :, None].expand(-1, self.kv_heads, -1, self.head_dim)
        self._k[layer] = self._k[layer].gather(2, gather)
        self._v[layer] = self._v[layer].gather(2, gather)
        self._pos[layer], self._score[layer] = pos.gather(1, idx), score.gather(1, idx)

    def positions(self, layer: int) -> torch.Tensor:
        """(B, n) absolute positions layer `layer` holds now."""
        if self.kinds[layer] == "plain":
            cache = self._plain[layer]
            n = cache.held(0)
            first = self._written[layer] - n
            return torch.arange(first, first + n, device=self.device).expand(self.batch, n)
        return self._pos[layer]

    def fill_from(self, source: PolicyCache) -> None:
        """Broadcast a batch-1 cache into every row of this one (beam search starts from one prefill)."""
        zeros = torch.zeros(self.batch, dtype=torch.long, device=self.device)
        for layer, kind in enumerate(self.kinds):
            if kind == "plain":
                self._plain[layer].fill_from(source._plain[layer])
            elif kind == "quant":
                self._quant[layer] = source._quant[layer]
                self._quant[layer].select_rows(zeros)
                self._pos[layer] = source._pos[layer].expand(self.batch, -1).clone()
            else:
                self._k[layer] = source._k[layer].expand(self.batch, -1, -1, -1).clone()
                self._v[layer] = source._v[layer].expand(self.batch, -1, -1, -1).clone()
                self._pos[layer] = source._pos[layer].expand(self.batch, -1).clone()
                self._score[layer] = source._score[layer].expand(self.batch, -1).clone()
        self._written = list(source._written)

    def reorder(self, batch_index: torch.Tensor) -> None:
        """Beam search: row b becomes old row batch_index[b]."""
        for layer, kind in enumerate(self.kinds):
            if kind == "plain":
                self._plain[layer].reorder(batch_index)
                continue
            if kind == "quant":
                self._quant[layer].select_rows(batch_index)
            else:
                self._k[layer] = self._k[layer].index_select(0, batch_index)
                self._v[layer] = self._v[layer].index_select(0, batch_index)
                self._score[layer] = self._score[layer].index_select(0, batch_index)
            self._pos[layer] = self._pos[layer].index_select(0, batch_index)

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def layer_bytes(self, layer: int) -> int:
        kind = self.kinds[layer]
        if kind == "plain":
            return self._plain[layer].stats().bytes
        if kind == "quant":
            return self._quant[layer].bytes
        return 2 * self._k[layer].numel() * self._k[layer].element_size()

    def stats(self) -> PolicyStats:
        held = tuple(int(self.positions(i).shape[1]) for i in range(self.layers))
        return PolicyStats(
            enabled=True, layers=self.layers, batch=self.batch, kv_heads=self.kv_heads, query_heads=self.query_heads,
            head_dim=self.head_dim, tokens=self.length, max_tokens=self.max_tokens, dtype=dtype_name(self.dtype),
            element_size=self.element_size, windows=tuple(self.windows), held=held,
            held_bytes=tuple(self.layer_bytes(i) for i in range(self.layers)),
            policy=self.policy.to_dict() | {"layer_kinds": list(self.kinds)},
            kept=tuple(tuple(self._pos[i][0].tolist()) if k == "evict" else None for i, k in enumerate(self.kinds)),
        )
