"""ZeroGPU carries no model in its arguments (reliability round 5, row 12): a second model that drafts crosses by
its path like the model itself, the worker loads it, and the GPU time asked for counts the drafter's passes."""

from __future__ import annotations

import pickle
import shutil
import threading
from pathlib import Path

import pytest

from playground.app import engine_stream, zerogpu
from playground.app.session import Session
from playground.checkpoints.loader import load_model
from playground.generation import GenerationConfig, StepEvent, plan
from playground.tools.zerogpu_emulation import EmulatedGPU

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("w")
    shutil.copytree(ROOT / "weights" / "tiny-lm", folder / "drafter")  # another upload of the same vocabulary
    return load_model(ROOT / "weights" / "tiny-lm"), load_model(folder / "drafter")


@pytest.fixture
def gpu(one_thread):
    emulated = EmulatedGPU()
    zerogpu.install(zerogpu.ZeroGPU(emulated, device="cpu"))
    yield emulated
    zerogpu.install(None)
    emulated.close_worker()


def served(p) -> list[StepEvent]:
    items = engine_stream.run_events(p, threading.Event(), owner=Session(), report_waiting=True)
    return [e for e in items if isinstance(e, StepEvent)]


def test_a_model_draft_crosses_by_path_and_drafts_in_the_worker(models, gpu):
    """Round 5: the whole drafter LoadedModel was pickled into every GPU call (384-430 MB for SmolLM2's size; a
    plain run's arguments: 0.8 KB), ran on the CPU copy inside the worker, and asked a plain run's duration."""
    lm, drafter = models
    cfg = GenerationConfig(max_new_tokens=12, draft=drafter, draft_tokens=3, top_candidates=0)
    request = zerogpu.WorkerRequest.of(plan(lm, [5, 9, 11], cfg))
    crossing = len(pickle.dumps(request))
    assert crossing < 4096, crossing  # the drafter's weights (2 MB here) never cross
    assert request.cfg.draft is None and request.draft_path == str(drafter.path)

    got = served(plan(lm, [5, 9, 11], cfg))
    assert gpu.argument_bytes[-1] < 4096 and isinstance(gpu.received[-len(got) - 2], zerogpu.Loaded)
    assert gpu.received[-len(got) - 1:-1] == got  # drafted in the worker: every event came through the pipe
    assert isinstance(gpu.received[-1], zerogpu.Decoded)  # then how it decoded there
    zerogpu.install(None)
    on_cpu = served(plan(lm, [5, 9, 11], cfg))
    assert [e.token_ids for e in got] == [e.token_ids for e in on_cpu]
    numbers = ("q", "p", "accept_prob")  # the same drafts, the same checks; q and p to float32 rounding
    assert [{k: v for k, v in e.speculation.items() if k not in numbers} for e in got] == [
        {k: v for k, v in e.speculation.items() if k not in numbers} for e in on_cpu]
    for a, b in zip(got, on_cpu, strict=True):
        assert [a.speculation.get(k) for k in numbers] == pytest.approx([b.speculation.get(k) for k in numbers],
                                                                         abs=1e-6)
    assert got[-1].speculation["drafter"] == "model:drafter" and got[-1].speculation["totals"]["proposed"] > 0


def test_the_gpu_time_asked_for_counts_the_drafters_passes(models):
    lm, drafter = models

    def asked(**changes) -> int:
        p = plan(lm, [5, 9, 11], GenerationConfig(**{"max_new_tokens": 120, "top_candidates": 0, **changes}))
        return zerogpu.estimate_seconds(zerogpu.WorkerRequest.of(p))

    plain = asked()
    # up to 4 passes of the drafter per pass of the model, and the worker reads the drafter too
    assert asked(draft=drafter, draft_tokens=4) >= plain + zerogpu.START_SECONDS + 120 * 4 * zerogpu.STEP_SECONDS - 1
    assert asked(draft=drafter, draft_tokens=8) > asked(draft=drafter, draft_tokens=4)
    layers = lm.config.n_layers
    assert plain < asked(draft=f"layer:{max(1, layers // 2)}", draft_tokens=4) < asked(draft=drafter, draft_tokens=4)
    assert asked(draft="ngram") == plain  # prompt lookup runs no model
