"""Every run a model's captured step can take decodes in one call of that step per scheduler step (issue 43, item 1).

A scheduler keeps one group per step shape (`generation.shared_step`): each run takes a row, the group holds the
kept step of the smallest row bucket that seats its runs, moves up a bucket when a run finds every row taken and
back down when rows free, and one step call advances every row. Runs join and leave between steps. Here the steps
run uncompiled (the module torch.compile and CUDA graphs take, tests/library/test_captured.py).

Each group test runs twice: as the CPU runs the step, and with the device a step ahead (`overlap`, CUDA's default:
the next call launched before the host handles this one's rows). On the CPU a launched call is computed at once,
which is the order a CUDA stream keeps, so the bookkeeping overlap needs (who hears a call, a move or a leave with a
call in flight, draws for the call after) is checked here whole; its gain needs a GPU.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import Scheduler
from playground.generation.captured import PREPARING, shape_of
from playground.generation.plan import plan
from playground.interventions import Ablate, Steer
from tests.library.test_captured import FAMILIES, PROMPT, captured, load, runs

PROMPTS = [PROMPT, [11, 3, 17, 40], [8, 8, 30, 2, 51, 9, 14], [5, 6, 21]]


def warm(lm, cfg: GenerationConfig, buckets=(1, 2, 4)) -> None:
    """Prepare the steps of these row buckets for `cfg`'s shape now (a warm server has them)."""
    for rows in buckets:
        shape = shape_of(plan(lm, PROMPT, cfg), rows)
        got = lm.captured.take(shape)
        assert not isinstance(got, str), got
        lm.captured.give(shape)


@pytest.fixture(params=[False, True], ids=["synchronous", "overlap"])
def overlap(request) -> bool:
    return request.param


def captured_with(lm, overlap: bool):
    lm = captured(lm)
    lm.captured.overlap = overlap
    return lm


def crowd(lm, cfgs: list[GenerationConfig], **kwargs):
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4, per_owner=4, **kwargs)
    tickets = [scheduler.submit(plan(lm, PROMPTS[i % len(PROMPTS)], cfg)) for i, cfg in enumerate(cfgs)]
    while scheduler.busy():
        scheduler.step()
    return scheduler, tickets


def assert_same(alone, events) -> None:
    """Tokens and candidates equal; probabilities and logits to float32 rounding: a run decodes in a bucket of one
    row alone and of four here, and a product of 4 rows is not bitwise one of 1 (their rows within one bucket are,
    whoever the neighbours: tests/library/test_captured.py)."""
    assert [e.token_id for e in events] == alone.token_ids
    assert np.allclose([e.prob for e in events], [e.prob for e in alone.steps], rtol=0, atol=1e-5)
    for a, b in zip(alone.steps, events):
        assert [c.token_id for c in a.candidates] == [c.token_id for c in b.candidates]
        assert np.allclose([c.logit for c in a.candidates], [c.logit for c in b.candidates], rtol=1e-5, atol=1e-5)


def _runs(lm) -> dict[str, list[GenerationConfig]]:
    c = lm.config
    sampled = [GenerationConfig(max_new_tokens=10, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.2,
                                seed=seed, top_candidates=5) for seed in range(4)]
    edited = [GenerationConfig(max_new_tokens=10, top_candidates=5, interventions=(
        Ablate(min(1, c.n_layers - 1), head=h % c.n_heads), Steer(0, vector=[0.05 * (h + 1)] * c.d_model, scale=2.0)))
        for h in range(4)]
    return {"sampled": sampled, "edited": edited}


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("kind", ["sampled", "edited"])
def test_four_runs_of_a_shape_decode_in_one_step_call_as_alone(tmp_path_factory, one_thread, name, kind, overlap):
    lm = captured_with(load(tmp_path_factory, name), overlap)
    cfgs = _runs(lm)[kind]
    warm(lm, cfgs[0])
    _, tickets = crowd(lm, cfgs)
    if name != "phi3-longrope":
        assert max(t.plan.decoding["rows"] for t in tickets) >= 4
    for i, (t, cfg) in enumerate(zip(tickets, cfgs)):
        alone = generate_all(lm, PROMPTS[i], cfg)  # its own step of one row (or eager)
        if name == "phi3-longrope" and not t.plan.decoding["captured"]:
            # a run that crosses longrope's switch to its long table decodes eagerly, and says why
            assert "longrope" in t.plan.decoding["reason"] and not alone.decoding["captured"]
            assert [e.token_id for e in t.drain()] == alone.token_ids
            continue
        assert t.plan.decoding["captured"] is True, t.plan.decoding
        assert alone.decoding["captured"] and alone.decoding["rows"] == 1
        assert_same(alone, t.drain())


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return load(tmp_path_factory, "llama-gqa")


