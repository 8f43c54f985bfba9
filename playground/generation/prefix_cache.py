"""Prefix caching: the K/V of identical prompt beginnings, computed once and reused across runs and visitors.

    store = PrefixStore(budget_bytes=64 * 2**20)       # one per model object (the server keeps them)
    key = store.key(parent_key, block_ids)             # a hash chain: a block's key names every token before it
    block = store.get(key, block_ids)                  # or None; a hit is the most recently used
    store.put(key, parent_key, Block(block_ids, parent_key, keys, values))
    tail = store.tail_key(parent_key, last_ids, cache.rings)  # a prompt's last chunk: Block(..., logits=first_logits)

A prompt is cut into blocks of `BLOCK` tokens at the positions the shared batch cuts its chunked prefill
(`generation.batch.CHUNK` is `BLOCK`), so a block's keys and values are exactly what a fresh run's own chunk
writes: restoring blocks, then computing the rest chunk by chunk, is the fresh run's computation, bitwise
(the same pass shapes, the same cached inputs). A block is stored only once the pass that wrote it is done.

The prompt's last chunk (1 to `BLOCK` tokens) is kept too, as a *tail*: its keys and values and the logits its
pass returned (what the first token is chosen from), named by the chain before it, its own ids and the cache's
ring layers (a sliding layer stored as a ring attends through another call). A run whose whole prompt is held
restores every block and the tail and skips the prompt's pass: its first token comes from the stored logits
through its own sampler, so a prompt of any length sent again is reused whole, bitwise. A tail is never a block
of a longer prompt: that prompt's fresh run feeds those positions in a full chunk (another pass shape, so other
last bits), so a longer prompt reuses the shorter one's full blocks only. Only runs that record nothing of the
last pass read or write tails (a run that records it needs that pass's captures, which a tail does not hold).
One store serves one model object: a precision copy, a dtype, an upload are other objects with
stores of their own; runs whose passes change keys and values (edits, a KV policy or RoPE table of their own)
never read or write one (the batch sends them through turns of their own).

Blocks are evicted least recently used under the store's byte budget; a block goes with the blocks after it
(their keys name it: without it they can never be reached), and a block never evicts its own beginning (a
prompt longer than the budget keeps its first blocks); a tail goes with its last block and counts in the
budget like one.
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
    """One block's token ids and, per layer, the keys and values (h_kv, n, d) its chunk left in the cache; a tail
    (a prompt's last chunk) also holds the logits its pass returned."""

    ids: tuple[int, ...]
    parent: bytes
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    children: set[bytes] = dataclasses.field(default_factory=set)
    logits: torch.Tensor | None = None  # a tail's: what the last chunk's pass returned (the first token's scores)

    @property
    def nbytes(self) -> int:
        extra = (self.logits,) if self.logits is not None else ()
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values, *extra))


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

    @staticmethod
    def tail_key(parent: bytes, ids: Sequence[int], rings: Sequence[bool]) -> bytes:
        """A prompt's last chunk's name: the chain before it, its ids and which layers the cache keeps as rings
        (a ring layer's pass attends through another call, so its logits may differ in the last bits)."""
        data = b"tail" + parent + array("q", ids).tobytes() + bytes(rings)
        return hashlib.blake2b(data, digest_size=16).digest()

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
        """(blocks and tails, bytes) held now."""
        return len(self._blocks), self.bytes

    def hit_rate(self) -> float | None:
        """Blocks and tails restored over those looked for (None before any)."""
        looked = self.hits + self.misses
        return self.hits / looked if looked else None


WAIT_STEPS = 4  # a run waits at most this many steps in a row for a block (or tail) another run is computing


