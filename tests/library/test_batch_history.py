"""The shared batch's step history: what each step of an in-process scheduler ran, row by row, exactly; a ring
of bounded size; the queries the page's lesson reads (a request's seats, step time by rows, the timeline)."""

from __future__ import annotations

import dataclasses

import pytest

import playground
from playground.generation import GenerationConfig
from playground.generation.batch import CHUNK, Scheduler
from playground.generation.batch_history import DECODE, PREFILL, StepHistory
from playground.generation.plan import plan
from tests.hf_tiny import save_small_llama


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_small_llama(directory)
    return playground.load_model(directory)


def _plan(lm, ids, tokens, **knobs):
    """A plan that never meets an end token, so its run takes exactly `tokens` steps."""
    return dataclasses.replace(plan(lm, ids, GenerationConfig(max_new_tokens=tokens, **knobs)), eos_ids=[])


def _as_table(history):
    """Each step as [(tag, rows, tokens, kind, emits, joined, left), ...] in pass order."""
    return [[tuple(e) for p in s.passes for e in p.entries] for s in history.records()]


def test_three_requests_joining_at_different_steps_are_recorded_row_by_row(lm, one_thread):
    long_prompt = [(7 * i) % 90 + 3 for i in range(CHUNK + 5)]  # two chunks: 32 tokens, then 5
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4)
    a = scheduler.submit(_plan(lm, [5, 9, 23], 5), tag="a")
    steps = 0
    while scheduler.busy():
        scheduler.step()
        steps += 1
        if steps == 1:
            b = scheduler.submit(_plan(lm, long_prompt, 3), tag="b")
        if steps == 3:
            c = scheduler.submit(_plan(lm, [8, 30], 3, num_beams=2), tag="c")
    assert [len(t.drain()) for t in (a, b, c)] == [5, 3, 3]
    P, D = PREFILL, DECODE
    assert _as_table(scheduler.history) == [
        [("a", 1, 3, P, True, True, False)],
        [("a", 1, 1, D, True, False, False), ("b", 1, CHUNK, P, False, True, False)],
        [("a", 1, 1, D, True, False, False), ("b", 1, 5, P, True, False, False)],
        [("a", 1, 1, D, True, False, False), ("b", 1, 1, D, True, False, False), ("c", 1, 2, P, True, True, False)],
        [("a", 1, 1, D, True, False, True), ("b", 1, 1, D, True, False, True), ("c", 2, 2, D, True, False, False)],
        [("c", 2, 2, D, True, False, True)],
    ]
    records = scheduler.history.records()
    assert [s.number for s in records] == [1, 2, 3, 4, 5, 6] and all(s.seconds > 0 for s in records)
    assert [s.tokens for s in records] == [3, 1 + CHUNK, 6, 4, 4, 2]
    # the weights one pass reads: every parameter (a tied head counted once) and the small buffers (RoPE's table)
    weights = sum(t.numel() * t.element_size() for t in (*lm.model.parameters(), *lm.model.buffers()))
    assert weights == 4 * (lm.parameter_count + 8) and {p.weight_bytes for s in records for p in s.passes} == {weights}
    # a beam search feeds its prompt once, then decodes a row per beam
    # the visitor's own rows: "row r of n" at each step it took part in, beams counted as rows
    seats = scheduler.history.seats("c")
    assert [(s.step, s.row, s.rows, s.produced) for s in seats] == [(4, 3, 3, 3), (5, 3, 4, 4), (6, 1, 2, 2)]
    assert [(s.step, s.row, s.rows) for s in scheduler.history.seats("b")] == [(2, 2, 2), (3, 2, 2), (4, 2, 3), (5, 2, 4)]
    assert scheduler.history.seats("nobody") == [] and not scheduler.history.holds("nobody")


def test_step_times_are_medians_by_token_rows_and_the_timeline_draws_each_row(lm, one_thread):
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4)
    a = scheduler.submit(_plan(lm, [5, 9], 4), tag="a")
    scheduler.step()
    b = scheduler.submit(_plan(lm, [4], 3), tag="b")
    while scheduler.busy():
        scheduler.step()
    assert a.drain() and b.drain()
    records = scheduler.history.records()
    by_rows: dict[int, list[float]] = {}
    for s in records:
        by_rows.setdefault(s.tokens, []).append(1000 * s.seconds)
    times = scheduler.history.step_times()
    assert sorted(times) == sorted(by_rows) and all(times[n][1] == len(by_rows[n]) for n in times)
    assert all(min(by_rows[n]) <= times[n][0] <= max(by_rows[n]) for n in times)
    timeline = scheduler.history.timeline("b", margin=1)
    assert timeline["steps"] == [1, 2, 3, 4]  # from one step before b joined to its last
    assert [len(column) for column in timeline["cells"]] == [1, 2, 2, 2]
    assert timeline["cells"][1] == [(DECODE, False, False, False, 1), (PREFILL, True, True, False, 1)]
    assert timeline["cells"][3][1] == (DECODE, True, False, True, 1)


def test_the_history_is_a_ring_of_its_last_steps(lm, one_thread):
    history = StepHistory(capacity=8)
    scheduler = Scheduler(lm, history=history, per_owner=1)
    tab = object()  # one visitor's three runs, one after another
    for tag in range(3):
        scheduler.submit(_plan(lm, [5, 6, 7], 10), owner=tab, tag=tag)
    while scheduler.busy():
        scheduler.step()
    records = history.records()
    assert len(history) == 8 and [s.number for s in records] == list(range(23, 31))  # 3 runs of 10 steps
    assert [s.passes[0].entries[0].tag for s in records] == [2] * 8
    # a step holds plain numbers and the tag, never a tensor
    assert {type(x) for s in records for p in s.passes for e in p.entries for x in e} <= {int, str, bool}


def test_a_run_without_a_tag_is_recorded_under_an_opaque_label(lm, one_thread):
    scheduler = Scheduler(lm)
    ticket = scheduler.submit(_plan(lm, [5, 6], 2))
    while scheduler.busy():
        scheduler.step()
    assert scheduler.history.holds(ticket.tag) and len(scheduler.history.seats(ticket.tag)) == 2
