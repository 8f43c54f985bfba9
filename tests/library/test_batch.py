"""Batched decoding: every request in a mixed batch gets what it gets alone.

Through the batch-invariant kernels (`Scheduler(invariant_alone=True)`, `run_alone(invariant=True)`)
a request's token ids, probabilities, captures and cache statistics are bitwise the same beside any
others as alone. As the server runs it, a request alone takes the model's own forward pass (the
single-request kernels): bitwise `generate_all` for a prompt of one chunk; beside others, the token
ids are equal and the probabilities agree to float32 rounding.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import playground
from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import CHUNK, Scheduler, run_alone
from playground.generation.batch_history import DECODE
from playground.generation.plan import plan
from playground.interventions import Ablate, Patch, Steer
from tests.hf_tiny import (
    bart_like,
    gpt2_like,
    llama_like,
    m2m_like,
    marian_like,
    save_decoder,
    save_seq2seq,
    t5_like,
)

# Dimensions that are multiples of 16, as real models' are: row-wise vector code then treats every
# row alike wherever it sits in the batch.
FAMILIES = {
    "llama-gqa": ("llama", llama_like(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=112)),
    "gpt2": ("gpt2", gpt2_like(n_embd=64, vocab_size=112, n_positions=128)),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def lm(request, tmp_path_factory):
    family, kwargs = FAMILIES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    save_decoder(directory, family, kwargs, init_std=0.1)
    return playground.load_model(directory)


def decoded_together(scheduler: Scheduler, tags: set) -> bool:
    """Whether one of the scheduler's passes decoded a token for each request tagged `tags`, and for no other."""
    return any({e.tag for e in p.entries if e.kind == DECODE} == tags
               for record in scheduler.history.records() for p in record.passes)


