"""CacheBlend's mechanics: a prompt's keys and values taken from chunks cached alone instead of computed, with the
model's own passes and its own KV cache. What the lab measures of it is `playground.analysis.cache_blend`; a run
whose prompt cache is blended (`GenerationConfig.cache_blend`) decodes from `blended_prompt`.

* **CacheBlend** (Yao et al., EuroSys 2025). A prompt made of chunks (documents, paragraphs) whose K/V were each
  cached *alone*, at positions 0 … len−1. Reusing them in a new prompt needs two fixes:

  1. Position. With RoPE a cached key k_m = R_m·W_k·x sits at position m. Moving the chunk to start at s is one
     more rotation, R_s·R_m = R_{m+s}, because ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩ (`rotate_keys`, with the model's own
     rotary table). Learned and sinusoidal models cannot (`why_not_movable`): their position is added to the hidden
     state before the first layer and mixed into every key, which no operation on the key undoes. T5's bias and
     ALiBi keep the position out of the keys (a bias on the scores, from the distance), so there is nothing to
     rotate: the seed's table marks them "no", though strictly their keys would need no move at all. Here T5 is an
     encoder-decoder and no decoder uses ALiBi, so both are refused with their reason.
  2. Cross-attention. A chunk computed alone never attended to the chunks before it, so from layer 1 on its K/V
     deviate from the full prefill's (`deviation`). CacheBlend recomputes the tokens whose K/V deviate most.

  Definitions used here (ids: the prompt, T tokens; the last token is always computed, it is where the answer is
  read; chunks cover positions 0 … T−2):

  * *full prefill*: the model's own pass over all T tokens into a fresh `KVCache`; its last-position logits.
  * *naive reuse* (`naive_reuse`): every chunk prefilled alone from position 0, its keys rotated to where the chunk
    starts, the chunks' K/V written into a cache for positions 0 … T−2, then the model's pass over the last token
    alone attending to them.
  * *blend at r %* (`blend`, one pass of the model: `blend_pass`). Every position is computed up to the check
    layer (layer 1, as CacheBlend's implementation does; layer 0's K/V are the reused ones up to rounding, since a
    key there depends only on its token and, rotated, its position). There the ⌈r % · (T−1)⌉ positions whose K/V
    deviate most from the reused ones (squared L2 of K and V, summed over heads) are selected, plus the last token;
    the check layer and every later one keep their freshly computed K/V at the selected positions and take the reused
    (rotated) K/V everywhere else, and the layers after the check layer compute the selected rows only: their
    queries attend to every position's keys, their MLPs run on those rows alone. This is the work a CacheBlend
    engine does (`recompute_share` counts it), so the time measured is the blend's own. The selection is carried to
    every layer (the simpler rule; CacheBlend narrows it gradually from layer to layer). r = 100 selects everything:
    `blend` then runs the full prefill itself, bitwise. r = 0 (or any r whose selection is empty) *is* naive reuse:
    `blend` runs `naive_reuse`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch

from playground.models.kv_cache import KVCache
from playground.models.positional import apply_rope
from playground.models.rows import Rows, Segment

CHECK_LAYER = 1  # CacheBlend picks its tokens at the second layer (the first is recomputed whole)

KV = tuple[list[torch.Tensor], list[torch.Tensor]]  # per layer: keys, values (h_kv, T, d)


# --- can the model's cached keys move? ----------------------------------------------------------------


def parse_blend(text: str) -> tuple[str, int]:
    """A run's `cache_blend` setting, "<chunks>@<r>" (chunks "paragraphs" or "tokens:N", r a whole percent from 0 to
    100, e.g. "paragraphs@15"), as (chunks, r); ValueError for any other text."""
    mode, at, r = str(text).rpartition("@")
    size = mode.removeprefix("tokens:")
    ok = at and r.isdigit() and int(r) <= 100 and (mode == "paragraphs" or (
        mode.startswith("tokens:") and size.isdigit() and 1 <= int(size) <= 4096))
    if not ok:
        raise ValueError(f"cache_blend is {text!r}; use 'paragraphs@R' or 'tokens:N@R', R from 0 to 100 (e.g. "
                         "'paragraphs@15')")
    return mode, int(r)


def why_not_movable(lm: Any) -> str | None:
    """None when cached keys can be moved by rotation (a RoPE decoder whose every layer sees all its keys), else why
    not: "learned", "sinusoidal", "relative" (T5's bias), "none", "seq2seq" or "window"."""
    c = lm.config
    if lm.kind != "decoder":
        return "seq2seq"
    if c.positional != "rope":
        return c.positional
    if any(k.window is not None for k in c.layer_kinds()):
        return "window"
    return None


# --- the pieces ----------------------------------------------------------------------------------------


def new_cache(model: Any, tokens: int, cls: type[KVCache] = KVCache, **kw: Any) -> KVCache:
    c = model.config
    return cls(layers=c.n_layers, batch=1, kv_heads=c.n_kv_heads, head_dim=c.head_dim, max_tokens=tokens,
               query_heads=c.n_heads, dtype=model.dtype, device=model.device, **kw)


@torch.no_grad()
def prefill(model: Any, ids: Sequence[int], cache: KVCache | None = None) -> tuple[torch.Tensor, KVCache]:
    """The model's own pass over `ids` into `cache` (a fresh one by default): (last logits (V,), the cache)."""
    cache = cache if cache is not None else new_cache(model, len(ids) + 64)
    x = torch.tensor([list(ids)], device=model.device)
    logits = model(x, cache, last_only=True)
    return logits[0, -1], cache


def kv_of(model: Any, ids: Sequence[int]) -> KV:
    """Each layer's keys (rotated to positions 0 … len−1) and values of `ids` prefilled alone."""
    _, cache = prefill(model, ids)
    return cache.read_span(0, len(ids))


def rotate_keys(model: Any, keys: list[torch.Tensor], delta: int) -> list[torch.Tensor]:
    """Keys computed at positions m moved to m + delta: one more rotation by angle delta·θ_i per pair (R_δ R_m =
    R_{m+δ}), read from the model's own rotary table of each layer (a layer without RoPE keeps its keys)."""
    if delta == 0:
        return list(keys)
    out = []
    for block, k in zip(model.blocks, keys):
        rope = {"global": model.rope, "local": model.local_rope}.get(block.rope_table)
        if rope is None:
            out.append(k)
            continue
        cos, sin = rope(delta, 1, torch.float32)  # (1, r), scaled by the table's attention factor
        f = rope.attention_factor
        cos, sin = (cos / f, sin / f) if f != 1.0 else (cos, sin)
        out.append(apply_rope(k[None].float(), cos, sin)[0].to(k.dtype))
    return out


def chunk_starts(texts: Sequence[str], mode: str) -> list[int]:
    """Where the chunks of a prompt of len(texts) tokens begin (the last token is the question's end, never in a
    chunk). mode "paragraphs": a new chunk after each token holding a line break; "tokens:N": every N tokens."""
    n = max(1, len(texts) - 1)
    if mode.startswith("tokens:"):
        size = max(1, int(mode.split(":", 1)[1]))
        return list(range(0, n, size))
    if mode != "paragraphs":
        raise ValueError(f"chunks: {mode!r} is neither 'paragraphs' nor 'tokens:N'")
    starts = [0] + [i + 1 for i in range(n - 1) if "\n" in texts[i] and "\n" not in texts[i + 1]]
    return sorted(set(starts))


def chunked_kv(model: Any, ids: Sequence[int], starts: Sequence[int]) -> KV:
    """Positions 0 … T−2 as CacheBlend reuses them: each chunk prefilled alone from position 0, its keys rotated to
    where it starts, the chunks side by side."""
    bounds = [*starts, len(ids) - 1]
    keys: list[list[torch.Tensor]] = []
    values: list[list[torch.Tensor]] = []
    for a, b in zip(bounds, bounds[1:]):
        k, v = kv_of(model, ids[a:b])
        keys.append(rotate_keys(model, k, a))
        values.append(v)
    layers = len(keys[0])
    return ([torch.cat([c[i] for c in keys], dim=1) for i in range(layers)],
            [torch.cat([c[i] for c in values], dim=1) for i in range(layers)])



class BlendPassCache(KVCache):
    """The KV cache of a blend pass (`blend_pass`). Below the check layer a layer stores what it computed for every
    position. The check layer selects the positions to recompute (`selection` of its fresh K/V against the reused
    ones) and keeps its fresh K/V there, the reused ones elsewhere. A later layer computes the selected rows and the
    last token only (`fresh`): their K/V go to their positions among the reused ones, and each query sees the keys
    at or before its own position. Once the pass is over (`blending` False) it is a plain cache for decoding."""

    def __init__(self, *, reused: KV, r: float, check_layer: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.reused, self.r, self.check_layer = reused, r, check_layer
        self.picked = torch.empty(0, dtype=torch.long)  # the positions the check layer selected
        self.fresh = torch.empty(0, dtype=torch.long)  # those and the last token: the rows the later layers compute
        self.blending = True

    def write_masked(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor, *,
                     ordered: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if not self.blending or layer < self.check_layer:
            return super().write_masked(layer, start, k, v, ordered=ordered)
        rk, rv = self.reused[0][layer], self.reused[1][layer]  # (h_kv, n, d): positions 0 … T−2
        n = rk.shape[1]
        if layer == self.check_layer:  # every row is here: select, then keep the fresh K/V at the selected positions
            fresh_k, fresh_v = k[0, :, :n], v[0, :, :n]
            apart = ((fresh_k - rk) ** 2).sum((0, 2)) + ((fresh_v - rv) ** 2).sum((0, 2))
            self.picked = selection(apart, self.r).to(k.device)
            self.fresh = torch.cat([self.picked, torch.tensor([n], device=k.device)])
            keep = torch.zeros(n, dtype=torch.bool, device=k.device)
            keep[self.picked] = True
            k, v = k.clone(), v.clone()
            k[0, :, :n] = torch.where(keep[None, :, None], fresh_k, rk)
            v[0, :, :n] = torch.where(keep[None, :, None], fresh_v, rv)
            return super().write_masked(layer, start, k, v, ordered=ordered)
        keys, values = self.keys[layer], self.values[layer]  # a later layer: k, v are the `fresh` rows
        keys[0, :, :n], values[0, :, :n] = rk, rv
        keys[:, :, self.fresh], values[:, :, self.fresh] = k, v
        self._written[layer] = n + 1
        positions = torch.arange(n + 1, device=k.device)
        return keys[:, :, :n + 1], values[:, :, :n + 1], positions[None, :] <= self.fresh[:, None], positions


class BlendRows(Rows):
    """The rows of a blend pass: the prompt's every position, then (`narrow`) the recomputed ones only, each with
    its own position's rotary angles (and the edits of the model's scope, as its own passes take them)."""

    def __init__(self, ids: torch.Tensor, cache: BlendPassCache, edits: tuple = ()) -> None:
        super().__init__([Segment(ids, cache, None, 0, "last", edits=edits)])
        self.tokens = ids.shape[1]
        self.positions: torch.Tensor | None = None  # None: every position, in order

    def narrow(self, positions: torch.Tensor) -> None:
        segment = self.segments[0]
        self.segments[0] = dataclasses.replace(segment, ids=segment.ids[:, positions])
        self.positions = positions

    def rotary(self, rope: torch.nn.Module, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = rope(0, self.tokens, dtype, None)  # (T, r): the full prefill's own table
        return (cos, sin) if self.positions is None else (cos[self.positions], sin[self.positions])


@torch.no_grad()
def blend_pass(model: Any, ids: Sequence[int], reused: KV, r: float, room: int = 64,
               check_layer: int = CHECK_LAYER) -> tuple[torch.Tensor, BlendPassCache, torch.Tensor]:
    """The blend's pass at r % (the module's definition), whatever r: (last logits, the blended cache, the
    recomputed positions). The model's own blocks, over every row up to the check layer and the selected rows
    after it."""
    check = min(check_layer, len(model.blocks) - 1)
    cache = new_cache(model, len(ids) + room, BlendPassCache, reused=reused, r=r, check_layer=check)
    batch = BlendRows(torch.tensor([list(ids)], device=model.device), cache, model.scoped_edits)
    x = model.embed_rows(batch)
    ropes = model.rotary_tables(batch, x.dtype)
    for block in model.blocks:
        if block.layer == check + 1:  # from here on, the selected rows and the last token only
            x = x[:, cache.fresh]
            batch.narrow(cache.fresh)
            ropes = model.rotary_tables(batch, x.dtype)
        x = block(x, ropes[block.rope_table], batch)
    cache.blending = False
    return model.unembed(x[:, -1:])[0, -1], cache, cache.picked


@torch.no_grad()
def naive_reuse(model: Any, ids: Sequence[int], reused: KV, room: int = 64) -> tuple[torch.Tensor, KVCache]:
    """The reused K/V at positions 0 … T−2, then the model's pass over the last token: (its logits, the cache)."""
    cache = new_cache(model, len(ids) + room)
    cache.write_span(0, len(ids) - 1, *reused)
    return prefill(model, ids[-1:], cache)


def selected(n: int, r: float) -> int:
    """How many of `n` reused positions r % recomputes: ⌈r % · n⌉."""
    return min(n, math.ceil(n * r / 100 - 1e-9)) if r > 0 else 0


def selection(dev_at_check: torch.Tensor, r: float) -> torch.Tensor:
    """The ⌈r % · n⌉ positions of the largest deviation (n = the reused positions), in position order."""
    count = selected(dev_at_check.shape[0], r)
    picked = torch.topk(dev_at_check, count).indices if count else torch.empty(0, dtype=torch.long)
    return picked.sort().values


def blend(model: Any, ids: Sequence[int], reused: KV, r: float, room: int = 64,
          check_layer: int = CHECK_LAYER) -> tuple[torch.Tensor, KVCache, torch.Tensor]:
    """CacheBlend at r % (the module's definition): (last logits, the blended cache, the recomputed positions).
    Nothing selected is naive reuse; everything selected is the full prefill itself."""
    n = len(ids) - 1
    count = selected(n, r)
    if count == 0:
        logits, cache = naive_reuse(model, ids, reused, room)
        return logits, cache, torch.empty(0, dtype=torch.long)
    if count == n:
        logits, cache = prefill(model, ids, new_cache(model, len(ids) + room))
        return logits, cache, torch.arange(n)
    return blend_pass(model, ids, reused, r, room, check_layer)



def blended_prompt(model: Any, ids: Sequence[int], starts: Sequence[int], r: float) -> KV:
    """The keys and values a CacheBlend engine would leave at positions 0 … T−2 of `ids` (chunks beginning at
    `starts`, r % recomputed): what a run whose prompt cache is blended decodes from (its last prompt token is then
    the model's own pass over them). r = 100 is the full prefill's; r = 0 naive reuse's."""
    _, cache, _ = blend(model, ids, chunked_kv(model, ids, starts), r, room=1)
    keys, values = cache.read_span(0, len(ids))
    n = len(ids) - 1
    return [k[:, :n] for k in keys], [v[:, :n] for v in values]
