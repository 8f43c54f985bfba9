"""No compile inside the scheduler's step (issue 42, row 4): `app.py --compile` compiled a new step shape on the
torch thread inside the scheduler's step, so every other visitor waited for it (16 s on tiny models, 98–156 s on
SmolLM2).

Now a scheduler's model prepares a new shape on the compile worker (`captured.CapturedDecoder.aside`): the
shape's own run decodes eagerly meanwhile and says so, other visitors' runs (a ready shape, an eager run) go on,
and a later run of the shape decodes through it. The compile is held at a gate (a threading.Event around the
decoder's `build`) until the other runs have ended, so it is provably still in progress then; a build called
on the thread that drives the scheduler is recorded instead of held (the old way, which would never end).
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

import playground
from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import Scheduler
from playground.generation.captured import PREPARING, CapturedDecoder
from playground.generation.plan import plan

TINY = Path(__file__).resolve().parents[2] / "weights" / "tiny-lm"
PROMPT = "The import statement"


@pytest.fixture(scope="module")
def lm():
    return playground.load_model(TINY)


class Gate:
    """Holds `decoder.build` until `release` is set, on any thread but the one that drives the scheduler."""

    def __init__(self, decoder: CapturedDecoder) -> None:
        self.release, self.entered = threading.Event(), threading.Event()
        self.driver, self.on_driver, self.threads = threading.get_ident(), False, []
        build = decoder.build

        def gated(shape):
            self.threads.append(threading.current_thread().name)
            if threading.get_ident() == self.driver:
                self.on_driver = True  # the scheduler's own thread: holding it here would hang the test
            else:
                self.entered.set()
                self.release.wait()
            return build(shape)

        decoder.build = gated


def _step_until(scheduler: Scheduler, *tickets, steps: int = 400) -> None:
    for _ in range(steps):
        if all(t.done for t in tickets):
            return
        scheduler.step()


def test_a_new_shape_compiles_aside_while_other_visitors_runs_complete(lm, one_thread):
    stepped = dataclasses.replace(lm, captured=CapturedDecoder(lm.model, compile=False))
    ready_cfg = GenerationConfig(max_new_tokens=8, top_candidates=5)
    new_cfg = GenerationConfig(max_new_tokens=8, top_candidates=13)  # row 4's new shape
    plain_cfg = GenerationConfig(max_new_tokens=12)
    assert generate_all(stepped, PROMPT, ready_cfg).decoding["captured"]  # a shape made ready before the server
    gate = Gate(stepped.captured)
    scheduler = Scheduler(stepped, max_rows=16, max_prefills=4)
    new = scheduler.submit(plan(stepped, PROMPT, new_cfg))
    ready = scheduler.submit(plan(stepped, "A visitor's prompt", ready_cfg))
    plain = scheduler.submit(plan(lm, [5, 9, 23, 40, 7], plain_cfg))
    _step_until(scheduler, new, ready, plain)
    assert not gate.on_driver, "the new shape was built on the scheduler's thread, inside its step"
    assert gate.entered.is_set() and not gate.release.is_set()  # the new shape's compile is still in progress
    assert ready.done and plain.done and new.done and not scheduler.busy()
    assert ready.plan.decoding == {"captured": True, "rows": 1, "backend": "eager", "reason": "", "length": 64}
    assert ready.drain()[-1].token_ids == generate_all(lm, "A visitor's prompt", ready_cfg).token_ids
    assert plain.drain()[-1].token_ids == generate_all(lm, [5, 9, 23, 40, 7], plain_cfg).token_ids
    # the new shape's own run decoded eagerly in the shared batch (beside the plain run: 2 rows), said why, and gave
    # the eager tokens
    assert new.plan.decoding == {"captured": False, "rows": 2, "backend": "eager", "reason": PREPARING}
    assert new.drain()[-1].token_ids == generate_all(lm, PROMPT, new_cfg).token_ids
    gate.release.set()
    assert stepped.captured.settle(timeout=120)
    # the new shape, and for each shape held, the two row buckets above it (prepared ahead for a class): all aside
    assert set(gate.threads) == {"playground-compile"} and len(gate.threads) == 5


def test_the_new_shapes_later_run_is_compiled_for_real_on_the_worker(lm, one_thread):
    """Inductor's own compile (the path `app.py --compile` takes on the CPU) on the compile worker's thread:
    the shape's first run is eager with the reason, the next is captured with the eager run's tokens."""
    compiled = playground.load_model(TINY, compile=True)
    gate = Gate(compiled.captured)
    cfg = GenerationConfig(max_new_tokens=10, temperature=0.8, top_k=20, seed=3, top_candidates=3)
    scheduler = Scheduler(compiled, max_rows=16, max_prefills=4)
    first = scheduler.submit(plan(compiled, PROMPT, cfg))
    _step_until(scheduler, first)
    assert not gate.on_driver and first.done and not gate.release.is_set()
    assert first.plan.decoding == {"captured": False, "rows": 1, "backend": "eager", "reason": PREPARING}
    eager = generate_all(lm, PROMPT, cfg)
    assert first.drain()[-1].token_ids == eager.token_ids
    gate.release.set()
    assert compiled.captured.settle(timeout=600) and compiled.captured.shapes  # compiled, not failed
    later = scheduler.submit(plan(compiled, PROMPT, cfg))
    _step_until(scheduler, later)
    assert later.plan.decoding == {"captured": True, "rows": 1, "backend": "inductor", "reason": "", "length": 64}
    assert later.drain()[-1].token_ids == eager.token_ids
    assert gate.threads == ["playground-compile"] * 3  # the shape and its buckets of 2 and 4 rows, ahead
