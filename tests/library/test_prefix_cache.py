"""Prefix caching in the shared batch (`generation.prefix_cache`): a prompt's full blocks are computed once and
restored for the next run that starts with them, bitwise what a fresh run computes.

On every decoder family (tiny random checkpoints saved by transformers; windows shorter than a block included),
through both kernel paths the server uses (the model's own pass alone, the batch-invariant pass beside others):
a run whose prompt's blocks are restored gives the same tokens, probabilities and candidates, bitwise, as the
same run with an empty store, and says how many prompt tokens it reused. Then: six visitors sending one prompt
at once compute its blocks once; eviction is least recently used within the byte budget, counted exactly; runs
with edits, a KV policy, another dtype, a precision copy or another model object never share a block.
"""

from __future__ import annotations

import dataclasses

import pytest

import playground
from playground.generation import GenerationConfig
from playground.generation.batch import CHUNK, Scheduler, run_alone
from playground.generation.plan import plan
from playground.generation.prefix_cache import BLOCK, PrefixStore
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


@pytest.mark.parametrize("invariant", [False, True], ids=["own-pass", "batch-pass"])
@pytest.mark.parametrize("name", sorted(DECODERS))
def test_every_decoder_family_restores_a_prefix_bitwise(tmp_path_factory, one_thread, name, invariant):
    lm = _load(tmp_path_factory, name, DECODERS, save_decoder)
    n = _length(lm)
    full = (n - 1) // CHUNK * CHUNK  # every block before the last chunk (that one's pass gives the logits)
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
        assert _reused(fresh) == 0 and _reused(first) == (full if cfg is beams else 0) and _reused(again) == full
        assert {k: v for k, v in again[-1].cache.items() if k != "reused_tokens"} == \
            {k: v for k, v in fresh[-1].cache.items() if k != "reused_tokens"}
    assert store.held()[0] == full // BLOCK
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


def test_six_visitors_with_one_prompt_compute_it_once(llama, one_thread):
    lm = playground.load_model(llama)
    prompt = _prompt(lm, 3 * BLOCK + 7)
    cfg = GenerationConfig(max_new_tokens=5)
    fresh = run_alone(plan(lm, prompt, cfg), invariant=True)
    store = PrefixStore(BIG)
    scheduler = Scheduler(lm, max_rows=8, max_prefills=4, invariant_alone=True, prefix=store)
    tickets = [scheduler.submit(plan(lm, prompt, cfg), owner=f"visitor {i}") for i in range(6)]
    while scheduler.busy():
        scheduler.step()
    for ticket in tickets:
        _bitwise(ticket.drain(), fresh)
    assert store.misses == 3 and store.hits == 5 * 3  # each block computed once, restored five times
    assert sorted(t.cached_tokens for t in tickets) == [0] + [3 * BLOCK] * 5
    assert store.held() == (3, 3 * _block_bytes(lm))


def test_least_recently_used_blocks_go_first_within_the_budget(llama, one_thread):
    lm = playground.load_model(llama)
    size = _block_bytes(lm)
    cfg = GenerationConfig(max_new_tokens=2)
    a, b, c = (_prompt(lm, 2 * BLOCK + 3, salt=s) for s in (0, 1, 2))
    store = PrefixStore(4 * size)

    def reused(prompt) -> int:
        return _reused(run_alone(plan(lm, prompt, cfg), prefix=store))

    assert (reused(a), reused(b)) == (0, 0) and store.held() == (4, 4 * size)
    assert reused(a) == 2 * BLOCK  # a is now the most recently used
    assert reused(c) == 0 and store.held() == (4, 4 * size) and store.evicted == 2  # b's two blocks went
    assert reused(a) == 2 * BLOCK and reused(b) == 0  # b again: c (least recent) goes for it
    assert reused(c) == 0
    # A prompt longer than the budget keeps its first blocks, never evicting its own beginning.
    small = PrefixStore(2 * size)
    run_alone(plan(lm, _prompt(lm, 4 * BLOCK + 1, salt=3), cfg), prefix=small)
    assert small.held() == (2, 2 * size)


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
    assert _reused(run_alone(plan(lm, prompt, cfg), prefix=store)) == 2 * BLOCK  # the plain run still reuses
    # Another model object (another visitor's upload of the same files, another dtype) is not lm's: its runs
    # never read lm's store (the server gives each model object a store of its own: tests/app/test_prefix_usage.py)
    twin = playground.load_model(llama, dtype="bfloat16")
    assert _reused(_through(lm, plan(twin, prompt, cfg), store)) == 0 and store.hits == 2


def _through(lm, p, store):
    scheduler = Scheduler(lm, prefix=store)
    ticket = scheduler.submit(p)
    while scheduler.busy():
        scheduler.step()
    return ticket.drain()


def test_the_captured_step_reads_and_fills_the_store(llama, one_thread):
    """A model with a captured decode step (uncompiled here: the module torch.compile traces) feeds its prompt
    in the batch's blocks through the store: its second run restores them, bitwise its first, and its blocks
    serve the eager batch's runs too (the same chunk passes through the model's own forward)."""
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
    assert (none, reused) == (0, 2 * BLOCK) and _reused(second) == 2 * BLOCK and store.held()[0] == 2
    _bitwise(second, first)
    eager = run_alone(plan(lm, prompt, cfg), prefix=store)  # the eager batch restores the captured run's blocks
    assert _reused(eager) == 2 * BLOCK
    _bitwise(eager, run_alone(plan(lm, prompt, cfg)))
    assert eager[-1].token_ids == first[-1].token_ids
