"""Every analysis on the real SmolLM2-135M-Instruct (30 layers, GQA 9/3, RoPE base 1e5): one short run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import playground
from playground.analysis import (
    RunCache,
    anatomy,
    attention_patterns,
    attention_steps,
    kv_memory,
    kv_what_if,
    lens_logits,
    logit_lens,
    own_pattern_weights,
    pe_schemes,
    positional_data,
    presets,
    residual_norms,
    rope_shift_scores,
    run_lesson,
    sdpa_vs_explicit,
    training_view,
)
from playground.generation import GenerationConfig, generate_all
from tests.float32_bounds import assert_within, recompose_bound, weights_bound

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
LAYERS = (0, 14, 29)


@pytest.fixture(scope="module")
def run(smollm2_dir):
    lm = playground.load_model(smollm2_dir)
    cfg = GenerationConfig(max_new_tokens=12, chat=True, capture_residual=True, capture_attention=True,
                           attention_layers=LAYERS)
    result = generate_all(lm, "What is the capital of France?", cfg)
    return lm, result, RunCache(lm, result)


def test_attention_stages_recompose_and_match_the_live_steps(run):
    lm, result, cache = run
    for step in (0, 1, len(result.token_ids) - 1):
        for layer in LAYERS:
            live = result.path[step].capture.attention["self"][layer]
            for head in (0, 4, 8):  # three KV groups of three query heads
                s = attention_steps(lm, result, step, layer, head, cache=cache)
                where = f"step {step} layer {layer} head {head}"
                assert_within(s["attention_output"], s["recorded_output"], recompose_bound(lm, s), where)
                assert_within(s["weights"][-1], live[head], weights_bound(lm, s), where)
                assert s["kv_head"] == head // 3
    decode = attention_steps(lm, result, 5, 0, 0, cache=cache)
    assert decode["scores"].shape == (1, len(result.prompt_ids) + 5)


def test_logit_lens_last_layer_is_the_steps_own_logits(run):
    lm, result, cache = run
    for step in (0, 6, len(result.token_ids) - 1):
        logits = lens_logits(lm, result, step)
        assert logits.shape == (31, lm.config.vocab_size)
        cands = result.path[step].candidates
        # The lens computes the last row as the step did (same rows, same kernels): the same float32 numbers.
        np.testing.assert_array_equal(logits[-1, [c.token_id for c in cands]], np.float32([c.logit for c in cands]))
        entries = logit_lens(lm, result, step, cache=cache)
        assert len(entries) == 31 and entries[-1]["rank"] == 1
        assert entries[-1]["prob"] == pytest.approx(result.path[step].prob, abs=1e-5)
    # Against one teacher-forced pass over the same tokens (float32 sums in another order: 1e-3).
    ids = torch.tensor([result.prompt_ids + result.token_ids[:6]])
    np.testing.assert_allclose(lens_logits(lm, result, 6)[-1], lm.logits(ids)[0, -1].numpy(), atol=1e-3)


def test_kv_memory_equals_the_live_gqa_cache(run):
    lm, result, _ = run
    c = result.cache
    assert (c["layers"], c["kv_heads"], c["head_dim"]) == (30, 3, 64)
    assert kv_memory(30, 1, 3, c["tokens"], 64, 4) == c["bytes"]
    preset = next(iter(presets(lm).values()))
    w = kv_what_if(preset, tokens=c["tokens"], live=c)
    assert w["bytes"] == c["bytes"] and w["variants"]["MHA"] == 3 * c["bytes"]
    lesson = run_lesson(lm, result, 4)
    assert lesson["costs"]["kv_bytes_read_cached"][4] == result.steps[4].cache["bytes"]


def test_rope_relative_property_on_real_q_and_k(run):
    lm, result, cache = run
    data = positional_data(lm, 300, 10000.0)
    assert data["base"] == 100000.0 and data["decay"].shape == (300,)
    for layer in LAYERS:
        shift = rope_shift_scores(lm, result, 6, layer, 4, key_position=3, cache=cache)
        assert max(shift["shifts"]) > 4000
        np.testing.assert_allclose(shift["scores"], shift["scores"][0], atol=1e-4)
        assert shift["scores"][0] == pytest.approx(shift["recorded_score"], abs=1e-4)


def test_anatomy_patterns_and_the_rest(run):
    lm, result, cache = run
    a = anatomy(lm)
    assert a["parameters"] == lm.parameter_count and a["stacks"][0]["layers"] == 30 and a["head"]["note"] == "tied"
    norms = residual_norms(result)
    assert norms["norms"].shape == (31, len(result.token_ids))
    own = own_pattern_weights(lm, result, 14, 2, cache=cache)
    assert own["hidden_mass"] == 0.0 and own["weights"].shape[0] == len(result.prompt_ids) + len(result.token_ids)
    g = attention_patterns(lm, 64)
    assert [p["key"] for p in g["patterns"] if p["own"]] == ["causal"]
    assert pe_schemes(lm, 64)["schemes"]["rope"]["source"] == "model"
    sd = sdpa_vs_explicit(lm, (128,), repeats=1, memory=False)
    assert sd["rows"][0]["max_abs_diff"] < 1e-5 and (sd["n_heads"], sd["n_kv_heads"], sd["head_dim"]) == (9, 3, 64)
    assert training_view(lm)["available"] is False
