"""Prefix caching: the K/V of identical prompt beginnings, computed once and reused across runs and visitors.

    store = PrefixStore(budget_bytes=64 * 2**20)       # one per model object (the server keeps them)
    key = store.key(parent_key, block_ids)             # a hash chain: a block's key names every token before it
    block = store.get(key, block_ids)                  # or None; a hit is the most recently used
    store.put(key, parent_key, Block(block_ids, parent_key, keys, values))

A prompt is cut into blocks of `BLOCK` tokens at the positions the shared batch cuts its chunked prefill
(`generation.batch.CHUNK` is `BLOCK`), so a block's keys and values are exactly what a fresh run's own chunk
writes: restoring blocks, then computing the rest chunk by chunk, is the fresh run's computation, bitwise
(the same pass shapes, the same cached inputs). A block is stored only once the pass that wrote it is done,
and only full blocks before the prompt's last chunk are kept (the last chunk's pass gives the logits, so it
always runs). One store serves one model object: a precision copy, a dtype, an upload are other objects with
stores of their own; runs whose passes change keys and values (edits, a KV policy or RoPE table of their own)
never read or write one (the batch sends them through turns of their own).

Blocks are evicted least recently used under the store's byte budget; a block goes with the blocks after it
(their keys name it: without it they can never be reached), and a block never evicts its own beginning (a
prompt longer than the budget keeps its first blocks).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from array import array
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from playground.models.kv_cache import KVCache


class Computing(Protocol):
    def live(self) -> bool: ...


BLOCK = 32  # tokens per block: the batch's prefill chunk, so blocks are what chunks write
ROOT = b""  # the parent key of a prompt's first block


@dataclasses.dataclass
class Block:
    """One block's token ids and, per layer, the keys and values (h_kv, n, d) its chunk left in the cache."""

    ids: tuple[int, ...]
    parent: bytes
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    children: set[bytes] = dataclasses.field(default_factory=set)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class PrefixStore:
    """Hash-chained K/V blocks of one model, least recently used first out, within `budget_bytes`.

    Used on the torch thread only (the batch's steps); `held` and `counts` may be read from any thread."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._blocks: collections.OrderedDict[bytes, Block] = collections.OrderedDict()  # oldest use first
        self.bytes = 0
        self.hits = 0  # blocks restored
        self.misses = 0  # blocks looked for, not found and computed
        self._pending: dict[bytes, Computing] = {}  # blocks being computed now, by whom
        self.evicted = 0

    @staticmethod
    def key(parent: bytes, ids: Sequence[int]) -> bytes:
        """The block's name: its parent's and its own token ids (so, every token from the prompt's start)."""
        return hashlib.blake2b(parent + array("q", ids).tobytes(), digest_size=16).digest()

    def get(self, key: bytes, ids: Sequence[int]) -> Block | None:
        block = self._blocks.get(key)
        if block is None or block.ids != tuple(ids):  # the ids are checked too: a hash is never trusted alone
            return None
        self._blocks.move_to_end(key)
        self.hits += 1
        return block

    def computing(self, key: bytes) -> bool:
        """Whether a live run is computing this block now (a run that needs it too had better wait a step)."""
        run = self._pending.get(key)
        return run is not None and run.live()

    def begin(self, key: bytes, run: Computing) -> None:
        """`run` computes this block (a miss): others that need it wait for its `put`."""
        self.misses += 1
        self._pending[key] = run

    def put(self, key: bytes, parent: bytes, block: Block) -> None:
        """Keep `block` (its chain's previous block `parent` must be held, or be ROOT)."""
        self._pending.pop(key, None)
        if key in self._blocks:  # two runs computed it in the same step: the first copy stays
            self._blocks.move_to_end(key)
            return
        if parent != ROOT and parent not in self._blocks:
            return  # its beginning was evicted meanwhile: it could never be reached
        size = block.nbytes
        if size > self.budget_bytes:
            return
        chain = self._chain(parent)
        while self.bytes + size > self.budget_bytes:
            oldest = next((k for k in self._blocks if k not in chain), None)
            if oldest is None:
                return  # only its own beginning is held: a prompt longer than the budget keeps its first blocks
            self._evict(oldest)
        self._blocks[key] = block
        self.bytes += size
        if parent != ROOT:
            self._blocks[parent].children.add(key)

    def _chain(self, key: bytes) -> set[bytes]:
        """`key` and the blocks before it (never evicted to make room for the block after them)."""
        chain = set()
        while key != ROOT:
            chain.add(key)
            key = self._blocks[key].parent
        return chain

    def _evict(self, key: bytes) -> None:
        block = self._blocks.pop(key, None)
        if block is None:
            return
        self.bytes -= block.nbytes
        self.evicted += 1
        for child in block.children:
            self._evict(child)

    def clear(self) -> None:
        self._blocks.clear()
        self.bytes = 0

    def held(self) -> tuple[int, int]:
        """(blocks, bytes) held now."""
        return len(self._blocks), self.bytes

    def hit_rate(self) -> float | None:
        """Blocks restored over blocks looked for (None before any)."""
        looked = self.hits + self.misses
        return self.hits / looked if looked else None


WAIT_STEPS = 4  # a run waits at most this many steps in a row for a block another run is computing


class Feed:
    """One prefill's walk along the chain of its prompt's blocks: restore each block held, compute the others
    (and keep them), wait a step for one that another live run is computing right now (so a class sending one
    prompt at once computes it once, not once per visitor). `reused` counts the tokens restored."""

    def __init__(self, store: PrefixStore, run: Computing) -> None:
        self.store, self.run = store, run
        self.parent = ROOT
        self.reused = 0
        self._waited = 0
        self._next: tuple[bytes, tuple[int, ...]] | None = None

    def next(self, cache: KVCache, ids: Sequence[int], *, wait: bool = True) -> str:
        """For the block `ids` at the cache's end: "restored" (now in the cache), "wait" (ask again next step;
        never without `wait`) or "compute" (the caller runs the chunk, then calls `keep`)."""
        ids = tuple(ids)
        key = self.store.key(self.parent, ids)
        block = self.store.get(key, ids)
        if block is not None:
            start = cache.length
            cache.write_span(start, start + len(ids), block.keys, block.values)
            self.parent, self.reused, self._waited = key, self.reused + len(ids), 0
            return "restored"
        if wait and self.store.computing(key) and self._waited < WAIT_STEPS:
            self._waited += 1
            return "wait"
        self.store.begin(key, self.run)
        self._next, self._waited = (key, ids), 0
        return "compute"

    def keep(self, cache: KVCache) -> None:
        """The block just computed (the cache's last `BLOCK` positions) joins the store."""
        assert self._next is not None, "keep() follows a next() that said compute"
        key, ids = self._next
        end = cache.length
        keys, values = cache.read_span(end - len(ids), end)
        self.store.put(key, self.parent, Block(ids, self.parent, keys, values))
        self.parent, self._next = key, None


class Alone:
    """A run that computes its blocks within one turn (a captured step's prefill): never waited for."""

    def live(self) -> bool:
        return False


def prefill(model: torch.nn.Module, ids: torch.Tensor, cache: KVCache, recorder: Any, feed: Feed) -> torch.Tensor:
    """A whole prompt `ids` (1, T) into an empty `cache` in one turn, as the batch feeds it: every full block
    before the last chunk restored or computed (and kept), then the last chunk's pass, which records and
    returns the logits (1, t, V)."""
    while ids.shape[1] > BLOCK:
        chunk, ids = ids[:, :BLOCK], ids[:, BLOCK:]
        if feed.next(cache, chunk[0].tolist(), wait=False) == "compute":
            model(chunk, cache, None, last_only=True)
            feed.keep(cache)
    return model(ids, cache, recorder, last_only=True)
