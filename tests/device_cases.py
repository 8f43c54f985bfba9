"""The computations the page makes, as plain data, for the device tests (tests/library/test_devices.py on a fake CUDA
device, tests/library/test_gpu.py on a real one). No Gradio or plotly here: the GPU machine has neither."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

import playground
from playground import analysis
from playground.analysis import steering
from playground.generation import GenerationConfig, generate_all
from playground.interventions import Ablate, Patch, Steer
from playground.loaded import LoadedModel

REPO = Path(__file__).resolve().parents[1]
PROMPTS = {"tiny-lm": "The import statement", "tiny-seq2seq": "March 5, 2021"}
CFG = GenerationConfig(max_new_tokens=6, capture_residual=True, capture_attention=True, top_candidates=4)


def load(name: str, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """A shipped tiny model that never stops early, so every run has all its steps."""
    lm = playground.load_model(REPO / "weights" / name, device=device, dtype=dtype)
    return dataclasses.replace(lm, config=dataclasses.replace(lm.config, eos_token_id=None))


def edits(lm: LoadedModel) -> tuple:
    vector = torch.linspace(-1, 1, lm.config.d_model)
    return (Ablate(0, head=1), Ablate(1, component="mlp"), Steer(0, vector, 2.0), Patch(1, 2, vector * 0.5))


def same(a, b, what: str, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    """A value on the device equals the CPU's (on the fake device: the same arithmetic on the same numbers)."""
    numbers = (int, float, np.number)
    if isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for key in a:
            same(a[key], b[key], f"{what}.{key}", rtol, atol)
    elif isinstance(a, np.ndarray) and a.dtype.kind in "biuf" or isinstance(a, float) or (
            isinstance(a, (list, tuple)) and a and all(isinstance(v, numbers) for v in a)):
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol,
                                   atol=atol, err_msg=what)
    elif isinstance(a, (list, tuple, np.ndarray)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]", rtol, atol)
    else:
        assert a == b, what


def drop_timings(data):
    if isinstance(data, dict):
        return {k: drop_timings(v) for k, v in data.items() if "timing" not in k and not k.endswith("_ms")}
    return data


def lab_data(lm: LoadedModel) -> dict:
    prompt = PROMPTS[lm.path.name]
    plain = generate_all(lm, prompt, CFG)
    mean = analysis.mean_ablation(lm, prompt, 0, head=0)
    mean_mlp = analysis.mean_ablation(lm, prompt, 1, component="mlp")
    edited = generate_all(lm, prompt, CFG.replace(interventions=edits(lm) + (mean, mean_mlp)))
    vector = analysis.contrast_vector(lm, "good kind", "bad cruel", 1)
    steered = generate_all(lm, prompt, CFG.replace(interventions=(vector.steer(3.0),)))
    patch = steering.patch_from_run(lm, plain, 3, 1)
    patched = generate_all(lm, prompt, CFG.replace(interventions=(patch,)))
    return {
        "plain": plain.token_ids, "edited": edited.token_ids, "steered": steered.token_ids,
        "patched": patched.token_ids, "mean": mean.mean, "mean mlp": mean_mlp.mean,
        "why plain": analysis.attribute_step(lm, plain, 3, versus="runner-up").to_dict(),
        "why edited": analysis.attribute_step(lm, edited, 3).to_dict(),
        "why steered": analysis.attribute_step(lm, steered, 3).to_dict(),
        "why patched": analysis.attribute_step(lm, patched, 3, versus="runner-up").to_dict(),
        "divergence": analysis.divergence_of_runs(lm, plain, edited).to_dict(),
        "divergence steered": analysis.divergence_of_runs(lm, plain, steered).to_dict(),
        "sweep": analysis.sweep_step(lm, edited, 2, 1).to_dict(),
        "vector": vector.to_dict(), "token vector": analysis.token_vector(lm, 5, 0, prompt).to_dict(),
        "run vector": analysis.run_vector(lm, edited, 2, 1).to_dict(),
        "edited steps": analysis.attention_steps(lm, edited, 2, 1, 1, "self"),
    }


def analysis_data(lm: LoadedModel) -> dict:
    """What the lessons compute, called as the analyses (no app core): one recorded run, every analysis."""
    result = generate_all(lm, PROMPTS[lm.path.name], CFG)
    cache = analysis.RunCache(lm, result)
    kinds = ["self", "cross", "encoder"] if lm.kind == "seq2seq" else ["self"]
    out = {
        "tokens": result.token_ids,
        "steps": [analysis.attention_steps(lm, result, 2, 1, 1, k, cache=cache) for k in kinds],
        "lens": analysis.logit_lens(lm, result, 2, cache=cache),
        "ranks": analysis.logit_lens_ranks(lm, result, [0, 2, 4], cache=cache),
        "kv": analysis.run_lesson(lm, result, 2),
        "patterns": [analysis.attention_patterns(lm, 16),
                     analysis.own_pattern_weights(lm, result, 1, 1, "self", cache=cache)],
        "anatomy": [analysis.anatomy(lm), analysis.residual_norms(result)],
        "positional": [analysis.positional_data(lm, 24), analysis.pe_schemes(lm, 24)],
        "training": analysis.training_view(lm),
        "kv timing": analysis.time_cache(lm, PROMPTS[lm.path.name], 3, repeats=1, warmup=0)["same_tokens"],
    }
    if lm.kind == "decoder":
        out["rope"] = analysis.rope_shift_scores(lm, result, 3, 1, 1, cache=cache)
    return out