def test_runs_join_and_leave_between_steps_and_the_group_moves_between_buckets(llama, one_thread, overlap):
    """Runs of different lengths, arriving at different steps: the group moves up to the bucket that seats them and
    back down as they end; each run's tokens are its solo run's, across the moves."""
    lm = captured_with(llama, overlap)
    lengths = [24, 3, 9, 14, 5]
    cfgs = [GenerationConfig(max_new_tokens=n, temperature=0.9, top_k=30, seed=n) for n in lengths]
    warm(lm, cfgs[0], buckets=(1, 2, 4, 8))
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4, per_owner=8)
    tickets, buckets, in_flight = [], [], []
    for step in range(60):
        if step < len(cfgs):  # one newcomer per step
            tickets.append(scheduler.submit(plan(lm, PROMPTS[step % 4], cfgs[step])))
        if not scheduler.busy():
            break
        scheduler.step()
        groups = list(scheduler.steps.groups.values())  # one shape: one group (from the first run's seat on)
        assert len(groups) <= 1
        buckets += [g.bucket for g in groups if g.step is not None]
        in_flight += [g.launched is not None for g in groups if g.step is not None]
    (group,) = scheduler.steps.groups.values()
    assert not scheduler.busy()
    assert 4 in buckets and max(buckets) <= 8
    up = buckets.index(max(buckets))
    assert buckets[:up] == sorted(buckets[:up])  # up as runs joined ...
    assert 1 in buckets[up:]  # ... and down to one row as they ended (the longest run alone at the end)
    assert group.step is None and group.live == []  # every row free, the step given back
    assert all(in_flight) if overlap else not any(in_flight)  # overlap: a call always in flight between steps
    for i, t in enumerate(tickets):
        assert t.plan.decoding["captured"] is True
        alone = generate_all(lm, PROMPTS[i % 4], cfgs[i])
        assert_same(alone, t.drain())


def test_a_run_that_finds_no_ready_bucket_decodes_in_the_eager_batch_and_says_why(llama, one_thread, overlap):
    """Two rows taken, the bucket of four not compiled yet: the third run is not held back, it decodes through the
    shared eager batch (its tokens are the eager run's) and says why; the bucket is prepared aside meanwhile."""
    lm = captured_with(llama, overlap)
    cfg = GenerationConfig(max_new_tokens=6)
    warm(lm, cfg, buckets=(1, 2))
    release, build = threading.Event(), lm.captured.build

    def held_build(shape):  # the bucket of four compiles on the worker until the runs are done
        if shape.rows == 4:
            release.wait(timeout=120)
        return build(shape)

    lm.captured.build = held_build
    _, tickets = crowd(lm, [cfg] * 3)
    release.set()
    said = [t.plan.decoding for t in tickets]
    assert [d["captured"] for d in said] == [True, True, False]
    assert said[2]["reason"] == PREPARING
    for i, t in enumerate(tickets):
        assert [e.token_id for e in t.drain()] == generate_all(llama, PROMPTS[i], cfg).token_ids
    assert lm.captured.settle(timeout=120)
    assert shape_of(plan(lm, PROMPT, cfg), 4) in lm.captured.shapes


def test_a_cancelled_or_failed_run_gives_its_row_back(llama, one_thread, overlap):
    lm = captured_with(llama, overlap)
    cfg = GenerationConfig(max_new_tokens=30)
    warm(lm, cfg, buckets=(1, 2))
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4, per_owner=4)
    a, b = (scheduler.submit(plan(lm, p, cfg)) for p in PROMPTS[:2])
    for _ in range(4):
        scheduler.step()
    (group,) = scheduler.steps.groups.values()
    assert len(group.live) == 2
    a.cancel()
    scheduler.step()
    assert len(group.live) == 1 and a.done
    scheduler.fail_all(RuntimeError("the server stops"))
    assert group.live == [] and group.step is None
    assert b.done


def test_an_ablated_run_beside_plain_ones_decodes_captured_as_the_librarys_eager_run(llama, one_thread, overlap):
    lm = captured_with(llama, overlap)
    edit = (Ablate(1, head=2),)
    plain_cfg, edited_cfg = GenerationConfig(max_new_tokens=8), GenerationConfig(max_new_tokens=8, interventions=edit)
    warm(lm, plain_cfg)
    warm(lm, edited_cfg, buckets=(1,))
    _, tickets = crowd(lm, [plain_cfg, plain_cfg, edited_cfg, plain_cfg])
    assert all(t.plan.decoding["captured"] for t in tickets)
    eager = generate_all(llama, PROMPTS[2], edited_cfg)  # the library's eager loop, the edit as hooks
    assert not eager.decoding["captured"]
    events = tickets[2].drain()
    assert [e.token_id for e in events] == eager.token_ids
    assert np.allclose([e.prob for e in events], [e.prob for e in eager.steps], rtol=0, atol=1e-5)
    for i in (0, 1, 3):  # the plain runs beside it: their own group, their own tokens
        assert [e.token_id for e in tickets[i].drain()] == generate_all(llama, PROMPTS[i], plain_cfg).token_ids


@pytest.mark.parametrize("kind", ["greedy", "sampled", "live"])
def test_a_scripts_run_a_call_ahead_is_its_synchronous_run_bitwise(llama, one_thread, kind):
    """`generate_all` through its own group of one row: with the device a call ahead (CUDA's default) every event is
    the synchronous run's, bitwise: the same step on the same row, only launched earlier."""
    cfg = runs(llama)[kind]
    sync, ahead = (generate_all(captured_with(llama, overlap), PROMPT, cfg) for overlap in (False, True))
    assert sync.decoding["captured"] and ahead.decoding["captured"]
    assert ahead.token_ids == sync.token_ids
    for a, b in zip(sync.steps, ahead.steps, strict=True):
        assert b.prob == a.prob and b.candidates == a.candidates and b.text == a.text
        assert (a.attention is None) == (b.attention is None)
        pairs = [(a.residual, b.residual), *zip((a.attention or {}).get("self", ()), (b.attention or {}).get("self", ()))]
        for x, y in pairs:
            assert (x is None and y is None) or np.array_equal(x, y)
    if kind == "live":
        assert sync.steps[3].attention["self"][0] is not None and sync.steps[3].residual is not None