class Feed:
    """One prefill's walk along the chain of its prompt's blocks: restore each block held, compute the others
    (and keep them), wait a step for one that another live run is computing right now (so a class sending one
    prompt at once computes it once, not once per visitor); then the same for the last chunk's tail (`last`).
    `reused` counts the tokens restored; `logits` is a restored tail's."""

    def __init__(self, store: PrefixStore, run: Computing) -> None:
        self.store, self.run = store, run
        self.parent = ROOT
        self.reused = 0
        self.logits: torch.Tensor | None = None
        self._waited = 0
        self._next: tuple[bytes, tuple[int, ...]] | None = None

    def next(self, cache: KVCache, ids: Sequence[int], *, wait: bool = True) -> str:
        """For the block `ids` at the cache's end: "restored" (now in the cache), "wait" (ask again next step;
        never without `wait`) or "compute" (the caller runs the chunk, then calls `keep`)."""
        ids = tuple(ids)
        return self._walk(cache, self.store.key(self.parent, ids), ids, wait)

    def last(self, cache: KVCache, ids: Sequence[int], *, wait: bool = True) -> str:
        """`next` for the prompt's last chunk `ids`: "restored" puts it in the cache and its pass's logits in
        `logits` (the pass is skipped); after "compute" the caller runs the pass, then calls `keep_last`."""
        ids = tuple(ids)
        return self._walk(cache, self.store.tail_key(self.parent, ids, cache.rings), ids, wait)

    def _walk(self, cache: KVCache, key: bytes, ids: tuple[int, ...], wait: bool) -> str:
        entry = self.store.get(key, ids)
        if entry is not None:
            start = cache.length
            cache.write_span(start, start + len(ids), entry.keys, entry.values)
            self.parent, self.reused, self._waited = key, self.reused + len(ids), 0
            self.logits = entry.logits.clone() if entry.logits is not None else None  # the store's copy stays
            return "restored"
        if wait and self.store.computing(key) and self._waited < WAIT_STEPS:
            self._waited += 1
            return "wait"
        self.store.begin(key, self.run)
        self._next, self._waited = (key, ids), 0
        return "compute"

    def keep(self, cache: KVCache) -> None:
        """The block just computed (the cache's last `BLOCK` positions) joins the store."""
        self._keep(cache, None)

    def keep_last(self, cache: KVCache, logits: torch.Tensor) -> None:
        """The last chunk just computed joins the store as a tail, with the logits its pass returned."""
        self._keep(cache, logits.clone())  # a copy: the pass's output may be a view the run goes on to use

    def _keep(self, cache: KVCache, logits: torch.Tensor | None) -> None:
        assert self._next is not None, "keeping follows a next() or last() that said compute"
        key, ids = self._next
        end = cache.length
        keys, values = cache.read_span(end - len(ids), end)
        self.store.put(key, self.parent, Block(ids, self.parent, keys, values, logits=logits))
        self.parent, self._next = key, None


class Alone:
    """A run that computes its blocks within one turn (a captured step's prefill): never waited for."""

    def live(self) -> bool:
        return False


def prefill(model: torch.nn.Module, ids: torch.Tensor, cache: KVCache, recorder: Any, feed: Feed) -> torch.Tensor:
    """A whole prompt `ids` (1, T) into an empty `cache` in one turn, as the batch feeds it: every full block
    before the last chunk restored or computed (and kept), then the last chunk: restored with its logits where
    nothing is recorded and the store holds the whole prompt, else its pass, which records and returns the
    logits (1, t, V) (kept as a tail when nothing was recorded)."""
    while ids.shape[1] > BLOCK:
        chunk, ids = ids[:, :BLOCK], ids[:, BLOCK:]
        if feed.next(cache, chunk[0].tolist(), wait=False) == "compute":
            model(chunk, cache, None, last_only=True)
            feed.keep(cache)
    if recorder is not None:  # the pass's captures are the run's own: a tail holds none
        return model(ids, cache, recorder, last_only=True)
    if feed.last(cache, ids[0].tolist(), wait=False) == "restored":
        assert feed.logits is not None
        return feed.logits
    logits = model(ids, cache, None, last_only=True)
    feed.keep_last(cache, logits)
    return logits
