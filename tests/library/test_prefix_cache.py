"""Prefix caching in the shared batch (`generation.prefix_cache`): a prompt's full blocks and its tail (the last
chunk, with the logits its pass returned) are computed once and restored for the next run that starts with them
(the tail: that sends the whole prompt again), bitwise what a fresh run computes.

On every decoder family (tiny random checkpoints saved by transformers; windows shorter than a block included),
through both kernel paths the server uses (the model's own pass alone, the batch-invariant pass beside others):
a run whose whole prompt is restored gives the same first logits (torch.equal), tokens, probabilities and
candidates, bitwise, as the same run with an empty store, and says how many prompt tokens it reused; a longer
prompt restores the full blocks it shares. Then: six visitors sending one prompt at once compute it once;
eviction is least recently used within the byte budget (tails counted), exactly; runs with edits, a KV policy,
another dtype, a precision copy or another model object never share a block; a run that records its last
prompt position restores full blocks only.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import playground
from playground.generation import GenerationConfig
from playground.generation.batch import CHUNK, Scheduler, run_alone
from playground.generation.plan import plan
from playground.generation.prefix_cache import BLOCK, Alone, Block, Feed, PrefixStore, prefill
from playground.interventions import Ablate
from tests.hf_tiny import llama_like, save_decoder
from tests.library.test_batch_families import DECODERS, _load

BIG = 2**30  # a store budget nothing here reaches


def _prompt(lm, length: int, salt: int = 0) -> list[int]:
    top = lm.config.vocab_size - 4
    return [(7 * i + salt) % top + 3 for i in range(length)]


def _length(lm) -> int:
    """A prompt of two full blocks and a part (one block and a part where the model holds 64 positions)."""
    return min(2 * BLOCK + 11, lm.config.max_positions - 12)


def _bitwise(got, fresh) -> None:
    assert [e.token_ids for e in got] == [e.token_ids for e in fresh]
    assert [e.prob for e in got] == [e.prob for e in fresh]
    assert [e.candidates for e in got] == [e.candidates for e in fresh]
    assert [e.beams and [(h.token_ids, h.score) for h in e.beams] for e in got] == \
        [e.beams and [(h.token_ids, h.score) for h in e.beams] for e in fresh]


def _reused(events) -> int:
    return events[-1].cache["reused_tokens"]


def _tails(store: PrefixStore) -> list[Block]:
    return [entry for entry in store._blocks.values() if entry.logits is not None]


@pytest.mark.parametrize("invariant", [False, True], ids=["own-pass", "batch-pass"])
@pytest.mark.parametrize("name", sorted(DECODERS))
def test_every_decoder_family_restores_a_prefix_bitwise(tmp_path_factory, one_thread, name, invariant):
    lm = _load(tmp_path_factory, name, DECODERS, save_decoder)
    n = _length(lm)
    full = (n - 1) // CHUNK * CHUNK  # every block before the last chunk
    prompt = _prompt(lm, n)
    greedy = GenerationConfig(max_new_tokens=6, top_candidates=3)
    beams = GenerationConfig(max_new_tokens=4, num_beams=2)
    store = PrefixStore(BIG)
    for cfg in (greedy, beams):
        p = plan(lm, prompt, cfg)
        fresh = run_alone(p, invariant=invariant)
        first = run_alone(plan(lm, prompt, cfg), invariant=invariant, prefix=store)
        again = run_alone(plan(lm, prompt, cfg), invariant=invariant, prefix=store)
        _bitwise(first, fresh)
        _bitwise(again, fresh)
        # the beam search's first run restores the greedy run's whole prompt (its prefill is one row's too)
        assert _reused(fresh) == 0 and _reused(first) == (n if cfg is beams else 0) and _reused(again) == n
        assert {k: v for k, v in again[-1].cache.items() if k != "reused_tokens"} == \
            {k: v for k, v in fresh[-1].cache.items() if k != "reused_tokens"}
    assert store.held()[0] == full // BLOCK + 1 and len(_tails(store)) == 1
    # The stored first logits are a fresh run's, bitwise (a store of its own, filled by one run).
    alone = PrefixStore(BIG)
    run_alone(plan(lm, prompt, greedy), invariant=invariant, prefix=alone)
    assert torch.equal(_tails(store)[0].logits, _tails(alone)[0].logits)
    # The captured step's prefill (`prefix_cache.prefill`) restores it too, with those logits and no pass.
    restored = Feed(store, Alone())
    with torch.inference_mode():
        logits = prefill(lm.model, torch.tensor([prompt]), lm.model.new_cache(1, n + 6), None, restored)
    assert torch.equal(logits, _tails(alone)[0].logits) and restored.reused == n
    # A longer prompt that starts with the stored one restores its full blocks only (the stored tail is no block
    # of it: its fresh run feeds those positions in a full chunk, another pass shape), still bitwise.
    longer = prompt + _prompt(lm, 5, salt=3)
    fresh = run_alone(plan(lm, longer, greedy), invariant=invariant)
    extended = run_alone(plan(lm, longer, greedy), invariant=invariant, prefix=store)
    _bitwise(extended, fresh)
    assert _reused(extended) == full == (len(longer) - 1) // CHUNK * CHUNK
    # A prompt that shares only the first block: that one is restored, the rest computed, still bitwise.
    other = prompt[:BLOCK] + _prompt(lm, n - BLOCK, salt=5)
    fresh = run_alone(plan(lm, other, greedy), invariant=invariant)
    shared = run_alone(plan(lm, other, greedy), invariant=invariant, prefix=store)
    _bitwise(shared, fresh)
    assert _reused(shared) == BLOCK
    assert fresh[-1].token_ids != run_alone(plan(lm, prompt, greedy), invariant=invariant)[-1].token_ids or \
        [e.prob for e in fresh] != [e.prob for e in run_alone(plan(lm, prompt, greedy), invariant=invariant)]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_decoder(directory, "llama", llama_like(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                                num_key_value_heads=2, vocab_size=97, max_position_embeddings=256),
                 init_std=0.1)
    return directory


def _block_bytes(lm) -> int:
    c = lm.config
    return 2 * c.n_layers * c.n_kv_heads * BLOCK * c.head_dim * 4  # float32


def _tail_bytes(lm, tokens: int) -> int:
    """A tail of `tokens` tokens: their K/V and the first token's logits (float32)."""
    return _block_bytes(lm) * tokens // BLOCK + lm.config.vocab_size * 4


