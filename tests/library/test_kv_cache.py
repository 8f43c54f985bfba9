"""The static KV cache: writes at explicit positions, a length no caller has to move, exact statistics."""

from __future__ import annotations

import json

import pytest
import torch

from playground.models.kv_cache import CacheStats, CrossCacheStats, KVCache, Seq2SeqCache


def cache(batch: int = 2, layers: int = 3, kv_heads: int = 2, head_dim: int = 4, max_tokens: int = 10,
          query_heads: int = 6, dtype: torch.dtype = torch.float32) -> KVCache:
    return KVCache(layers=layers, batch=batch, kv_heads=kv_heads, head_dim=head_dim, max_tokens=max_tokens,
                   query_heads=query_heads, dtype=dtype, device="cpu")


def kv(batch: int, tokens: int, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((batch, 2, tokens, 4), fill), torch.full((batch, 2, tokens, 4), -fill)


def test_length_counts_positions_every_layer_holds():
    c = cache()
    assert c.length == 0
    for layer in range(3):
        keys, values = c.write(layer, 0, *kv(2, 5, 1.0))
        assert keys.shape == (2, 2, 5, 4) and values.shape == (2, 2, 5, 4)
        assert c.length == (5 if layer == 2 else 0)  # a pass in progress has not added its tokens yet
    for layer in range(3):
        keys, _ = c.write(layer, 5, *kv(2, 1, 2.0))
        assert keys.shape[2] == 6 and float(keys[0, 0, 5, 0]) == 2.0 and float(keys[0, 0, 4, 0]) == 1.0
    assert c.length == 6


def test_writing_before_the_end_rewinds_and_overflow_is_refused():
    c = cache(max_tokens=6)
    for layer in range(3):
        c.write(layer, 0, *kv(2, 6, 1.0))
    for layer in range(3):
        c.write(layer, 2, *kv(2, 1, 3.0))
    assert c.length == 3 and float(c.keys[0][0, 0, 2, 0]) == 3.0
    with pytest.raises(ValueError, match="holds 6 tokens"):
        c.write(0, 5, *kv(2, 2, 1.0))


def test_beam_search_fills_every_row_from_one_prefill_and_reorders_rows():
    one = cache(batch=1)
    for layer in range(3):
        one.write(layer, 0, torch.arange(24.0).view(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    beams = cache(batch=3)
    beams.fill_from(one)
    assert beams.length == 3 and torch.equal(beams.keys[1][2, :, :3], one.keys[1][0, :, :3])
    for layer in range(3):
        beams.keys[layer][:, :, :3] = torch.arange(3.0).view(3, 1, 1, 1)
    beams.reorder(torch.tensor([2, 2, 0]))
    assert [float(beams.keys[0][b, 0, 0, 0]) for b in range(3)] == [2.0, 2.0, 0.0]


@pytest.mark.parametrize("dtype, size", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_stats_are_the_formula_exactly(dtype, size):
    c = cache(batch=2, dtype=dtype)
    for layer in range(3):
        c.write(layer, 0, *(t.to(dtype) for t in kv(2, 7, 1.0)))
    s = c.stats()
    assert s.bytes == 2 * 3 * 2 * 2 * 7 * 4 * size
    assert s.allocated_bytes == 2 * 3 * 2 * 2 * 10 * 4 * size
    assert s.mha_equivalent_bytes == s.bytes * 6 // 2  # 6 query heads share 2 KV heads
    d = s.to_dict()
    for key in ("layers", "batch", "kv_heads", "head_dim", "tokens", "bytes", "allocated_bytes", "mha_equivalent_bytes",
                "per_layer", "enabled", "element_size", "dtype"):
        assert key in d
    assert d["per_layer"][0]["k_shape"] == [2, 2, 7, 4] and len(d["per_layer"]) == 3
    json.dumps(d)


def test_seq2seq_cache_reports_the_cross_attention_it_holds():
    c = Seq2SeqCache(cache(batch=2))
    assert c.stats().cross_attention.bytes == 0 and not c.cross_ready
    keys = [torch.zeros(2, 2, 9, 4) for _ in range(3)]
    c.set_cross(keys, [k.clone() for k in keys])
    cross = c.stats().cross_attention
    assert cross.tokens == 9 and cross.bytes == 2 * 3 * 2 * 2 * 9 * 4 * 4
    c.reorder(torch.tensor([1, 0]))
    assert c.cross_keys[0].shape == (2, 2, 9, 4)
    dropped = CrossCacheStats(layers=3, batch=2, kv_heads=2, head_dim=4, tokens=9, element_size=4, held=False)
    assert dropped.bytes == 0 and dropped.to_dict()["tokens"] == 9


def test_stats_without_a_cache_keep_every_key():
    off = CacheStats(enabled=False, layers=3, batch=1, kv_heads=2, query_heads=6, head_dim=4, tokens=0, max_tokens=0,
                     dtype="float32", element_size=4, recomputed_tokens=11)
    on = cache().stats()
    assert set(off.to_dict()) == set(on.to_dict()) and off.to_dict()["bytes"] == 0
