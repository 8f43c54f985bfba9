"""Everything the page computes runs on the model's device: checked here without a GPU.

The shipped tiny models are moved to a fake CUDA device (tests/fake_cuda.py): their tensors say `cuda:0`
and hold CPU numbers, and any call that mixes them with CPU tensors raises as a GPU would. Every lesson
the page shows, every analysis entry point and every lab edit then runs to the end, and its numbers must
equal the same computation on the CPU: a tensor built without the model's device fails here in CI the way
it fails on a GPU (the divergence panel's gather index, the Steer and Patch parts of attribution), and the
SDPA lesson must time the model's device, waiting for it around each timing.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import playground
from playground import analysis
from playground.analysis import sdpa as sdpa_module
from playground.app import lab, lessons
from playground.app.play import start_run
from playground.app.run import Run
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.generation import generate_all
from playground.generation.engine import run_plan
from playground.interventions import Steer, pack
from playground.loaded import LoadedModel
from tests.device_cases import CFG, PROMPTS, analysis_data, drop_timings, lab_data, load, same
from tests.fake_cuda import CudaTensor, DeviceMismatch, fake_cuda

MODELS = [("tiny-lm", "float32"), ("tiny-seq2seq", "float32"), ("tiny-lm", "bfloat16"), ("tiny-seq2seq", "bfloat16")]


def on_cuda(lm: LoadedModel) -> LoadedModel:
    """The same checkpoint as `load_model(..., device="cuda")` leaves it (call inside `fake_cuda()`)."""
    model = playground.load_model(lm.path, dtype=str(lm.dtype).removeprefix("torch.")).model
    model.to(torch.device("cuda", 0))
    assert isinstance(model.embed.weight, CudaTensor)
    return dataclasses.replace(lm, model=model, device=torch.device("cuda", 0))


# --- the fake device itself refuses what a GPU refuses -------------------------------------------------------


def test_the_fake_device_refuses_what_a_gpu_refuses_and_computes_like_the_cpu():
    w = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    with fake_cuda() as device:
        wc, xc = w.to("cuda"), x.to("cuda")
        assert wc.device == torch.device("cuda", 0) and isinstance(wc, CudaTensor)
        y = xc @ wc
        assert y.device.type == "cuda" and y.cpu().equal(x @ w)  # the CPU's numbers, on "cuda"
        assert y.tolist() == (x @ w).tolist() and float(y[0, 0]) == float((x @ w)[0, 0])
        for mixed in (lambda: xc @ w, lambda: torch.stack([y[0], torch.zeros(3)]),
                      lambda: y.gather(1, torch.tensor([[0], [1]])),
                      lambda: torch.nn.functional.embedding(torch.tensor([1]), wc)):
            with pytest.raises(DeviceMismatch, match="same device"):
                mixed()
        with pytest.raises(TypeError, match="cuda"):
            y.numpy()
        with pytest.raises(DeviceMismatch, match="generator"):
            torch.randn(3, generator=torch.Generator().manual_seed(0), device="cuda")
        assert torch.randn(3, generator=torch.Generator(device="cuda").manual_seed(0), device="cuda").device.type == "cuda"
        # What a GPU allows: a 0-dim CPU scalar beside CUDA tensors, CPU indices, copies in.
        assert (y * torch.tensor(2.0)).device.type == "cuda" and y[torch.tensor([1])].shape == (1, 3)
        z = y.clone()
        z[0] = torch.ones(3)
        assert z.cpu()[0].tolist() == [1.0, 1.0, 1.0]
        torch.cuda.synchronize()
        assert device.synchronized == 1
    assert torch.Generator is torch._C.Generator  # everything patched is put back


# --- the lessons and the analyses ----------------------------------------------------------------------------


def play(lm: LoadedModel, settings: UISettings) -> Run:
    """A run as the page makes it (the engine's own events, on this thread)."""
    session = Session()
    run, plan = start_run(session, lm, settings)
    session.add_run(run)
    for event in run_plan(plan):
        run.add_event(event, lm)
    run.finish(lm)
    return run


def lesson_data(lm: LoadedModel) -> dict:
    """Every lesson's numbers on one run, and the analyses the lessons do not call."""
    run = play(lm, UISettings(prompt=PROMPTS[lm.path.name], max_new_tokens=6))
    sdpa = analysis.sdpa_vs_explicit(lm, (8, 16), repeats=1, memory=False)
    out = {"tokens": run.generated_ids, "probs": [s.prob for s in run.path]}
    for name, lesson in lessons.LESSONS.items():
        cache = run.analysis_cache(lm)
        ctx = lessons.Context(lm, "en", run, 2, cache.result, cache, sdpa)
        kind = "cross" if lm.kind == "seq2seq" and name == "steps" else "self"
        data = lesson.compute(ctx, lessons.Inputs(layer=1, head=1, kind=kind, preset="", dtype="", tokens=64))
        assert lessons.show(name, lm, run, 2, lessons.Inputs(layer=1, head=1), "en", sdpa=sdpa).caption
        out[name] = data.to_dict() if hasattr(data, "to_dict") else data
    result = generate_all(lm, PROMPTS[lm.path.name], CFG)
    cache = analysis.RunCache(lm, result)
    if lm.kind == "seq2seq":
        out["encoder steps"] = analysis.attention_steps(lm, result, 0, 0, 1, "encoder", cache=cache)
    else:
        out["rope"] = analysis.rope_shift_scores(lm, result, 3, 1, 1, cache=cache)
    out["positional"] = (analysis.positional_data(lm, 24), analysis.pe_schemes(lm, 24))
    out["lens ranks"] = analysis.logit_lens_ranks(lm, result, [0, 2, 4], cache=cache)
    out["kv timing"] = analysis.time_cache(lm, PROMPTS[lm.path.name], 3, repeats=1, warmup=0)["same_tokens"]
    out.pop("sdpa")  # timings differ from run to run; its own test below
    return out


@pytest.mark.parametrize("name, dtype", MODELS)
def test_every_lesson_runs_on_the_models_device_with_the_cpus_numbers(name, dtype, one_thread):
    cpu = load(name, dtype)
    expected = drop_timings(lesson_data(cpu))
    with fake_cuda():
        got = drop_timings(lesson_data(on_cuda(cpu)))
    same(got, expected, name)


@pytest.mark.parametrize("name, dtype", [("tiny-lm", "float16"), ("tiny-seq2seq", "float16"), ("tiny-seq2seq", "float32")])
def test_every_analysis_called_directly_runs_on_the_models_device(name, dtype, one_thread):
    """The same analyses without the app core (what tests/library/test_gpu.py runs on a real GPU), in float16 too."""
    cpu = load(name, dtype)
    expected = drop_timings(analysis_data(cpu))
    with fake_cuda():
        got = drop_timings(analysis_data(on_cuda(cpu)))
    same(got, expected, name)


# --- the causal lab ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, dtype", MODELS)
def test_every_lab_edit_and_its_analyses_run_on_the_models_device(name, dtype, one_thread):
    cpu = load(name, dtype)
    expected = lab_data(cpu)
    with fake_cuda():
        got = lab_data(on_cuda(cpu))
    same(got, expected, name)


def test_the_labs_app_core_on_the_models_device(one_thread):
    """What the lab's buttons call: a fork with an edit, what it changed, why a token won, the sweep."""
    cpu = load("tiny-lm")
    settings = UISettings(prompt=PROMPTS["tiny-lm"], max_new_tokens=6)

    def lab_buttons(lm: LoadedModel) -> list:
        original = play(lm, settings)
        steer = Steer(1, torch.linspace(-2, 2, lm.config.d_model), 2.0)
        edited = play(lm, dataclasses.replace(settings, edits=pack((steer,))))
        assert edited.cfg.interventions == (steer,)
        return [lab.divergence_of(lm, original, edited).to_dict(), lab.why(lm, edited, 2, versus=True).to_dict(),
                lab.sweep(lm, edited, 2, 1).to_dict(), lab.contrast(lm, "good", "bad", 1).to_dict()]

    expected = lab_buttons(cpu)
    with fake_cuda():
        got = lab_buttons(on_cuda(cpu))
    same(got, expected, "lab")


# --- the SDPA lesson ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_sdpa_lesson_times_the_models_device_and_dtype_waiting_for_it(dtype, one_thread, monkeypatch):
    cpu = load("tiny-lm", dtype)
    on_cpu = analysis.sdpa_vs_explicit(cpu, (8, 16), repeats=2, memory=False)
    assert on_cpu["device"] == "cpu" and on_cpu["dtype"] == dtype
    timed, real = [], sdpa_module.attend  # what the lesson's own `attend` was given (the real one runs)

    def attend(q, *args, **kwargs):
        timed.append((q.device.type, q.dtype))
        return real(q, *args, **kwargs)

    monkeypatch.setattr(sdpa_module, "attend", attend)
    with fake_cuda() as device:
        data = analysis.sdpa_vs_explicit(on_cuda(cpu), (8, 16), repeats=2, memory=False)
    assert set(timed) == {("cuda", getattr(torch, dtype))} and len(timed) == 2 * 2 * 3  # warm-up + 2 repeats
    assert data["device"] == "cuda:0" and data["dtype"] == dtype and data["memory_method"] == "analytic"
    # Two paths × two lengths × two repeats, each timing waited for before and after.
    assert device.synchronized >= 2 * 2 * 2 * 2
    for row, ref in zip(data["rows"], on_cpu["rows"]):  # the same seeded inputs: the same agreement
        assert row["max_abs_diff"] == ref["max_abs_diff"]


# --- the other position schemes and block kinds ------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "t5", "bart", "mistral"])
def test_positions_attention_and_attribution_of_other_families_on_the_device(family, tmp_path, one_thread):
    """Learned positions (GPT-2, BART), T5's relative bias, a sliding window (Mistral): their own code paths."""
    from tests.analysis_models import load as load_family
    from tests.analysis_models import record

    cpu = load_family(family, tmp_path)

    def numbers(lm: LoadedModel) -> dict:
        result = record(lm, family, 6)
        cache = analysis.RunCache(lm, result)
        kinds = ["self", "cross", "encoder"] if lm.kind == "seq2seq" else ["self"]
        steer = Steer(0, torch.linspace(-1, 1, lm.config.d_model), 1.5)
        edited = generate_all(lm, result.prompt_ids, CFG.replace(interventions=(steer,)))
        return {"positional": analysis.positional_data(lm, 16), "schemes": analysis.pe_schemes(lm, 16),
                "steps": [analysis.attention_steps(lm, result, 3, 0, 1, k, cache=cache) for k in kinds],
                "lens": analysis.logit_lens(lm, result, 3, cache=cache),
                "why": analysis.attribute_step(lm, edited, 3).to_dict(),
                "divergence": analysis.divergence_of_runs(lm, generate_all(lm, result.prompt_ids, CFG), edited).to_dict()}

    expected = numbers(cpu)
    with fake_cuda():
        got = numbers(on_cuda(cpu))
    same(got, expected, family)
