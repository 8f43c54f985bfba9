"""Static key/value caches: buffers allocated once, written in place at explicit positions.

`KVCache` holds a model's self-attention keys and values; `Seq2SeqCache` adds the cross-attention
keys and values an encoder-decoder projects once per source. Both describe themselves with
`CacheStats`, the one source of the numbers the KV-cache panel and the CLI report.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from playground.models.kv_pool import KVPool


@dataclass(frozen=True, slots=True)
class CrossCacheStats:
    """The cross-attention K/V of a seq2seq model: computed once from the encoder output.

    One pair per decoder layer, with the decoder's KV heads and head size (the encoder's own head
    counts do not matter: its blocks cache nothing, only its output is projected).
    """

    layers: int  # decoder layers
    batch: int
    kv_heads: int
    head_dim: int
    tokens: int  # source tokens
    element_size: int
    held: bool = True  # False without a cache: every step projects the source again
    query_heads: int | None = None  # the decoder's query heads (None: as many as kv_heads)

    @property
    def bytes(self) -> int:
        if not self.held:
            return 0
        return 2 * self.layers * self.batch * self.kv_heads * self.tokens * self.head_dim * self.element_size

    @property
    def mha_equivalent_bytes(self) -> int:
        """What the same source would take if every query head had its own K/V head."""
        return self.bytes * (self.query_heads or self.kv_heads) // self.kv_heads

    def to_dict(self) -> dict[str, Any]:
        shape = [self.batch, self.kv_heads, self.tokens, self.head_dim]
        return {
            "layers": self.layers, "batch": self.batch, "kv_heads": self.kv_heads,
            "query_heads": self.query_heads or self.kv_heads, "head_dim": self.head_dim, "tokens": self.tokens,
            "element_size": self.element_size, "bytes": self.bytes, "mha_equivalent_bytes": self.mha_equivalent_bytes,
            "per_layer": [{"layer": i, "k_shape": shape, "v_shape": shape} for i in range(self.layers)],
        }


@dataclass(frozen=True, slots=True)  # slots: a run keeps one per step (its events' `kv`)
class CacheStats:
    """What a KV cache holds: `bytes` = 2 · layers · batch · kv_heads · tokens · head_dim · element_size.

    A sliding-window layer keeps only its last `window` positions, so with `windows` (one entry per
    layer, None for full layers) `bytes` sums each layer's kept positions instead; for a model without
    sliding layers it is exactly the formula above. With the cache off (`enabled` False) nothing is
    held and every step recomputes `recomputed_tokens` positions instead.
    """

    enabled: bool
    layers: int
    batch: int
    kv_heads: int
    query_heads: int
    head_dim: int
    tokens: int
    max_tokens: int
    dtype: str
    element_size: int
    recomputed_tokens: int = 0
    reused_tokens: int = 0  # leading positions restored from the server's prefix cache, not computed by this run
    cross_attention: CrossCacheStats | None = field(default=None)
    windows: tuple[int | None, ...] = ()  # per layer: the positions a sliding layer keeps (None: all)

    def _window(self, layer: int) -> int | None:
        return self.windows[layer] if layer < len(self.windows) else None

    def kept_tokens(self, layer: int) -> int:
        """Positions layer `layer` holds now: all of them, or its window's worth."""
        window = self._window(layer)
        return self.tokens if window is None else min(self.tokens, window)

    @property
    def bytes_per_token_per_layer(self) -> int:
        return 2 * self.batch * self.kv_heads * self.head_dim * self.element_size

    @property
    def bytes_per_token(self) -> int:
        """What one more position costs while no sliding layer's window is full."""
        return self.bytes_per_token_per_layer * self.layers

    @property
    def bytes(self) -> int:
        if not any(w is not None for w in self.windows):
            return self.bytes_per_token * self.tokens
        return self.bytes_per_token_per_layer * sum(self.kept_tokens(i) for i in range(self.layers))

    @property
    def allocated_bytes(self) -> int:
        """The buffers themselves: max_tokens positions per full layer, its window per sliding layer."""
        per_layer = [self.max_tokens if w is None else min(self.max_tokens, w) for w in map(self._window, range(self.layers))]
        return self.bytes_per_token_per_layer * sum(per_layer)

    @property
    def mha_equivalent_bytes(self) -> int:
        """What the same tokens would take if every query head had its own K/V head (plain MHA)."""
        return self.bytes * self.query_heads // self.kv_heads

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable; the keys every StepEvent's `cache` and the CLI's `cache` carry.

        per_layer entries: layer, k_shape, v_shape (what the layer holds now), attention ("full" or
        "sliding"), window (positions a sliding layer keeps; None), tokens (positions held), bytes.
        """
        per_layer = []
        for i in range(self.layers):
            kept, window = self.kept_tokens(i), self._window(i)
            shape = [self.batch, self.kv_heads, kept, self.head_dim]
            per_layer.append({
                "layer": i, "k_shape": shape, "v_shape": shape, "attention": "full" if window is None else "sliding",
                "window": window, "tokens": kept, "bytes": self.bytes_per_token_per_layer * kept,
            })
        data: dict[str, Any] = {
            "enabled": self.enabled, "layers": self.layers, "batch": self.batch, "kv_heads": self.kv_heads,
            "query_heads": self.query_heads, "head_dim": self.head_dim, "tokens": self.tokens,
            "max_tokens": self.max_tokens, "dtype": self.dtype, "element_size": self.element_size,
            "bytes_per_token": self.bytes_per_token, "bytes": self.bytes, "allocated_bytes": self.allocated_bytes,
            "mha_equivalent_bytes": self.mha_equivalent_bytes, "recomputed_tokens": self.recomputed_tokens,
            "reused_tokens": self.reused_tokens,
            "sliding_layers": sum(w is not None for w in map(self._window, range(self.layers))),
            "per_layer": per_layer,
        }
        if self.cross_attention is not None:
            data["cross_attention"] = self.cross_attention.to_dict()
        return data


@functools.cache  # asked for every row of every step (its stats): one lookup, not a str() and an intern
def dtype_name(dtype: torch.dtype) -> str:
    return sys.intern(str(dtype).removeprefix("torch."))  # one string per name: a run keeps a stats object per step


class KVCache:
    """Per-layer K and V buffers of shape (B, h_kv, capacity, d_head).

    Each layer writes its new keys and values at an explicit position; `length` is the number of
    positions every layer has written, so no caller has to move it. Grouped-query / multi-query
    models store only their KV heads, which is where their memory saving comes from.

    A sliding-window layer (`windows[layer]` set) keeps only its last `window` positions, in a ring:
    position p lives in slot p % window. That is all its queries can see, so older keys are dropped.
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
        windows: list[int | None] | None = None,
        pool: KVPool | None = None,
    ) -> None:
        self.windows: list[int | None] = list(windows) if windows is not None else [None] * layers
        if len(self.windows) != layers:
            raise ValueError(f"KVCache: {len(self.windows)} windows for {layers} layers")
        # A window at least as long as the cache never wraps: such a layer is stored like a full one.
        self.rings = [w is not None and w < max_tokens for w in self.windows]
        self.capacity = [w if ring else max_tokens for w, ring in zip(self.windows, self.rings)]
        self.layers, self.batch, self.kv_heads, self.head_dim = layers, batch, kv_heads, head_dim
        self.max_tokens, self.query_heads, self.dtype, self.device = max_tokens, query_heads, dtype, torch.device(device)
        self.pool = pool  # rows of a shared buffer (batched decoding), or buffers of its own
        if pool is not None:
            self.keys, self.values = pool.place(self)
        else:
            self.keys = [torch.zeros((batch, kv_heads, n, head_dim), dtype=dtype, device=device) for n in self.capacity]
            self.values = [torch.zeros((batch, kv_heads, n, head_dim), dtype=dtype, device=device) for n in self.capacity]
        self._written = [0] * layers  # positions written, per layer
        self.reused = 0  # leading positions restored from the prefix cache (`write_span`), not computed here

    @property
    def length(self) -> int:
        """Positions that every layer holds (a forward pass in progress has not added its tokens yet)."""
        return min(self._written) if self._written else 0

    def write(
        self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor, *, ordered: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, h_kv, T, d) at positions [start, start + T) and return the keys and values
        the new queries attend to: positions [0, start + T) for a full layer; for a sliding layer the
        positions [start + T - S, start + T) its window reaches (S = window - 1 + T at most).

        One new token on a wrapped ring sees the whole ring, returned as stored (slot order) unless
        `ordered`: attention without a mask does not depend on the order of the keys.
        Writing before the end rewinds that layer to start + T.
        """
        end = start + k.shape[2]
        if end > self.max_tokens:
            raise ValueError(f"KV cache holds {self.max_tokens} tokens; cannot store {end}")
        keys, values = self.keys[layer], self.values[layer]
        if not self.rings[layer]:
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
            self._written[layer] = end
            return keys[:, :, :end], values[:, :, :end]
        return self._write_ring(layer, start, end, k, v, ordered)

    def write_masked(
        self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor, *, ordered: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        """`write`, in a run's `PolicyCache` interface: the keys held here are always a contiguous run of
        positions, so there is no mask or position list (the attention's causal rule applies)."""
        keys, values = self.write(layer, start, k, v, ordered=ordered)
        return keys, values, None, None

    def wants_weights(self, layer: int) -> bool:
        return False  # nothing here depends on the attention (a policy's heavy hitters do)

    def after_attention(self, layer: int, weights: torch.Tensor | None) -> None:
        """Nothing to do once a layer attended (a policy cache evicts here)."""

    def advance(self, layer: int, start: int) -> int:
        """One new token per row at position `start`, written by the caller into its pool rows: the slot
        it goes to (the position, or its place in a sliding layer's ring). Returns the slot."""
        end = start + 1
        if end > self.max_tokens:
            raise ValueError(f"KV cache holds {self.max_tokens} tokens; cannot store {end}")
        self._written[layer] = end
        return start % self.capacity[layer] if self.rings[layer] else start

    def written_to(self, length: int) -> None:
        """Every layer holds positions [0, length): written by a captured step straight into this cache's
        pool rows (`models.static`), which this object only describes."""
        if not 0 <= length <= self.max_tokens:
            raise ValueError(f"KV cache holds {self.max_tokens} tokens; cannot hold {length}")
        self._written = [length] * self.layers

    def rewind(self, length: int) -> None:
        """Forget every position from `length` on (drafted tokens the model rejected): a length reset, the
        buffers stay and the next write overwrites them. A sliding layer's ring may already have overwritten
        the positions before them, so only a cache without rings rewinds (one made with `windows=None`)."""
        if any(self.rings):
            raise ValueError("a KV cache with sliding-window rings cannot rewind; make it without rings")
        if not 0 <= length <= self.length:
            raise ValueError(f"KV cache holds {self.length} positions; cannot rewind to {length}")
        self._written = [length] * self.layers

    def held(self, layer: int) -> int:
        """Slots of `layer` that hold keys now (its first positions, or its whole ring once it wrapped)."""
        return min(self._written[layer], self.capacity[layer])

    def _write_ring(
        self, layer: int, start: int, end: int, k: torch.Tensor, v: torch.Tensor, ordered: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values, window = self.keys[layer], self.values[layer], self.capacity[layer]
        T = k.shape[2]
        if T == 1 and (not ordered or end <= window):
            slot = start % window
            keys[:, :, slot] = k[:, :, 0]
            values[:, :, slot] = v[:, :, 0]
            self._written[layer] = end
            held = min(end, window)  # before the ring wraps, slots are positions: still in order
            return keys[:, :, :held], values[:, :, :held]
        past = min(start, window - 1)  # earlier positions the first new query still sees
        if past and start - past < self._written[layer] - window:
            raise ValueError(f"KV cache layer {layer} no longer holds position {start - past}; its window is {window}")
        slots = torch.arange(start - past, start, device=keys.device) % window
        attended_k = torch.cat((keys.index_select(2, slots), k), dim=2)  # (B, h_kv, past + T, d)
        attended_v = torch.cat((values.index_select(2, slots), v), dim=2)
        kept = min(T, window)
        slots = torch.arange(end - kept, end, device=keys.device) % window
        keys.index_copy_(2, slots, k[:, :, T - kept :])
        values.index_copy_(2, slots, v[:, :, T - kept :])
        self._written[layer] = end
        return attended_k, attended_v

    def _span(self, layer: int, start: int, end: int) -> slice | torch.Tensor:
        """Where the positions of [start, end) that `layer` still holds once `end` is written sit: a slice of
        slots, or a ring's slot indices (a ring narrower than the span keeps only its last positions)."""
        first = max(start, end - self.capacity[layer])
        if not self.rings[layer]:
            return slice(first, end)
        return torch.arange(first, end, device=self.device) % self.capacity[layer]

    def read_span(self, start: int, end: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of row 0's keys and values (h_kv, n, d) per layer for positions [start, end), as held right
        after they were written (a sliding layer narrower than the span holds only its last positions)."""
        if self.length != end:
            raise ValueError(f"read_span: the cache holds {self.length} positions, not {end}")
        keys, values = [], []
        for layer in range(self.layers):
            at = self._span(layer, start, end)
            if isinstance(at, slice):
                keys.append(self.keys[layer][0, :, at].clone())
                values.append(self.values[layer][0, :, at].clone())
            else:
                keys.append(self.keys[layer][0].index_select(1, at))
                values.append(self.values[layer][0].index_select(1, at))
        return keys, values

    def write_span(self, start: int, end: int, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Put back what `read_span(start, end)` read, into row 0 of a cache holding `start` positions: the
        buffers are then bitwise those of the pass that computed them (the same slots, the same rings)."""
        if self.batch != 1 or self.length != start:
            raise ValueError(f"write_span: needs one row holding {start} positions")
        for layer in range(self.layers):
            at = self._span(layer, start, end)
            if isinstance(at, slice):
                self.keys[layer][0, :, at] = keys[layer]
                self.values[layer][0, :, at] = values[layer]
            else:
                self.keys[layer][0].index_copy_(1, at, keys[layer])
                self.values[layer][0].index_copy_(1, at, values[layer])
        self._written = [end] * self.layers
        self.reused = end if self.reused == start else self.reused

    def fill_from(self, source: KVCache) -> None:
        """Broadcast a batch-1 cache into every row of this one (beam search starts from one prefill)."""
        self.reused = source.reused
        n = source.length
        for layer in range(self.layers):
            # Position p sits in slot p % capacity; a sliding layer's capacity is its window in both
            # caches once n passes it, and below that the slots are the positions themselves.
            held = min(n, source.capacity[layer])
            self.keys[layer][:, :, :held] = source.keys[layer][:, :, :held]
            self.values[layer][:, :, :held] = source.values[layer][:, :, :held]
        self._written = [n] * self.layers

    def reorder(self, batch_index: torch.Tensor) -> None:
        """Beam search: row b of the cache becomes old row batch_index[b]."""
        n = self.length
        for buffers in (self.keys, self.values):
            for buf in buffers:
                held = min(n, buf.shape[2])
                buf[:, :, :held] = buf[:, :, :held].index_select(0, batch_index)

    @property
    def element_size(self) -> int:
        return self.keys[0].element_size() if self.keys else 0

    def stats(self) -> CacheStats:
        return CacheStats(
            enabled=True, layers=self.layers, batch=self.batch, kv_heads=self.kv_heads, query_heads=self.query_heads,
            head_dim=self.head_dim, tokens=self.length, max_tokens=self.max_tokens, dtype=dtype_name(self.dtype),
            element_size=self.element_size, windows=self._windows_tuple(), reused_tokens=self.reused,
        )

    def _windows_tuple(self) -> tuple[int | None, ...]:
        """`windows` as the tuple the stats carry, one shared tuple while the windows stay the same (a run keeps a
        stats object per step: one tuple of per-layer windows each would cost as much as the rest of it)."""
        windows = tuple(self.windows)
        if getattr(self, "_shared_windows", None) != windows:
            self._shared_windows = windows
        return self._shared_windows


class Seq2SeqCache:
    """Decoder self-attention KV cache plus the cross-attention K/V of the current source.

    The cross K/V are projected from the encoder output on the first decode call and reused after.
    With `cross_pool` (set by the batch: source length -> a pool), they are stored as rows of that pool
    (`cross`, a KVCache of the source's length), where the one-token rows of many requests read their
    sources in one call.
    """

    def __init__(self, self_cache: KVCache) -> None:
        self.self_cache = self_cache
        self.cross_pool: Callable[[int], KVPool] | None = None
        self.cross: KVCache | None = None  # the cross K/V as pool rows
        self._cross_keys: list[torch.Tensor] | None = None  # per layer (B, h_kv, S, d_head)
        self._cross_values: list[torch.Tensor] | None = None

    @property
    def length(self) -> int:
        return self.self_cache.length

    @property
    def cross_keys(self) -> list[torch.Tensor] | None:
        return self.cross.keys if self.cross is not None else self._cross_keys

    @property
    def cross_values(self) -> list[torch.Tensor] | None:
        return self.cross.values if self.cross is not None else self._cross_values

    @property
    def cross_ready(self) -> bool:
        return self.cross_keys is not None

    def set_cross(self, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        if self.cross_pool is None:
            self._cross_keys, self._cross_values = keys, values
            return
        B, h_kv, S, d = keys[0].shape
        c = self.self_cache
        self.cross = KVCache(layers=len(keys), batch=B, kv_heads=h_kv, head_dim=d, max_tokens=S, query_heads=c.query_heads,
                             dtype=keys[0].dtype, device=keys[0].device, pool=self.cross_pool(S))
        for layer, (k, v) in enumerate(zip(keys, values)):
            self.cross.write(layer, 0, k, v)

    def reorder(self, batch_index: torch.Tensor) -> None:
        """Beam search: row b becomes old row batch_index[b], in the self cache and the cross K/V."""
        self.self_cache.reorder(batch_index)
        if self.cross is not None:
            self.cross.reorder(batch_index)
        elif self._cross_keys is not None and self._cross_values is not None:
            self._cross_keys = [k.index_select(0, batch_index) for k in self._cross_keys]
            self._cross_values = [v.index_select(0, batch_index) for v in self._cross_values]

    def stats(self) -> CacheStats:
        c = self.self_cache
        first = self.cross_keys[0] if self.cross_keys else None
        if first is None:  # no source projected yet: the decoder's shapes, no tokens
            batch, kv_heads, tokens, head_dim, size = c.batch, c.kv_heads, 0, c.head_dim, c.element_size
        else:
            (batch, kv_heads, tokens, head_dim), size = first.shape, first.element_size()
        cross = CrossCacheStats(
            layers=c.layers, batch=batch, kv_heads=kv_heads, head_dim=head_dim, tokens=tokens, element_size=size,
            query_heads=c.query_heads,
        )
        return dataclasses.replace(c.stats(), cross_attention=cross)
