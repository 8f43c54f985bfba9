"""The ZeroGPU contract without a GPU: the app's run function through an emulation of `spaces.GPU` (a forked
worker, arguments and every yield pickled through queues), on the CPU, on the shipped checkpoints.

A visitor's run streams to the end and equals the same run served normally; a second run finds the model
in the reused worker; Stop ends a run in the worker; a refused GPU sends the run to the CPU with one line
saying why; nothing the worker did comes back to the main process but the events.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

from playground.app import engine_stream, zerogpu
from playground.app.play import start_run
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.app.words import t
from playground.checkpoints.loader import load_model
from playground.generation import GenerationConfig, StepEvent, plan
from playground.tools.zerogpu_emulation import EmulatedGPU, quota_exceeded

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lm():
    return load_model(ROOT / "weights" / "tiny-lm")


@pytest.fixture(scope="module")
def s2s():
    return load_model(ROOT / "weights" / "tiny-seq2seq")


@pytest.fixture(scope="module")
def gpu():
    emulated = EmulatedGPU()
    yield emulated
    emulated.close_worker()


@pytest.fixture
def zero_gpu(gpu, one_thread):
    """The app in ZeroGPU mode, with the emulated wrapper where a Space has `spaces.GPU`. One torch thread here
    as in the worker (which must run one after a fork), so that both sides add up in the same order."""
    zerogpu.install(zerogpu.ZeroGPU(gpu, device="cpu"))  # this test is about the CPU, whatever the machine has
    gpu.refuse = None
    yield gpu
    zerogpu.install(None)
    gpu.refuse = None


def page_plan(lm, settings: UISettings):
    """The plan the page makes for these settings (captures for the live panel and the lessons included)."""
    return start_run(Session(), lm, settings)[1]


def served(p, stop: threading.Event | None = None, *, report_waiting: bool = True) -> list:
    return list(engine_stream.run_events(p, stop or threading.Event(), owner=Session(), report_waiting=report_waiting))


def steps(items: list) -> list[StepEvent]:
    return [e for e in items if isinstance(e, StepEvent)]


def assert_same_run(got: list[StepEvent], ref: list[StepEvent]) -> None:
    assert [e.token_ids for e in got] == [e.token_ids for e in ref] and got and got[-1].finished
    assert [e.finish_reason for e in got] == [e.finish_reason for e in ref]
    assert [e.text for e in got] == [e.text for e in ref]
    np.testing.assert_allclose([e.prob for e in got], [e.prob for e in ref], rtol=0, atol=1e-6)
    for a, b in zip(got, ref):
        assert a.cache == b.cache
        assert (a.candidates is None) == (b.candidates is None)
        if a.candidates is not None:
            assert [c.token_id for c in a.candidates] == [c.token_id for c in b.candidates]
            np.testing.assert_allclose([c.prob_final for c in a.candidates], [c.prob_final for c in b.candidates],
                                       rtol=0, atol=1e-6)
        if b.beams is not None:
            assert [h.token_ids for h in a.beams] == [h.token_ids for h in b.beams]
        assert (a.residual is None) == (b.residual is None)
        if b.residual is not None:
            np.testing.assert_allclose(a.residual, b.residual, rtol=1e-5, atol=1e-5)
        assert (a.attention is None) == (b.attention is None)
        for kind, layers in (b.attention or {}).items():
            for x, y in zip(a.attention[kind], layers):
                assert (x is None) == (y is None)
                if y is not None:
                    np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)


@pytest.mark.parametrize("settings", [
    UISettings(prompt="Hello", max_new_tokens=12, attention=True),
    UISettings(prompt="Once", mode="sample", temperature=0.9, top_k=20, seed=7, max_new_tokens=10),
    UISettings(prompt="Hello", mode="beam", num_beams=3, max_new_tokens=8),
], ids=["greedy-captures", "sampled", "beam"])
def test_a_visitors_run_on_zerogpu_equals_the_same_run_served_normally(lm, gpu, zero_gpu, settings):
    p = page_plan(lm, settings)
    before = len(gpu.received)
    got = served(p)
    zerogpu.install(None)
    ref = served(page_plan(lm, settings))
    assert_same_run(steps(got), steps(ref))
    used = got[-1]  # no refusal: the GPU took it, and the last line says how much of its time the run used
    assert got[:-1] == steps(got) and used.key == "zerogpu_used" and used.values["asked"] == zerogpu.estimate_seconds(
        zerogpu.WorkerRequest.of(p, "cpu"))
    assert 0 < used.values["seconds"] < 120 and f"about {used.values['seconds']} s of GPU time" in used.text("en")
    came_back = gpu.received[before:]
    assert isinstance(came_back[0], zerogpu.Loaded) and came_back[1:-1] == got[:-1]  # every event crossed the pipe
    # and last, how the run decoded in the worker, now the plan's here too
    assert came_back[-1] == zerogpu.Decoded(p.decoding) and p.decoding["backend"] == "eager"
    for event in got:  # plain Python and numpy only: nothing of torch crosses the process boundary
        assert b"torch" not in pickle.dumps(event)


def test_a_seq2seq_run_and_a_second_run_in_the_reused_worker(lm, s2s, gpu, zero_gpu):
    settings = UISettings(prompt="Hello world", max_new_tokens=10, attention=True)
    first = served(page_plan(s2s, settings))
    second = served(page_plan(s2s, settings))
    loaded = [x for x in gpu.received if isinstance(x, zerogpu.Loaded)][-2:]
    assert loaded[1].cached and loaded[1].seconds == 0.0 and loaded[0].worker == loaded[1].worker  # found, not re-read
    assert loaded[0].worker != os.getpid() and loaded[0].device == "cpu"  # a forked process, on this CPU
    zerogpu.install(None)
    ref = served(page_plan(s2s, settings))
    assert_same_run(steps(first), steps(ref))
    assert_same_run(steps(second), steps(ref))
    # The worker holds its models; the main process never held any of them (only the events came back).
    assert len(zerogpu.WORKER_MODELS) == 0 and str(s2s.device) == "cpu" and str(lm.device) == "cpu"


def test_a_branch_crosses_as_its_forced_tokens(lm, zero_gpu):
    session = Session()
    parent_run, p = start_run(session, lm, UISettings(prompt="Hello", max_new_tokens=8))
    session.add_run(parent_run)
    for event in steps(served(p)):
        parent_run.add_event(event, lm)
    parent_run.finish(lm)
    other = next(c.token_id for c in parent_run.path[2].candidates if c.token_id != parent_run.path[2].token_id)
    _, branch = start_run(session, lm, parent_run.settings, parent=(parent_run, 2, [other]))
    got = steps(served(branch))
    zerogpu.install(None)
    _, again = start_run(session, lm, parent_run.settings, parent=(parent_run, 2, [other]))
    assert_same_run(got, steps(served(again)))


def test_stop_ends_the_run_in_the_worker_and_the_worker_serves_the_next(lm, gpu, zero_gpu):
    p = page_plan(lm, UISettings(prompt="Hello", max_new_tokens=40))
    stop = threading.Event()
    got = []
    closed = gpu.closed
    for event in engine_stream.run_events(p, stop, owner=Session(), report_waiting=True):
        got.append(event)
        if len(got) == 3:
            stop.set()
    assert len(steps(got)) == 3 and not got[2].finished
    assert got[3:] and got[3].key == "zerogpu_used"  # a stopped run's GPU time counts too, and is said
    assert gpu.closed == closed + 1  # the GPU call was closed, so the worker was told to stop
    stream = engine_stream.run_events(page_plan(lm, UISettings(prompt="Hi", max_new_tokens=40)), threading.Event())
    assert [next(stream).step, next(stream).step] == [0, 1]
    stream.close()  # what the page does when its handler ends (a new run, a closed tab)
    assert gpu.closed == closed + 2
    after = steps(served(page_plan(lm, UISettings(prompt="Hello", max_new_tokens=4))))
    assert len(after) == 4 and after[-1].finished


def test_a_refused_gpu_runs_on_the_cpu_with_one_line_saying_why(lm, gpu, zero_gpu):
    settings = UISettings(prompt="Hello", max_new_tokens=6, attention=True)
    gpu.refuse = quota_exceeded()
    got = served(page_plan(lm, settings))
    assert got[0] == zerogpu.Notice("zerogpu_quota_left", {"left": 12})  # what is left, where the refusal says it
    for lang in ("en", "zh"):
        line = got[0].text(lang)
        assert "\n" not in line and line == t("zerogpu_quota_left", lang, left=12)
    english = got[0].text("en")
    assert "12 s of ZeroGPU time are left" in english and "12 秒" in got[0].text("zh")
    assert "sign in" in english and "5 minutes a day" in english and "2 minutes a day per network" in english
    assert "one school address" in english and "own computer" in english and "登录" in got[0].text("zh")
    zerogpu.install(None)
    ref = served(page_plan(lm, settings))
    assert got[1:] == steps(got)  # then the CPU's events, exactly the run served normally
    assert [e.token_ids for e in got[1:]] == [e.token_ids for e in ref] and got[1:][-1].finished
    assert [e.prob for e in got[1:]] == [e.prob for e in ref]


def test_a_script_caller_gets_the_cpu_run_without_a_notice(lm, gpu, zero_gpu):
    gpu.refuse = quota_exceeded()
    got = served(plan(lm, [5, 9, 11], GenerationConfig(max_new_tokens=3, top_candidates=0)), report_waiting=False)
    assert len(got) == 3 and all(isinstance(e, StepEvent) for e in got) and got[-1].finished


@pytest.mark.parametrize(("title", "key"), [
    ("ZeroGPU quota exceeded", "zerogpu_quota"), ("ZeroGPU pending credits exceeded", "zerogpu_quota"),
    ("ZeroGPU queue timeout", "zerogpu_busy"), ("ZeroGPU client error", "zerogpu_failed"),
    ("ZeroGPU worker error", "zerogpu_failed"),
])
def test_each_refusal_the_spaces_package_raises_says_why(title, key):
    import gradio as gr

    assert zerogpu.refusal_key(gr.Error("details", title=title)) == key
    assert zerogpu.refusal(gr.Error("details", title=title)) == zerogpu.Notice(key)  # nothing said of what is left


def test_a_quota_refusal_says_what_is_left_in_each_of_the_packages_wordings():
    import gradio as gr

    for message, left in (("You have exceeded your free GPU quota (13s requested vs. 7s left).", 7),  # spaces 0.3x on
                          ("You have exceeded your GPU quota (59s left vs. 60s requested). Please retry", 59)):
        notice = zerogpu.refusal(gr.Error(message, title="ZeroGPU quota exceeded"))
        assert notice == zerogpu.Notice("zerogpu_quota_left", {"left": left})


def test_the_gpu_time_asked_for_follows_the_run(lm, gpu, zero_gpu):
    def asked(**changes) -> int:
        p = plan(lm, [5, 9, 11], GenerationConfig(**{"max_new_tokens": 32, "top_candidates": 0, **changes}))
        return zerogpu.estimate_seconds(zerogpu.WorkerRequest.of(p))

    base = asked()
    assert zerogpu.MIN_SECONDS <= base < 60  # less than ZeroGPU's default 60 s
    assert asked(max_new_tokens=120) > base and asked(num_beams=4) > base and asked(capture_attention=True) > base
    gpu.durations.clear()
    served(plan(lm, [5, 9, 11], GenerationConfig(max_new_tokens=2)))
    assert gpu.durations == [asked(max_new_tokens=2, top_candidates=5)]  # the wrapper got it from the call itself


def test_a_worker_keeps_its_models_until_their_files_change(tmp_path):
    import shutil

    for name in ("tiny-lm", "tiny-seq2seq"):
        shutil.copytree(ROOT / "weights" / name, tmp_path / name)
    models = zerogpu.WorkerModels(capacity=1)
    first, loaded = models.get(str(tmp_path / "tiny-lm"), "float32")
    again, found = models.get(str(tmp_path / "tiny-lm"), "float32")
    assert not loaded.cached and found.cached and again is first
    weights = tmp_path / "tiny-lm" / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # downloaded again
    assert not models.get(str(tmp_path / "tiny-lm"), "float32")[1].cached
    models.get(str(tmp_path / "tiny-seq2seq"), "float32")  # over capacity: the least recently used goes
    assert len(models) == 1 and not models.get(str(tmp_path / "tiny-lm"), "float32")[1].cached


def test_a_lab_fork_carries_its_edits_into_the_worker(lm, zero_gpu):
    from playground.interventions import Ablate, Steer

    edits = (Ablate(layer=1, head=0), Steer(layer=0, vector=[0.5] * lm.config.d_model, scale=4.0))
    cfg = GenerationConfig(max_new_tokens=10, interventions=edits)
    got = steps(served(plan(lm, [5, 9, 11], cfg)))
    plain = steps(served(plan(lm, [5, 9, 11], cfg.replace(interventions=()))))
    zerogpu.install(None)
    assert_same_run(got, steps(served(plan(lm, [5, 9, 11], cfg))))
    assert [e.prob for e in got] != [e.prob for e in plain]  # the edits did apply in the worker


def test_a_warm_worker_reuses_a_prompts_beginning(lm, gpu, zero_gpu):
    """Prefix caching within the reused worker: the second run of one long prompt restores its full blocks
    (the worker's own store: nothing of it comes back) and is bitwise the first run. The page's runs record the
    last prompt position, so they restore full blocks only; a script's run (nothing recorded) restores the whole
    prompt, its first logits too."""
    text = "A warm worker keeps the keys and values of the prompts it has seen. " * 3
    settings = UISettings(prompt=text, max_new_tokens=5)
    runs = [served(page_plan(lm, settings)) for _ in range(2)]
    assert all(run[-1].key == "zerogpu_used" for run in runs)  # both computed in the worker
    first, second = steps(runs[0]), steps(runs[1])
    n = len(page_plan(lm, settings).prompt_ids)
    assert n > 64 and first[-1].cache["reused_tokens"] == 0
    assert second[-1].cache["reused_tokens"] == (n - 1) // 32 * 32
    assert [e.token_ids for e in second] == [e.token_ids for e in first]
    assert [e.prob for e in second] == [e.prob for e in first]
    script = [served(start_run(Session(), lm, settings, captures=False)[1]) for _ in range(2)]
    assert all(run[-1].key == "zerogpu_used" for run in script)
    fresh, again = steps(script[0]), steps(script[1])
    assert fresh[-1].cache["reused_tokens"] == (n - 1) // 32 * 32  # the page's runs left its blocks, no tail
    assert again[-1].cache["reused_tokens"] == n
    assert [e.token_ids for e in again] == [e.token_ids for e in fresh] == [e.token_ids for e in first]
    assert [e.prob for e in again] == [e.prob for e in fresh]


def test_a_fresh_worker_captures_a_runs_step_once_and_a_reused_worker_replays_it(lm, monkeypatch, one_thread):
    """`app.py --compile` on ZeroGPU: the worker loads its models with captured steps (CUDA graphs on a Space; here
    the same step uncompiled, on the CPU). A fresh worker captures the run's step shape in its first call, and the
    GPU time that call asks for counts that capture; the reused worker replays the step it kept (no capture), and
    both runs equal the run served normally. Every call asks for a capture: the caller cannot know which worker
    it gets."""
    monkeypatch.setenv("PLAYGROUND_COMPILE", "eager")
    fresh = EmulatedGPU()
    zerogpu.install(zerogpu.ZeroGPU(fresh, device="cpu"))
    settings = UISettings(prompt="Hello", max_new_tokens=8, attention=True)
    try:
        plans = [page_plan(lm, settings) for _ in range(2)]
        runs = [steps(served(p)) for p in plans]
    finally:
        zerogpu.install(None)
        fresh.close_worker()
    decoded = [item for item in fresh.received if isinstance(item, zerogpu.Decoded)]
    assert fresh.workers_started == 1 and len(decoded) == 2
    assert [d.captures for d in decoded] == [1, 0] and decoded[0].capture_seconds > 0 == decoded[1].capture_seconds
    assert all(p.decoding["captured"] and p.decoding["backend"] == "eager" for p in plans)
    request = zerogpu.WorkerRequest.of(plans[0], "cpu")
    assert request.captured and fresh.durations == [zerogpu.estimate_seconds(request)] * 2
    uncaptured = zerogpu.estimate_seconds(dataclasses.replace(request, captured=False))
    assert zerogpu.estimate_seconds(request) - uncaptured >= zerogpu.CAPTURE_SECONDS - 1  # ceil of the sum
    monkeypatch.delenv("PLAYGROUND_COMPILE")
    normal = steps(served(page_plan(lm, settings)))
    assert [e.token_ids for e in runs[0]] == [e.token_ids for e in runs[1]] == [e.token_ids for e in normal]
    np.testing.assert_allclose([e.prob for e in runs[0]], [e.prob for e in normal], rtol=0, atol=1e-5)
    assert [e.prob for e in runs[1]] == [e.prob for e in runs[0]]
    assert not zerogpu.WorkerRequest.of(plans[0], "cpu").captured  # without --compile nothing is captured