def _same(a, b) -> bool:
    """Nested captures (dicts, lists, arrays, None) bitwise equal."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)
    return a == b


def _assert_equal_runs(got, alone) -> None:
    assert [e.token_ids for e in got] == [e.token_ids for e in alone]
    assert [e.prob for e in got] == [e.prob for e in alone]
    assert all(_same(a.attention, b.attention) and _same(a.residual, b.residual) for a, b in zip(got, alone))
    assert all(_same(a.candidates, b.candidates) for a, b in zip(got, alone))
    assert all(a.cache == b.cache for a, b in zip(got, alone))
    assert [e.beams and [(h.token_ids, h.score) for h in e.beams] for e in got] == \
        [e.beams and [(h.token_ids, h.score) for h in e.beams] for e in alone]


def _requests(lm):
    long_prompt = [(7 * i) % 90 + 3 for i in range(CHUNK + 9)]  # fed in two chunks
    return [
        ([5, 9, 23, 40, 7], GenerationConfig(max_new_tokens=12)),
        (long_prompt, GenerationConfig(max_new_tokens=10, temperature=0.9, top_k=20, seed=4)),
        ([11, 3, 17], GenerationConfig(max_new_tokens=8, num_beams=3)),
        ([8, 8, 30, 2, 51, 60], GenerationConfig(max_new_tokens=9, top_p=0.8, temperature=1.2, seed=1,
                                                 repetition_penalty=1.3, capture_attention=True,
                                                 capture_residual=True)),
        ([9, 14, 2, 77], GenerationConfig(max_new_tokens=5, use_cache=False)),  # recomputes its sequence each step
    ]


def test_mixed_batch_equals_each_request_alone(lm, one_thread):
    """Greedy, sampled (long prompt, chunked prefill), beam and a capturing request together; one joins
    mid-run, one is stopped after four tokens. Each equals its own run alone."""
    requests = [plan(lm, ids, cfg) for ids, cfg in _requests(lm)]
    late = plan(lm, [4, 4, 4, 19], GenerationConfig(max_new_tokens=6, num_beams=2))
    alone = [run_alone(p, invariant=True) for p in requests + [late]]

    scheduler = Scheduler(lm, max_rows=16, max_prefills=4, invariant_alone=True)
    stop = threading.Event()
    tickets = [scheduler.submit(p, stop if i == 0 else None) for i, p in enumerate(requests)]
    steps, joined = 0, None
    while scheduler.busy():
        scheduler.step()
        steps += 1
        if steps == 3:
            joined = scheduler.submit(late)
        if tickets[0].events.qsize() >= 4:
            stop.set()
    results = [t.drain() for t in tickets] + [joined.drain()]

    stopped = results[0]
    assert 4 <= len(stopped) < len(alone[0]) and not stopped[-1].finished
    _assert_equal_runs(stopped, alone[0][: len(stopped)])
    for got, solo in zip(results[1:], alone[1:]):
        _assert_equal_runs(got, solo)
        assert got[-1].finished


@pytest.mark.parametrize("invariant", [False, True], ids=["as-served", "invariant-kernels"])
def test_alone_equals_the_single_request_path(lm, one_thread, invariant):
    """Through the scheduler, a request picks generate_all's tokens, probabilities to float32 rounding;
    as served (the model's own pass when alone), bitwise for a prompt of one chunk."""
    for ids, cfg in _requests(lm):
        reference = generate_all(lm, ids, cfg)
        events = run_alone(plan(lm, ids, cfg), invariant=invariant)
        assert events[-1].token_ids == reference.token_ids
        assert np.allclose([e.prob for e in events], [e.prob for e in reference.steps], rtol=0, atol=1e-5)
        assert events[-1].cache == reference.cache
        if not invariant and len(ids) <= CHUNK:
            assert [e.prob for e in events] == [e.prob for e in reference.steps]


def test_mixed_batch_as_served_matches_the_single_request_path(lm, one_thread):
    """The server's scheduler: requests beside each other (batch-invariant kernels) and the last one
    finishing alone (the model's own pass) each pick generate_all's tokens, probabilities within 1e-5."""
    requests = _requests(lm)
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4)
    tickets = [scheduler.submit(plan(lm, ids, cfg)) for ids, cfg in requests]
    while scheduler.busy():
        scheduler.step()
    for t, (ids, cfg) in zip(tickets, requests):
        got, reference = t.drain(), generate_all(lm, ids, cfg)
        assert got[-1].token_ids == reference.token_ids
        assert np.allclose([e.prob for e in got], [e.prob for e in reference.steps], rtol=0, atol=1e-5)
        assert got[-1].cache == reference.cache


def test_rows_are_capped_and_one_owner_runs_one_request(lm, one_thread):
    scheduler = Scheduler(lm, max_rows=4, per_owner=1)
    tab = object()
    first = scheduler.submit(plan(lm, [5, 6], GenerationConfig(max_new_tokens=3)), owner=tab)
    second = scheduler.submit(plan(lm, [5, 7], GenerationConfig(max_new_tokens=3)), owner=tab)
    beams = scheduler.submit(plan(lm, [5, 8], GenerationConfig(max_new_tokens=3, num_beams=4)))
    scheduler.step()
    assert scheduler.rows() == 1  # the same tab's second request waits; the beams do not fit beside it
    # places go by visitor in turn: the tab already running one waits behind the other visitor's beams
    assert scheduler.queue_position(beams) == 1 and scheduler.queue_position(second) == 2
    while scheduler.busy():
        scheduler.step()
        assert scheduler.rows() <= 4
    assert all(t.drain()[-1].finished for t in (first, second, beams))


def admissions(scheduler: Scheduler, tickets: list) -> list[int]:
    """The order in which `tickets` joined the batch (their indexes), stepping it to the end."""
    order: list[int] = []
    while scheduler.busy():
        scheduler.step()
        order += [tickets.index(t) for t in scheduler.running if tickets.index(t) not in order]
    assert all(t.drain()[-1].finished for t in tickets)
    return order