@pytest.mark.parametrize("blocks", [3, 0], ids=["3-blocks-and-a-tail", "a-tail-only"])
def test_six_visitors_with_one_prompt_compute_it_once(llama, one_thread, blocks):
    lm = playground.load_model(llama)
    prompt = _prompt(lm, blocks * BLOCK + 7)
    cfg = GenerationConfig(max_new_tokens=5)
    fresh = run_alone(plan(lm, prompt, cfg), invariant=True)
    store = PrefixStore(BIG)
    scheduler = Scheduler(lm, max_rows=8, max_prefills=4, invariant_alone=True, prefix=store)
    tickets = [scheduler.submit(plan(lm, prompt, cfg), owner=f"visitor {i}") for i in range(6)]
    while scheduler.busy():
        scheduler.step()
    for ticket in tickets:
        _bitwise(ticket.drain(), fresh)
    # each block and the tail computed once, restored five times (the five skip the prompt's pass altogether)
    assert store.misses == blocks + 1 and store.hits == 5 * (blocks + 1)
    assert sorted(t.cached_tokens for t in tickets) == [0] + [blocks * BLOCK + 7] * 5
    assert store.held() == (blocks + 1, blocks * _block_bytes(lm) + _tail_bytes(lm, 7))


def test_a_run_restored_whole_that_ends_at_its_first_token_is_in_the_history(llama, one_thread):
    """Restored whole, a one-token run takes no pass at all: its prompt is still counted in the batch's hits."""
    lm = playground.load_model(llama)
    prompt = _prompt(lm, 9)
    cfg = GenerationConfig(max_new_tokens=1)
    store = PrefixStore(BIG)
    scheduler = Scheduler(lm, prefix=store)
    tickets = []
    for _ in range(2):
        tickets.append(scheduler.submit(plan(lm, prompt, cfg)))
        while scheduler.busy():
            scheduler.step()
    first, again = (t.drain() for t in tickets)
    _bitwise(again, first)
    assert _reused(again) == 9 and scheduler.history.prefix_hits() == (18, 9, 2)


def test_least_recently_used_blocks_go_first_within_the_budget(llama, one_thread):
    lm = playground.load_model(llama)
    size = _block_bytes(lm)
    whole = 2 * size + _tail_bytes(lm, 3)  # a prompt of two blocks and a tail of 3 tokens
    cfg = GenerationConfig(max_new_tokens=2)
    n = 2 * BLOCK + 3
    a, b, c = (_prompt(lm, n, salt=s) for s in (0, 1, 2))
    store = PrefixStore(2 * whole)

    def reused(prompt) -> int:
        return _reused(run_alone(plan(lm, prompt, cfg), prefix=store))

    assert (reused(a), reused(b)) == (0, 0) and store.held() == (6, 2 * whole)
    assert reused(a) == n  # a is now the most recently used
    assert reused(c) == 0 and store.held() == (6, 2 * whole) and store.evicted == 3  # b's blocks and tail went
    assert reused(a) == n and reused(b) == 0  # b again: c (least recent) goes for it
    assert reused(c) == 0
    # A prompt longer than the budget keeps its first blocks, never evicting its own beginning.
    small = PrefixStore(2 * size)
    run_alone(plan(lm, _prompt(lm, 4 * BLOCK + 1, salt=3), cfg), prefix=small)
    assert small.held() == (2, 2 * size)
    # A tail counts in the budget: one byte short of a whole prompt keeps its blocks, and the run after it
    # restores those and computes the last chunk.
    tight = PrefixStore(whole - 1)
    run_alone(plan(lm, a, cfg), prefix=tight)
    assert tight.held() == (2, 2 * size)
    assert _reused(run_alone(plan(lm, a, cfg), prefix=tight)) == 2 * BLOCK


