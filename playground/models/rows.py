"""A batch of segments: the token rows of several requests in one forward pass of the model.

A segment is one request's share of a pass: its ids (B, T) after `start` cached positions, its own KV
cache, recorder and source (seq2seq), and the logits it wants. The model's batched pass
(`DecoderLM.forward_rows`, `EncoderDecoderLM.decode_rows`) stacks every token of every segment as one
row (N, 1, d), so the weight products see all rows at once; attention (`SelfAttention`, with these
`Rows` in place of a cache) runs against each segment's own cache, the one-token rows of a layer in one
call when their keys share one buffer (`KVPool`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from playground.models.kv_cache import KVCache, Seq2SeqCache
from playground.models.kv_pool import KVPool
from playground.models.recorder import Recorder


@dataclasses.dataclass
class Segment:
    """One request's share of a batched forward pass: ids (B, T) after `start` cached positions."""

    ids: torch.Tensor
    cache: KVCache | Seq2SeqCache | None
    recorder: Recorder | None
    start: int
    logits: str  # "none", "last" (B, 1, V) or "all" (B, T, V)
    encoder_out: torch.Tensor | None = None  # seq2seq: the source this decoder pass reads
    # set by the seq2seq pass: T5's self-attention bias (1, h, T, start + T), the cross K/V per layer
    self_mask: torch.Tensor | None = None
    cross_kv: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    @property
    def rows(self) -> int:
        return self.ids.numel()

    @property
    def self_cache(self) -> KVCache | None:
        """The self-attention cache (a seq2seq cache holds one beside its cross-attention keys)."""
        return getattr(self.cache, "self_cache", self.cache)


@dataclasses.dataclass(frozen=True)
class PoolPlace:
    """Where one-token rows of a pass sit in their pool: pool rows [lo, hi) are attended in one call."""

    rows: torch.Tensor  # (R,) each token row's pool row
    source: torch.Tensor  # (R,) its row in the stacked batch
    local: torch.Tensor  # (R,) rows - lo
    lo: int
    hi: int
    dense: bool  # rows are exactly lo, lo + 1, ..., hi - 1 (no row of the span is left out)


class Rows:
    """The segments of one pass and where their token rows sit in the stacked (N, 1, d) batch."""

    def __init__(self, segments: list[Segment]) -> None:
        self.segments = segments
        self._memo: dict[tuple, object] = {}  # what every layer of this pass shares (indices, masks)
        self.bounds: list[tuple[int, int]] = []
        a = 0
        for s in segments:
            self.bounds.append((a, a + s.rows))
            a += s.rows

    def ids(self) -> torch.Tensor:
        """(N, 1): every segment's tokens, one per row (beams and positions row-major)."""
        return torch.cat([s.ids.reshape(-1) for s in self.segments])[:, None]

    def per_row(self, tables: list[torch.Tensor]) -> torch.Tensor:
        """Per-segment (T, c) tables -> (N, c): the table row of every token row, beams repeating it."""
        return torch.cat([t.expand(s.ids.shape[0], -1, -1).reshape(s.rows, -1) for t, s in zip(tables, self.segments)])

    def record_residual(self, x: torch.Tensor) -> None:
        """x (N, 1, d) after the embedding or a block: each recording segment keeps its own rows."""
        for s, (a, b) in zip(self.segments, self.bounds):
            if s.recorder is not None:
                s.recorder.record_residual(x[a:b].reshape(*s.ids.shape, -1))

    def logits(self, x: torch.Tensor, unembed: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor | None]:
        """The logits each segment asks for, from the last residual stream x (N, 1, d): the head runs
        once over the picked rows only."""
        picks: list[int] = []
        for s, (a, b) in zip(self.segments, self.bounds):
            B, T = s.ids.shape
            if s.logits == "all":
                picks.extend(range(a, b))
            elif s.logits == "last":
                picks.extend(a + i * T + T - 1 for i in range(B))
        logits = unembed(x[picks]) if picks else None  # (K, 1, V)
        out: list[torch.Tensor | None] = []
        at = 0
        for s in self.segments:
            B, T = s.ids.shape
            n = {"none": 0, "last": B, "all": B * T}[s.logits]
            out.append(None if n == 0 else logits[at : at + n].reshape(B, n // B, -1))
            at += n
        return out

    def pool_rows(self, pool: KVPool, group: list[int], caches: list[KVCache]) -> PoolPlace:
        """The pool rows of segments `group` (one-token rows whose `caches` are rows of `pool`)."""
        key = ("rows", id(pool), tuple(group))
        if key not in self._memo:
            rows, source = [], []
            for i, cache in zip(group, caches):
                a, b = self.bounds[i]
                first = pool.row_of(cache)
                rows.extend(range(first, first + b - a))
                source.extend(range(a, b))
            lo, hi = min(rows), max(rows) + 1
            device = self.segments[group[0]].ids.device
            as_tensor = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
            self._memo[key] = PoolPlace(as_tensor(rows), as_tensor(source), as_tensor([r - lo for r in rows]), lo, hi,
                                        rows == list(range(lo, hi)))
        return self._memo[key]

    def slots(self, pool: KVPool, group: list[int], slots: list[int]) -> torch.Tensor:
        """(R,) the slot each token row of `group` writes its new key to (one per segment, beams alike)."""
        key = ("slots", id(pool), tuple(group), tuple(slots))
        if key not in self._memo:
            counts = [b - a for a, b in (self.bounds[i] for i in group)]
            self._memo[key] = torch.tensor([slot for slot, n in zip(slots, counts) for _ in range(n)],
                                           device=self.segments[group[0]].ids.device)
        return self._memo[key]

    def pool_mask(
        self, pool: KVPool, place: PoolPlace, group: list[int], caches: list[KVCache], held: list[int], width: int,
        biased: bool, heads: int,
    ) -> torch.Tensor:
        """The mask of a pooled call over pool rows [lo, hi) for segments `group`, `width` slots each:
        (rows, 1, 1, width) bool, True on the `held` slots of each of their `caches`' rows; with T5's
        position bias (`biased`: the segments' `self_mask`), the additive (rows, h, 1, width) bias instead,
        the dtype's minimum on empty slots. A row of the span outside `place` sees one slot (its result
        is dropped)."""
        key = ("mask", id(pool), width, tuple(group), tuple(held))
        if key not in self._memo:
            device = place.rows.device
            lengths = torch.ones(place.hi - place.lo, dtype=torch.long, device=device)
            counts = torch.tensor([n for n, c in zip(held, caches) for _ in range(c.batch)], device=device)
            lengths[place.local] = counts
            visible = torch.arange(width, device=device)[None, :] < lengths[:, None]  # (rows, width)
            if not biased:
                self._memo[key] = visible[:, None, None, :]
            else:
                dtype = self.segments[group[0]].self_mask.dtype
                bias = torch.full((place.hi - place.lo, heads, 1, width), torch.finfo(dtype).min, dtype=dtype, device=device)
                for i, cache in zip(group, caches):
                    first, mask = pool.row_of(cache) - place.lo, self.segments[i].self_mask
                    bias[first : first + cache.batch, :, :, : mask.shape[-1]] = mask
                self._memo[key] = bias
        return self._memo[key]