def test_places_go_by_address_in_turn_then_by_tab(lm, one_thread):
    """Issue 42: a school address with 10 runs waiting (10 tabs) and another address with 1, submitted last: the
    lone address's run is the second admitted, not the eleventh. Within an address its tabs take turns: a tab
    with three runs waiting does not go before its neighbour's one."""
    addresses = {f"tab:a{i}": "10.0.0.1" for i in range(10)} | {"tab:b": "10.0.0.2"}
    scheduler = Scheduler(lm, max_rows=1, per_owner=1, visitor_of=addresses.__getitem__)
    cfg = GenerationConfig(max_new_tokens=2)
    tickets = [scheduler.submit(plan(lm, [5, 6 + i], cfg), owner=f"tab:a{i}") for i in range(10)]
    tickets.append(scheduler.submit(plan(lm, [5, 30], cfg), owner="tab:b"))
    assert scheduler.queue_position(tickets[10]) == 2
    assert admissions(scheduler, tickets) == [0, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9]  # before: b's run came last

    scheduler = Scheduler(lm, max_rows=1, per_owner=1, visitor_of=lambda owner: "10.0.0.1")  # one address, 2 tabs
    tickets = [scheduler.submit(plan(lm, [5, 6 + i], cfg), owner="tab:x") for i in range(3)]
    tickets.append(scheduler.submit(plan(lm, [5, 40], cfg), owner="tab:y"))
    assert admissions(scheduler, tickets) == [0, 3, 1, 2]


SEQ2SEQ = {"t5": t5_like(), "bart": bart_like(), "marian": marian_like(), "m2m_100": m2m_like()}


@pytest.mark.parametrize("family", sorted(SEQ2SEQ))
def test_seq2seq_requests_share_each_decoder_pass(tmp_path, one_thread, family):
    """Greedy, beam, sampled with captures, and cache-less requests of one encoder-decoder model decode
    in one pass per step (each against its own source), and each equals its run alone bitwise and
    generate_all's tokens (probabilities within 1e-5)."""
    save_seq2seq(tmp_path, family, SEQ2SEQ[family])
    lm = playground.load_model(tmp_path)
    requests = [([5, 9, 23, 1], GenerationConfig(max_new_tokens=6)),
                ([7, 7, 12, 30, 1], GenerationConfig(max_new_tokens=5, num_beams=2)),
                ([8, 3, 1], GenerationConfig(max_new_tokens=7, temperature=0.8, seed=3, capture_attention=True,
                                             capture_residual=True)),
                ([9, 4, 2, 6, 11, 1], GenerationConfig(max_new_tokens=4, use_cache=False))]
    alone = [run_alone(plan(lm, ids, cfg), invariant=True) for ids, cfg in requests]
    scheduler = Scheduler(lm, max_prefills=4, invariant_alone=True)
    tickets = [scheduler.submit(plan(lm, ids, cfg)) for ids, cfg in requests]
    passes = []
    hook = lm.model.decoder.blocks[0].register_forward_hook(lambda module, args, out: passes.append(out.shape[0]))
    try:
        scheduler.step()  # the requests start and ask for their turns
        scheduler.step()  # each source is encoded in its turn, then one decoder pass for all four
        assert len(passes) == 1 and passes[0] == 1 + 2 + 1 + 1  # rows: a beam search brings its two
        while scheduler.busy():
            scheduler.step()
    finally:
        hook.remove()
    for t, solo, (ids, cfg) in zip(tickets, alone, requests):
        got = t.drain()
        _assert_equal_runs(got, solo)
        reference = generate_all(lm, ids, cfg)
        assert got[-1].token_ids == reference.token_ids
        assert np.allclose([e.prob for e in got], [e.prob for e in reference.steps], rtol=0, atol=1e-5)


