"""One buffer per layer for the KV caches of many requests, so their one-token rows attend in one call.

    pool = KVPool(tokens=256)
    cache = model.new_cache(batch, max_tokens, pool=pool)   # its rows are views of the pool's buffers
    ...
    pool.release(cache)

Row r of the pool is one cache row; every layer holds `width(layer)` positions per row: the pool's
`tokens` (a bucket that covers the caches' `max_tokens`), or a sliding layer's window when shorter.
Attention reads a layer's rows [lo, hi) as one (rows, h_kv, width, d) view with a mask of each row's
own length; the width a row is padded to (`key_width`) is a function of its own length only, so its
numbers never depend on its neighbours. The rows grow on demand: the buffers are copied
into bigger ones and every live cache is pointed at its new rows.
"""

from __future__ import annotations

import torch

from playground.models.kv_cache import KVCache

MIN_TOKENS = 64
GROWTH = 4  # rows added at least when the pool grows (a few spare rows, not a doubling: memory is budgeted)
KEY_BLOCK = 64  # a pooled row's keys are padded to a multiple of this (of its own length only)


def bucket(max_tokens: int) -> int:
    """The pool width for a cache of `max_tokens` positions: the next power of two, at least 64."""
    width = MIN_TOKENS
    while width < max_tokens:
        width *= 2
    return width


def key_width(held: int, width: int) -> int:
    """The keys a pooled row attends over: its `held` slots rounded up to KEY_BLOCK, at most the pool's
    `width`. A function of the row's own length: the padding never depends on the other rows (padding
    to a neighbour's length moves the last bits of the softmax and PV sums on the CPU)."""
    return min(width, -(-held // KEY_BLOCK) * KEY_BLOCK)


class KVPool:
    """Rows of KV caches of one model and one token bucket in shared per-layer buffers."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.keys: list[torch.Tensor] = []  # per layer (rows, h_kv, width, d)
        self.values: list[torch.Tensor] = []
        self.owners: list[KVCache | None] = []  # per row: the cache it belongs to (None: free)
        self.first_row: dict[int, int] = {}  # id(cache) -> its first row

    def reserve(
        self, rows: int, *, kv_heads: int, head_dim: int, windows: list[int | None], dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        """Allocate `rows` rows of caches of this shape now (a captured step reads the buffers as they are:
        they must never grow, so it places no more caches than it reserved rows)."""
        if not self.keys:
            self._shape(kv_heads, head_dim, windows, dtype, device)
        if rows > len(self.owners):
            self._grow(rows)

    def _shape(self, kv_heads: int, head_dim: int, windows: list[int | None], dtype: torch.dtype,
               device: torch.device) -> None:
        shapes = [(0, kv_heads, self.width(w), head_dim) for w in windows]
        self.keys = [torch.zeros(s, dtype=dtype, device=device) for s in shapes]
        self.values = [torch.zeros(s, dtype=dtype, device=device) for s in shapes]

    def width(self, window: int | None) -> int:
        return self.tokens if window is None else min(self.tokens, window)

    @property
    def nbytes(self) -> int:
        """The bytes of its buffers (every layer's keys and values, free rows included)."""
        return sum(t.nbytes for t in (*self.keys, *self.values))

    @property
    def live(self) -> int:
        return sum(o is not None for o in self.owners)

    def place(self, cache: KVCache) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Rows for `cache` (its batch, contiguous); returns its per-layer views (B, h_kv, capacity, d)."""
        if cache.max_tokens > self.tokens:
            raise ValueError(f"a pool of {self.tokens} positions cannot hold a cache of {cache.max_tokens}")
        if not self.keys:
            self._shape(cache.kv_heads, cache.head_dim, cache.windows, cache.dtype, cache.device)
        B = cache.batch
        run, at = 0, None
        for r, owner in enumerate(self.owners):
            run = run + 1 if owner is None else 0
            if run == B:
                at = r - B + 1
                break
        if at is None:
            tail = next((i for i in range(len(self.owners), 0, -1) if self.owners[i - 1] is not None), 0)
            at = tail
            self._grow(max(at + B, len(self.owners) + GROWTH))
        self.owners[at : at + B] = [cache] * B
        self.first_row[id(cache)] = at
        return self._views(cache, at)

    def _views(self, cache: KVCache, at: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        rows = slice(at, at + cache.batch)
        keys = [buf[rows, :, :n] for buf, n in zip(self.keys, cache.capacity)]
        values = [buf[rows, :, :n] for buf, n in zip(self.values, cache.capacity)]
        return keys, values

    def _grow(self, rows: int) -> None:
        old = len(self.owners)
        for buffers in (self.keys, self.values):
            for i, buf in enumerate(buffers):
                bigger = buf.new_zeros((rows, *buf.shape[1:]))
                bigger[:old] = buf
                buffers[i] = bigger
        self.owners.extend([None] * (rows - old))
        for cache in {id(c): c for c in self.owners if c is not None}.values():
            cache.keys, cache.values = self._views(cache, self.first_row[id(cache)])

    def release(self, cache: KVCache) -> None:
        """Free the cache's rows (the cache must not be used after)."""
        at = self.first_row.pop(id(cache), None)
        if at is not None:
            self.owners[at : at + cache.batch] = [None] * cache.batch

    def row_of(self, cache: KVCache) -> int:
        """The pool row of the cache's first row."""
        return self.first_row[id(cache)]