def test_no_block_is_shared_across_models_dtypes_edits_policies_or_precisions(llama, one_thread):
    lm = playground.load_model(llama)
    prompt = _prompt(lm, 2 * BLOCK + 5)
    cfg = GenerationConfig(max_new_tokens=3)
    store = PrefixStore(BIG)
    assert _reused(run_alone(plan(lm, prompt, cfg), prefix=store)) == 0
    held = store.held()
    others = {
        "edits": dataclasses.replace(cfg, interventions=(Ablate(0, head=1),)),
        "kv policy": dataclasses.replace(cfg, kv_window=40),
        "rope table": dataclasses.replace(cfg, rope_scaling={"type": "linear", "factor": 2.0}),
        "precision copy": dataclasses.replace(cfg, weight_precision="bfloat16"),
    }
    for why, other in others.items():
        events = _through(lm, plan(lm, prompt, other), store)  # the model's scheduler, as the server sends them
        assert _reused(events) == 0, why
        assert store.held() == held and store.hits == 0, why  # neither read nor written
    assert _reused(run_alone(plan(lm, prompt, cfg), prefix=store)) == 2 * BLOCK + 5  # the plain run still reuses
    # Another model object (another visitor's upload of the same files, another dtype) is not lm's: its runs
    # never read lm's store (the server gives each model object a store of its own: tests/app/test_prefix_usage.py)
    twin = playground.load_model(llama, dtype="bfloat16")
    assert _reused(_through(lm, plan(twin, prompt, cfg), store)) == 0 and store.hits == 3  # 2 blocks and the tail
    # A run that records its last prompt position (the page's live attention row, residual stream) needs that
    # pass's captures, which a tail does not hold: it restores the full blocks, runs the last chunk, keeps no tail.
    recorded = dataclasses.replace(cfg, capture_residual=True, capture_attention=True, attention_layers=(0,))
    fresh = run_alone(plan(lm, prompt, recorded))
    got = run_alone(plan(lm, prompt, recorded), prefix=store)
    _bitwise(got, fresh)
    assert [e.residual.tolist() for e in got] == [e.residual.tolist() for e in fresh]
    assert _reused(got) == 2 * BLOCK and store.held() == held
    own = PrefixStore(BIG)
    assert [_reused(run_alone(plan(lm, prompt, recorded), prefix=own)) for _ in range(2)] == [0, 2 * BLOCK]
    assert own.held() == (2, 2 * _block_bytes(lm)) and not _tails(own)


def _through(lm, p, store):
    scheduler = Scheduler(lm, prefix=store)
    ticket = scheduler.submit(p)
    while scheduler.busy():
        scheduler.step()
    return ticket.drain()


def test_the_captured_step_reads_and_fills_the_store(llama, one_thread):
    """A model with a captured decode step (uncompiled here: the module torch.compile traces) feeds its prompt
    in the batch's blocks through the store: its second run restores the whole prompt, bitwise its first, and its
    blocks and tail serve the eager batch's runs too (the same chunk passes through the model's own forward)."""
    from playground.generation import generate_all
    from playground.generation.captured import CapturedDecoder

    lm = playground.load_model(llama)
    stepped = dataclasses.replace(lm, captured=CapturedDecoder(lm.model, compile=False))
    prompt = _prompt(lm, 2 * BLOCK + 9)
    cfg = GenerationConfig(max_new_tokens=5, top_candidates=3)
    assert generate_all(stepped, prompt, cfg).decoding["captured"]  # the shape made ready before the server
    store = PrefixStore(BIG)
    scheduler = Scheduler(stepped, prefix=store)
    got = []
    for _ in range(2):
        ticket = scheduler.submit(plan(stepped, prompt, cfg))
        while scheduler.busy():
            scheduler.step()
        assert ticket.plan.decoding["captured"]
        got.append((ticket.drain(), ticket.cached_tokens))
    (first, none), (second, reused) = got
    n = 2 * BLOCK + 9  # the whole prompt: its blocks and its tail, the first logits too
    assert (none, reused) == (0, n) and _reused(second) == n and store.held()[0] == 2 + 1
    _bitwise(second, first)
    eager = run_alone(plan(lm, prompt, cfg), prefix=store)  # the eager batch restores the captured run's prompt
    assert _reused(eager) == n
    _bitwise(eager, run_alone(plan(lm, prompt, cfg)))
    assert eager[-1].token_ids == first[-1].token_ids