def test_an_edited_request_shares_the_pass_and_never_touches_its_neighbours(lm, one_thread):
    """The causal lab's edits are values of the request's own segments: a request carrying them decodes in the
    same passes as plain ones, its edits on its rows only. The plain requests equal their solo runs bitwise, the
    edited one equals its own solo run bitwise (edits included) and its edited generate_all to float32 error."""
    vector = np.linspace(-1.0, 1.0, lm.config.d_model, dtype=np.float32)
    value = np.linspace(0.5, -0.5, lm.config.d_model, dtype=np.float32)
    edits = (Ablate(0, head=1), Steer(1, torch.from_numpy(vector), scale=3.0), Ablate(1, component="mlp"),
             Patch(0, 2, torch.from_numpy(value)), Patch(1, 6, torch.from_numpy(value)))  # 6: a decoded token's place
    plain = [plan(lm, [5, 9, 23, 40, 7], GenerationConfig(max_new_tokens=8)),
             plan(lm, [11, 3, 17], GenerationConfig(max_new_tokens=6, num_beams=2))]
    edited_cfg = GenerationConfig(max_new_tokens=8, interventions=edits)
    mine = plan(lm, [5, 9, 23, 40, 7], edited_cfg)
    alone = [run_alone(p, invariant=True) for p in [*plain, mine]]
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4, invariant_alone=True)
    tickets = [scheduler.submit(p, tag=i) for i, p in enumerate([*plain, mine])]
    while scheduler.busy():
        scheduler.step()
    assert decoded_together(scheduler, {0, 1, 2})  # the edited request in the plain ones' decoding passes
    for t, solo in zip(tickets, alone):
        _assert_equal_runs(t.drain(), solo)
    got = alone[2]
    reference = generate_all(lm, [5, 9, 23, 40, 7], edited_cfg)
    assert got[-1].token_ids == reference.token_ids
    assert np.allclose([e.prob for e in got], [e.prob for e in reference.steps], rtol=0, atol=1e-5)
    assert got[-1].token_ids != alone[0][-1].token_ids or [e.prob for e in got] != [e.prob for e in alone[0]]


def test_the_longest_wait_counts_the_requests_ahead_in_line(lm, one_thread):
    scheduler = Scheduler(lm, max_rows=1)
    running = scheduler.submit(plan(lm, [5, 6], GenerationConfig(max_new_tokens=30)))
    first = scheduler.submit(plan(lm, [5, 7], GenerationConfig(max_new_tokens=10)))
    second = scheduler.submit(plan(lm, [5, 8], GenerationConfig(max_new_tokens=5)))
    assert scheduler.expected_wait(first) is None  # no step timed yet
    for _ in range(4):
        scheduler.step()
    assert running.produced >= 1 and scheduler.queue_position(first) == 1 and scheduler.queue_position(second) == 2
    step = scheduler.step_seconds
    assert scheduler.expected_wait(first) == pytest.approx((30 - running.produced) * step)
    assert scheduler.expected_wait(second) == pytest.approx((30 - running.produced + 10) * step)
    assert scheduler.expected_wait(running) == 0.0


def test_a_finished_runs_events_keep_neither_the_batchs_kv_pool_nor_the_model(lm, one_thread):
    """A run kept in a tab's history keeps its events. Their token chain decoded its text through the model's
    stand-in in the batch, which held the request's ticket and, through its plan, the model it ran on: every run in
    every tab kept its model alive, a dtype's or a precision copy's that the catalog had let go (a class's soak grew
    7.4 GB that nothing counted). The chain holds the tokenizer only; the pools go with their last cache."""
    import gc
    import weakref

    scheduler = Scheduler(lm, max_rows=8)
    tickets = [scheduler.submit(plan(lm, [5, 9 + i, 23], GenerationConfig(max_new_tokens=6))) for i in range(3)]
    scheduler.step()
    buffers = [weakref.ref(pool.keys[0]) for pool in scheduler.pools.values()]
    while scheduler.busy():
        scheduler.step()
    kept = [t.drain() for t in tickets]  # what the runs keep
    assert buffers and all(events[-1].finished and events[-1].text is not None for events in kept)
    gone = [weakref.ref(t) for t in tickets]  # a ticket holds its plan, and so its model (a dtype's, a copy's)
    del scheduler, tickets
    gc.collect()
    assert [b() for b in buffers] == [None] * len(buffers)
    assert [t() for t in gone] == [None] * len(gone)
    assert [e.text for e in kept[0]][-1] == kept[0][-1].tokens.text  # the text still decodes
