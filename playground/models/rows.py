"""A pass of the model: the token rows of one or more requests, the only input our models take.

A `Batch` is what a forward pass reads besides the weights: its token ids, the position of each
token (absolute positions and rotary tables), how each layer stores and attends its keys, what it
records and which logits come out. The model's code (`DecoderLM.run`, the blocks, the attention) is
the same for every kind of batch:

- `Rows`: the eager pass over `Segment`s (a request's share of a pass: ids (B, T) after `start`
  cached positions, its own KV cache, recorder and source). The model's own pass (`forward`) is one
  segment laid out as (B, T) tokens, exactly as a plain forward pass; a *shared* pass
  (`forward_rows`, the batch scheduler's) stacks every token of every segment as one row (N, 1) so
  the weight products see all rows at once, through the batch-invariant kernels
  (`models/kernels.py`), and the one-token rows whose caches share one buffer (`KVPool`) attend in
  one call.
- `models.static.StaticRows`: the captured decode step: one token per row, positions and cache
  lengths as tensors, a static cache written at position tensors (what `torch.compile` and
  `torch.export` trace without a break).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from playground.interventions import Intervention, Patch
from playground.models import edits
from playground.models.kv_cache import KVCache, Seq2SeqCache
from playground.models.kv_pool import KVPool
from playground.models.recorder import Recorder

if TYPE_CHECKING:
    from playground.models.kv_policy import PolicyCache


class Batch:
    """The interface a forward pass reads (see the module docstring). Hidden states are laid out as
    (L0, L1, d) tokens; what a layer attends gets (L0, heads, L1, d) and returns (L0, L1, heads·d)."""

    invariant = False  # weight products through the batch-invariant (prepacked) kernels

    def ids(self) -> torch.Tensor:
        raise NotImplementedError

    def absolute(self, module: torch.nn.Module, *, with_ids: bool = False) -> torch.Tensor:
        """The absolute position vectors to add to the embeddings, broadcastable to (L0, L1, d)."""
        raise NotImplementedError

    def rotary(self, rope: torch.nn.Module, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of every token's position, broadcastable to (L0, heads, L1, r)."""
        raise NotImplementedError

    def attend(self, attn: torch.nn.Module, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def attended(self, layer: int, out: torch.Tensor) -> None:
        """The attention's output (L0, L1, d) after its projection (what internals record)."""

    def cross_attend(self, attn: torch.nn.Module, layer: int, q: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no source to attend")

    def edit_heads(self, layer: int, x: torch.Tensor, head_dim: int, *, cross: bool = False) -> torch.Tensor:
        """The heads' outputs (L0, L1, h·head_dim) of a layer's self- (or `cross`-) attention before its output
        projection, as the pass's edits leave them (`models.edits`)."""
        return x

    def edit_mlp(self, layer: int, y: torch.Tensor) -> torch.Tensor:
        """A block's MLP output (L0, L1, d) as the pass's edits leave it."""
        return y

    def edit_block(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """A block's output, the residual stream (L0, L1, d), as the pass's edits leave it."""
        return x

    def record_residual(self, x: torch.Tensor) -> None:
        """x (L0, L1, d) after the embedding or a block."""

    def logits(self, x: torch.Tensor, unembed: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor | None]:
        raise NotImplementedError


@dataclasses.dataclass
class Segment:
    """One request's share of a forward pass: ids (B, T) after `start` cached positions."""

    ids: torch.Tensor
    cache: KVCache | Seq2SeqCache | PolicyCache | None
    recorder: Recorder | None
    start: int
    logits: str  # "none", "last" (B, 1, V) or "all" (B, T, V)
    encoder_out: torch.Tensor | None = None  # seq2seq: the source this decoder pass reads
    # T5's self-attention bias (1, h, T, start + T), or an encoder's padding / bias mask: replaces the causal rule
    self_mask: torch.Tensor | None = None
    cross_kv: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None  # set by the seq2seq pass, per layer
    cross_mask: torch.Tensor | None = None  # additive (B, 1, 1, S): the source's padding
    causal: bool = True  # False: an encoder's bidirectional pass
    kind: str = "self"  # what its self-attention records as: "self" (a decoder) or "encoder"
    edits: tuple[Intervention, ...] = ()  # its request's interventions, applied to its rows only (`models.edits`)
    taps: edits.Taps = dataclasses.field(default_factory=dict)  # readers of its edited sites (`models.edits.tapped`)

    @property
    def rows(self) -> int:
        return self.ids.numel()

    @property
    def stack(self) -> str:
        """The stack its pass runs through, as an edit names it: "encoder" or "decoder"."""
        return "encoder" if self.kind == "encoder" else "decoder"

    @property
    def self_cache(self) -> KVCache | PolicyCache | None:
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


class Rows(Batch):
    """The segments of one eager pass. `shared` False: the model's own pass over one segment, laid out
    (B, T) as a plain forward pass; True: every token of every segment one row of (N, 1), the
    batch-invariant kernels, and the pooled one-token rows attending together."""

    def __init__(self, segments: list[Segment], *, shared: bool = False) -> None:
        if not shared and len(segments) != 1:
            raise ValueError("a pass of several segments is a shared one (Rows(..., shared=True))")
        self.segments, self.shared = segments, shared
        self.invariant = shared
        self._memo: dict[tuple, object] = {}  # what every layer of this pass shares (indices, masks)
        self._internals: list[tuple[Recorder, int, str, tuple]] = []  # (recorder, segment, kind, (q, k, v))
        self.bounds: list[tuple[int, int]] = []
        self.edited = any(s.edits for s in segments)  # most passes have no edit and no tap: nothing to look up
        self.tapped = any(s.taps for s in segments)
        a = 0
        for s in segments:
            self.bounds.append((a, a + s.rows))
            a += s.rows

    # --- layout: (B, T) for the model's own pass, (N, 1) for a shared one

    def view(self, i: int, t: torch.Tensor) -> torch.Tensor:
        """Segment i's part of a layer tensor (L0, heads, L1, d) -> (B, heads, T, d)."""
        if not self.shared:
            return t
        (a, b), (B, T) = self.bounds[i], self.segments[i].ids.shape
        return t[a:b] if T == 1 else t[a:b].reshape(B, T, *t.shape[1:2], -1).transpose(1, 2)

    def to_layout(self, i: int, out: torch.Tensor) -> torch.Tensor:
        """Segment i's attention output (B, h, T, d) -> its rows of the layout (., L1, h·d)."""
        B, h, T, d = out.shape
        if self.shared:
            return out.reshape(B, 1, h * d) if T == 1 else out.transpose(1, 2).reshape(B * T, 1, h * d)
        return out.transpose(1, 2).reshape(B, T, h * d)

    def join(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def segment_rows(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Segment i's rows of hidden states (L0, L1, d) -> (B, T, d)."""
        if not self.shared:
            return x
        a, b = self.bounds[i]
        return x[a:b].reshape(*self.segments[i].ids.shape, -1)

    def per_row(self, tables: list[torch.Tensor]) -> torch.Tensor:
        """Per-segment (T, c) (or (B, T, c)) tables -> (N, c): the table row of every token row."""
        return torch.cat([t.expand(s.ids.shape[0], -1, -1).reshape(s.rows, -1) for t, s in zip(tables, self.segments)])

    # --- the pass

    def ids(self) -> torch.Tensor:
        if not self.shared:
            return self.segments[0].ids
        return torch.cat([s.ids.reshape(-1) for s in self.segments])[:, None]

    def absolute(self, module: torch.nn.Module, *, with_ids: bool = False) -> torch.Tensor:
        tables = [module(s.start, s.ids.shape[1], *((s.ids,) if with_ids else ())) for s in self.segments]
        return tables[0] if not self.shared else self.per_row(tables)[:, None]

    def rotary(self, rope: torch.nn.Module, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        tables = [rope(s.start, s.ids.shape[1], dtype, None if rope.local else getattr(s.self_cache, "rotary", None))
                  for s in self.segments]
        if not self.shared:
            return tables[0]
        cos = self.per_row([c for c, _ in tables])[:, None, None]  # (N, 1, 1, r): one row per token
        sin = self.per_row([sn for _, sn in tables])[:, None, None]
        return cos, sin

    def attend(self, attn: torch.nn.Module, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return attn.attend_rows(self, layer, q, k, v)

    def cross_attend(self, attn: torch.nn.Module, layer: int, q: torch.Tensor) -> torch.Tensor:
        return attn.attend_rows(self, layer, q)

    def keep_internals(
        self, recorder: Recorder, i: int, kind: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Segment i's q, k and v as attended, recorded with the output once it is projected (`attended`)."""
        self._internals.append((recorder, i, kind, (q, k, v)))

    def attended(self, layer: int, out: torch.Tensor) -> None:
        for rec, i, kind, (q, k, v) in self._internals:
            rec.record_internals(kind, layer, q=q, k=k, v=v, output=self.segment_rows(i, out))
        self._internals = []

    # --- edits: each segment's own, on its rows only (`models.edits`)

    def _rows_of(self, i: int) -> slice:
        """Segment i's rows of a layer tensor (L0, L1, ...): its span of a shared pass, or all of its own."""
        return slice(*self.bounds[i]) if self.shared else slice(None)

    def _edits_at(self, site: str, layer: int) -> list[tuple[int, Intervention]]:
        """(segment, edit) of every edit of this pass at `site` of `layer`, each segment's in its order."""
        if not self.edited:
            return []
        key = ("edits", site, layer)
        if key not in self._memo:
            found = []
            for i, s in enumerate(self.segments):
                found += [(i, iv) for iv in s.edits if iv.layer == layer and iv.stack == s.stack and edits.site(iv) == site]
            self._memo[key] = found
        return self._memo[key]

    def _value(self, iv: Intervention, like: torch.Tensor) -> torch.Tensor | None:
        key = ("value", id(iv))
        if key not in self._memo:
            self._memo[key] = edits.value(iv, like.dtype, like.device)
        return self._memo[key]

    def _tap(self, site: str, layer: int, x: torch.Tensor) -> torch.Tensor:
        """x, once each segment's tap at `site` of `layer` (if any) has read its rows."""
        if not self.tapped:
            return x
        for i, s in enumerate(self.segments):
            tap = s.taps.get((site, s.stack, layer)) if s.taps else None
            if tap is not None:
                tap(self.segment_rows(i, x))
        return x

    def edit_heads(self, layer: int, x: torch.Tensor, head_dim: int, *, cross: bool = False) -> torch.Tensor:
        site = edits.CROSS_HEADS if cross else edits.HEADS
        found = self._edits_at(site, layer)
        if found:
            x = x.clone()
            for i, iv in found:
                lo, hi = iv.head * head_dim, (iv.head + 1) * head_dim
                mean = self._value(iv, x)
                x[self._rows_of(i), ..., lo:hi] = 0.0 if mean is None else mean
        return self._tap(site, layer, x)

    def edit_mlp(self, layer: int, y: torch.Tensor) -> torch.Tensor:
        found = self._edits_at(edits.MLP, layer)
        if found:
            y = y.clone()
            for i, iv in found:
                mean = self._value(iv, y)
                y[self._rows_of(i)] = 0.0 if mean is None else mean
        return self._tap(edits.MLP, layer, y)

    def edit_block(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        found = self._edits_at(edits.BLOCK, layer)
        if found:
            x = x.clone()
            for i, iv in found:
                if isinstance(iv, Patch):
                    self._patch(i, x, iv.position, self._value(iv, x))
                else:
                    rows = self._rows_of(i)
                    x[rows] = x[rows] + self._value(iv, x)
        return self._tap(edits.BLOCK, layer, x)

    def _patch(self, i: int, x: torch.Tensor, position: int, value: torch.Tensor) -> None:
        """Segment i's token rows at absolute `position` set to `value` in x (L0, L1, d), if the pass holds it."""
        s = self.segments[i]
        B, T = s.ids.shape
        row = position - s.start
        if not 0 <= row < T:
            return
        if not self.shared:
            x[:, row] = value
        else:
            a = self.bounds[i][0]
            x[[a + b * T + row for b in range(B)]] = value

    def record_residual(self, x: torch.Tensor) -> None:
        for i, s in enumerate(self.segments):
            if s.recorder is not None:
                s.recorder.record_residual(self.segment_rows(i, x))

    def logits(self, x: torch.Tensor, unembed: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor | None]:
        """The logits each segment asks for, from the last hidden states: the head runs once, over the
        picked rows only."""
        if not self.shared:
            wanted = self.segments[0].logits
            return [None if wanted == "none" else unembed(x[:, -1:] if wanted == "last" else x)]
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

    # --- the one-token rows of a shared pass whose caches are rows of one pool

    def poolable(self, i: int, cache: KVCache | None) -> bool:
        return self.shared and self.segments[i].ids.shape[1] == 1 and cache is not None and cache.pool is not None

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
