"""The shared KV buffers of the batch (`models/kv_pool.py`) and the one attention call per layer.

Requests' caches are rows of one buffer per layer; a pool grows by copying into bigger buffers and
pointing every live cache at its new rows; the one-token rows of a pool attend in one masked SDPA call
per layer, each row padded to a width of its own length.
"""

from __future__ import annotations

import torch

import playground
from playground.generation import GenerationConfig
from playground.generation.batch import Scheduler, run_alone
from playground.generation.plan import plan
from playground.models.attention import attend, attend_padded
from playground.models.kv_cache import KVCache
from playground.models.kv_pool import KEY_BLOCK, KVPool, bucket, key_width
from tests.hf_tiny import llama_like, save_decoder, save_seq2seq, t5_like
from tests.library.test_batch import _assert_equal_runs


def _cache(pool: KVPool | None, batch: int, max_tokens: int, windows=(None, 3)) -> KVCache:
    return KVCache(layers=2, batch=batch, kv_heads=2, head_dim=4, max_tokens=max_tokens, query_heads=4,
                   dtype=torch.float32, device="cpu", windows=list(windows), pool=pool)


def test_widths_depend_on_the_row_alone():
    assert [bucket(n) for n in (1, 64, 65, 200, 257)] == [64, 64, 128, 256, 512]
    assert [key_width(n, 256) for n in (1, KEY_BLOCK, KEY_BLOCK + 1, 250)] == [KEY_BLOCK, KEY_BLOCK, 2 * KEY_BLOCK, 256]
    assert key_width(40, 32) == 32  # never past the pool's own width (a sliding layer's window)


def test_caches_are_rows_of_the_pool_and_keep_their_keys_when_it_grows():
    pool = KVPool(bucket(10))
    first = _cache(pool, 2, 10)
    k = torch.randn(2, 2, 5, 4)
    first.write(0, 0, k, -k)
    first.write(1, 0, k, -k)  # the sliding layer keeps its last 3 positions in a ring
    assert first.keys[0].data_ptr() == pool.keys[0].data_ptr()
    assert pool.keys[1].shape[2] == 3 and torch.equal(pool.keys[0][:2, :, :5], k)
    rows_before = len(pool.owners)
    second = _cache(pool, 3, 8)  # no room: the buffers are copied into bigger ones
    assert len(pool.owners) > rows_before and pool.row_of(second) == 2
    assert torch.equal(first.keys[0][:, :, :5], k) and torch.equal(first.values[0][:, :, :5], -k)
    assert first.keys[0].data_ptr() == pool.keys[0].data_ptr()  # pointed at the new buffers
    ring_k, _ = first.write(1, 5, k[:, :, :1], k[:, :, :1], ordered=True)
    assert torch.equal(ring_k[:, :, :2], k[:, :, 3:5])  # the ring moved along with the rows
    pool.release(first)
    third = _cache(pool, 1, 4)
    assert pool.row_of(third) == 0 and pool.live == 4  # the freed rows are taken again


def test_one_padded_call_equals_each_row_alone():
    torch.manual_seed(0)
    lengths = [3, 17, 64, 9]
    q = torch.randn(4, 6, 1, 16)
    keys, values = torch.randn(4, 2, 64, 16), torch.randn(4, 2, 64, 16)
    visible = (torch.arange(64)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]
    out = attend_padded(q, keys, values, visible, scale=0.25)
    for r, n in enumerate(lengths):
        alone, _ = attend(q[r : r + 1], keys[r : r + 1, :, :n], values[r : r + 1, :, :n], scale=0.25)
        torch.testing.assert_close(out[r : r + 1], alone, atol=1e-6, rtol=0)
    bias = torch.randn(4, 2, 1, 64).masked_fill(~visible, torch.finfo(torch.float32).min)  # T5: additive, MHA
    out = attend_padded(q[:, :2], keys, values, bias, scale=1.0)
    for r, n in enumerate(lengths):
        alone, _ = attend(q[r : r + 1, :2], keys[r : r + 1, :, :n], values[r : r + 1, :, :n], scale=1.0,
                          mask=bias[r : r + 1, :, :, :n])
        torch.testing.assert_close(out[r : r + 1], alone, atol=1e-6, rtol=0)


def _sdpa_calls_in_a_step(scheduler: Scheduler) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        scheduler.step()
    return sum(e.count for e in prof.key_averages() if e.key == "aten::scaled_dot_product_attention")


def test_decoding_rows_of_a_pool_attend_in_one_call_per_layer(tmp_path, one_thread):
    """Three requests decoding side by side (one a beam search) take one SDPA call per layer, and each
    equals its run alone bitwise; their rows go back to the pool when they end."""
    save_decoder(tmp_path, "llama", llama_like(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                               num_key_value_heads=2), init_std=0.1)
    lm = playground.load_model(tmp_path)
    plans = [plan(lm, [5, 9, 23, 40], GenerationConfig(max_new_tokens=8)),
             plan(lm, [7, 3], GenerationConfig(max_new_tokens=8, num_beams=2)),
             plan(lm, [11, 12, 13, 14, 15, 16], GenerationConfig(max_new_tokens=8, temperature=0.7, seed=2))]
    alone = [run_alone(p, invariant=True) for p in plans]
    scheduler = Scheduler(lm, max_prefills=3, invariant_alone=True)
    tickets = [scheduler.submit(p) for p in plans]
    for _ in range(3):
        scheduler.step()
    assert len(scheduler.pools) == 1
    assert _sdpa_calls_in_a_step(scheduler) == lm.config.n_layers
    while scheduler.busy():
        scheduler.step()
    for ticket, solo in zip(tickets, alone):
        _assert_equal_runs(ticket.drain(), solo)
    assert scheduler.pools == {}


def test_rows_of_one_pool_with_different_key_widths_take_one_call_each(tmp_path, one_thread):
    """A long prompt (keys padded to 128) and a short one (padded to 64) in one pool: two calls per layer,
    each request bitwise its run alone, as when a row's width would not depend on its neighbour."""
    save_decoder(tmp_path, "mistral", llama_like(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                                 num_key_value_heads=2, sliding_window=80), init_std=0.1)
    lm = playground.load_model(tmp_path)
    long_prompt = [(5 * i) % 90 + 3 for i in range(70)]
    plans = [plan(lm, long_prompt, GenerationConfig(max_new_tokens=8)),
             plan(lm, [4, 8, 15, 16, 23], GenerationConfig(max_new_tokens=60))]
    assert bucket(70 + 8) == bucket(5 + 60) == 128
    alone = [run_alone(p, invariant=True) for p in plans]
    scheduler = Scheduler(lm, max_prefills=2, invariant_alone=True)
    tickets = [scheduler.submit(p) for p in plans]
    while not all(t.first_event for t in tickets):
        scheduler.step()
    assert list(scheduler.pools) == [("self", 128, id(lm.model))]  # kind, width, the model whose rows they are
    assert _sdpa_calls_in_a_step(scheduler) == 2 * lm.config.n_layers
    while scheduler.busy():
        scheduler.step()
    for ticket, solo in zip(tickets, alone):
        _assert_equal_runs(ticket.drain(), solo)


def test_seq2seq_rows_attend_to_their_targets_and_sources_in_one_call_each(tmp_path, one_thread):
    """T5 (position bias in the self-attention mask): three requests with sources of different lengths
    take one self-attention and one cross-attention call per decoder layer, each equal to its run alone."""
    save_seq2seq(tmp_path, "t5", t5_like(d_model=64, d_kv=16, d_ff=96), init_std=0.1)
    lm = playground.load_model(tmp_path)
    plans = [plan(lm, [5, 9, 23, 1], GenerationConfig(max_new_tokens=6)),
             plan(lm, [7, 7, 12, 30, 44, 1], GenerationConfig(max_new_tokens=6, num_beams=2)),
             plan(lm, [8, 3, 1], GenerationConfig(max_new_tokens=6, temperature=0.8, seed=3))]
    alone = [run_alone(p, invariant=True) for p in plans]
    scheduler = Scheduler(lm, max_prefills=3, invariant_alone=True)
    tickets = [scheduler.submit(p) for p in plans]
    for _ in range(3):  # start, encode each source in its turn and decode the first token, then decode
        scheduler.step()
    assert sorted(kind for kind, _, _ in scheduler.pools) == ["cross", "self"]
    assert _sdpa_calls_in_a_step(scheduler) == 2 * lm.config.n_layers
    while scheduler.busy():
        scheduler.step()
    for ticket, solo in zip(tickets, alone):
        _assert_equal_runs(ticket.drain(), solo)
    assert scheduler.pools == {}
