"""The KV-cache lesson: memory formula and what-if (the worked examples' numbers, the live cache's bytes), FLOP and
byte counts per step against hand-computed values, prefill vs decode shapes, the timed comparison."""

from __future__ import annotations

import numpy as np
import pytest

from playground.analysis import (
    kv_memory,
    kv_step_costs,
    kv_what_if,
    prefill_decode_shapes,
    presets,
    run_lesson,
    time_cache,
)
from playground.analysis.kv_memory import WORKED_EXAMPLES
from playground.config import ModelConfig
from playground.viz.kv_lesson import (
    cache_timing_caption,
    cache_timing_figure,
    kv_cost_caption,
    kv_cost_chart,
    kv_memory_caption,
    kv_memory_chart,
    prefill_decode_caption,
    prefill_decode_figure,
)
from tests.analysis_models import FAMILIES, load

pytestmark = pytest.mark.usefixtures("one_thread")


# --- memory -----------------------------------------------------------------------------------------


def test_formula_reproduces_the_worked_examples():
    # 2 · 32 · 1 · 32 · 8192 · 128 · 2 and 2 · 80 · 1 · 8 · 8192 · 128 · 2 bytes; the examples' GB are 10⁹ bytes.
    assert kv_memory(32, 1, 32, 8192, 128, 2) == 4_294_967_296
    assert kv_memory(80, 1, 8, 8192, 128, 2) == 2_684_354_560
    mha, gqa = (kv_what_if(p) for p in WORKED_EXAMPLES.values())
    assert (mha["bytes"], round(mha["gb"], 1), mha["expected_gb"]) == (4_294_967_296, 4.3, 4.3)
    assert (gqa["bytes"], round(gqa["gb"], 1), gqa["expected_gb"]) == (2_684_354_560, 2.7, 2.7)
    assert mha["gib"] == 4.0 and gqa["attention"] == "GQA" and gqa["kv_heads"] == 8
    assert "The worked example this preset comes from gives 4.3 GB: reproduced" in kv_memory_caption(mha)


def test_what_if_knobs():
    preset = WORKED_EXAMPLES["LLaMA 3 70B, GQA-8, 8k tokens"]
    base = kv_what_if(preset)["bytes"]
    assert kv_what_if(preset, attention="MHA")["bytes"] == base * 8  # 64 KV heads instead of 8
    assert kv_what_if(preset, attention="MQA")["bytes"] == base // 8
    assert kv_what_if(preset, attention="GQA", kv_heads=16)["bytes"] == base * 2
    assert kv_what_if(preset, dtype="fp32")["bytes"] == base * 2
    assert kv_what_if(preset, dtype="fp8")["bytes"] == base // 2
    assert kv_what_if(preset, dtype="int4")["bytes"] == base // 4  # half a byte per element, exact
    assert kv_what_if(preset, batch=4, tokens=131_072)["bytes"] == base * 4 * 16
    w = kv_what_if(preset)
    assert w["variants"] == {"MHA": base * 8, "GQA": base, "MQA": base // 8}
    assert w["curve"]["tokens"][0] == 1 and w["curve"]["tokens"][-1] == 131_072
    expected = [kv_memory(80, 1, 8, int(t), 128, 2) for t in w["curve"]["tokens"]]
    np.testing.assert_array_equal(w["curve"]["GQA"], expected)
    with pytest.raises(ValueError, match="tokens"):
        kv_what_if(preset, tokens=131_073)
    with pytest.raises(ValueError, match="divides"):
        kv_what_if(preset, attention="GQA", kv_heads=0)
    with pytest.raises(ValueError, match="layers"):
        kv_memory(0, 1, 1, 1, 1, 2)


@pytest.fixture(scope="module", params=FAMILIES)
def run(request, recorded_runs):
    return recorded_runs(request.param)


def test_formula_equals_the_live_cache_bytes(run):
    name, lm, result = run
    for event in result.steps:
        c = event.cache
        formula = kv_memory(c["layers"], c["batch"], c["kv_heads"], c["tokens"], c["head_dim"], c["element_size"])
        assert formula == c["bytes"]
    first = next(iter(presets(lm).values()))
    assert (first["layers"], first["kv_heads"], first["head_dim"]) == (lm.config.n_layers, lm.config.n_kv_heads,
                                                                       lm.config.head_dim)
    w = kv_what_if(first, tokens=result.cache["tokens"], live=result.cache)
    assert w["live"]["bytes"] == w["live"]["formula_bytes"] == w["bytes"] == result.cache["bytes"]
    fig = kv_memory_chart(w, "this model")
    assert [t.name for t in fig.data][-1] == "this run (real cache)"


# --- FLOPs and bytes per step -------------------------------------------------------------------------


def _tiny_decoder() -> ModelConfig:
    return ModelConfig(family="llama", vocab_size=100, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)


def test_step_costs_match_hand_computed_values_decoder():
    c = _tiny_decoder()  # head_dim 8
    costs = kv_step_costs(c, prompt_len=3, new_tokens=4, element_size=4)
    # Keys per step: the prefill sees the 3 prompt tokens, then 4, 5, 6 (T + 1).
    assert costs["keys"].tolist() == [3, 4, 5, 6]
    # One (query, key) pair in all layers: 4 · h · d_h · N = 4 · 4 · 8 · 2 = 256 FLOPs (Q·Kᵀ and A·V).
    assert costs["attention_flops_cached"].tolist() == [256 * 9, 256 * 4, 256 * 5, 256 * 6]
    assert costs["attention_flops_uncached"].tolist() == [256 * 9, 256 * 16, 256 * 25, 256 * 36]
    # Linear layers per token: qkv 2·32·64 = 4096, W_O 2·32·32 = 2048, SwiGLU 6·32·64 = 12288 -> 18432 per
    # layer, 36864 for both; the head 2·32·100 = 6400 once per step.
    assert costs["linear_flops_cached"].tolist() == [36864 * 3 + 6400] + [36864 + 6400] * 3
    assert costs["linear_flops_uncached"].tolist() == [36864 * n + 6400 for n in (3, 4, 5, 6)]
    # K/V read with the cache: 2 · N · B · h_kv · d_h · s = 2·2·1·2·8·4 = 256 bytes per key.
    assert costs["kv_bytes_read_cached"].tolist() == [0, 1024, 1280, 1536]
    # Weights read per step: (18432 + 3200) parameters · 4 bytes.
    assert costs["weight_bytes"].tolist() == [86528] * 4
    np.testing.assert_array_equal(costs["total_flops_uncached"],
                                  costs["attention_flops_uncached"] + costs["linear_flops_uncached"])


def test_step_costs_match_hand_computed_values_seq2seq():
    c = ModelConfig(family="transformer", kind="seq2seq", vocab_size=50, d_model=16, n_layers=1, n_encoder_layers=1,
                    n_heads=2, d_ff=32, mlp="plain", activation="relu", positional="sinusoidal")
    costs = kv_step_costs(c, prompt_len=1, new_tokens=3, element_size=4, source_len=5)
    # Self pair: 4·2·8 = 64; cross: 64 per query per source token (5).
    assert costs["attention_flops_cached"].tolist() == [64 + 320, 128 + 320, 192 + 320]
    assert costs["attention_flops_uncached"].tolist() == [64 + 320, 256 + 640, 576 + 960]
    # Per layer: qkv 1536 + W_O 512 + MLP 2048 + cross q and W_O 1024 = 5120; head 1600; the source's cross
    # K/V (2·16·32 = 1024 per source token, 5120 for 5) once with the cache, every step without.
    assert costs["linear_flops_cached"].tolist() == [5120 + 1600 + 5120, 5120 + 1600, 5120 + 1600]
    assert costs["linear_flops_uncached"].tolist() == [5120 * n + 1600 + 5120 for n in (1, 2, 3)]
    # Self K/V 128 bytes per key, plus the cross K/V of 5 source tokens (640 bytes).
    assert costs["kv_bytes_read_cached"].tolist() == [0, 256 + 640, 384 + 640]


def test_prefill_and_decode_shapes():
    s = prefill_decode_shapes(_tiny_decoder(), prompt_len=7, step=5)
    assert s["T"] == 11 and s["prefill"]["scores_shape"] == (1, 4, 7, 7)
    assert s["decode"]["scores_shape"] == (1, 4, 1, 12) and s["decode"]["k_shape"] == (1, 2, 12, 8)
    assert s["decode"]["flops_per_layer"] == 4 * 4 * 8 * 12
    fig = prefill_decode_figure(s)
    assert np.asarray(fig.data[0].z).shape == (7, 7) and np.asarray(fig.data[1].z).shape == (1, 12)
    assert "7 × 7" in fig.layout.annotations[0].text and "1 × 12" in fig.layout.annotations[1].text
    assert "T + 1 = 12" in prefill_decode_caption(s)


def test_run_lesson_uses_the_runs_lengths(run):
    name, lm, result = run
    lesson = run_lesson(lm, result, 3)
    assert lesson["cache"] == result.steps[3].cache
    assert lesson["shapes"]["decode"]["keys"] == len(result.decoder_prefix) + 3
    if lm.kind == "seq2seq":
        assert lesson["shapes"]["encoder"]["keys"] == len(result.prompt_ids)
    # With the cache, step t's attention reads exactly the K/V the engine holds after writing the new token.
    assert lesson["costs"]["kv_bytes_read_cached"][3] == result.steps[3].cache["bytes"] + (
        result.steps[3].cache["cross_attention"]["bytes"] if lm.kind == "seq2seq" else 0)
    fig = kv_cost_chart(lesson["costs"])
    assert len(fig.data) == 6 and "keys" in kv_cost_caption(lesson["costs"])


# --- measured -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-lm", "tiny-seq2seq"])
def test_timed_comparison_reports_medians_spread_and_a_verdict(name, tmp_path_factory):
    lm = load(name, tmp_path_factory.mktemp("timed"))
    t = time_cache(lm, "The import" if name == "tiny-lm" else "May 1, 2020", 6, repeats=2)
    assert t["same_tokens"] and len(t["keys"]) == 6
    assert t["verdict"] in ("cache_wins", "overhead_dominates", "cache_slower")
    for mode in ("cached", "uncached"):
        d = t[mode]["decode_ms"]
        assert d["n"] == 2 and 0 < d["min"] <= d["median"] <= d["max"]
        assert t[mode]["step_ms"].shape == (6,) and set(t[mode]["fit"]) == {"fixed_ms", "per_key_ms"}
    assert t["speedup"] == pytest.approx(t["uncached"]["decode_ms"]["median"] / t["cached"]["decode_ms"]["median"])
    assert t["flops_last_step"]["keys"] == t["keys"][-1]
    text = cache_timing_caption(t)
    assert f"{t['speedup']:.2f}×" in text and "ms" in text
    assert len(cache_timing_figure(t).data) == 4


def test_verdict_explains_overhead_with_the_numbers():
    """The caption for a tiny model whose cache does not pay: it names the fixed cost and the saved work."""
    timing = {
        "keys": [4, 5, 6, 7], "repeats": 5, "parameters": 2_016_960, "speedup": 0.47, "verdict": "cache_slower",
        "crossover_keys": 900.0, "context_limit": 128,
        "cached": {"decode_ms": {"median": 2.0, "min": 1.9, "max": 2.4}, "fit": {"fixed_ms": 1.9, "per_key_ms": 0.001},
                   "step_ms": np.array([3.0, 2.0, 2.0, 2.0])},
        "uncached": {"decode_ms": {"median": 0.94, "min": 0.9, "max": 1.1},
                     "fit": {"fixed_ms": 0.9, "per_key_ms": 0.002},
                     "step_ms": np.array([3.0, 0.9, 0.9, 0.9])},
        "flops_last_step": {"keys": 7, "attention_cached": 1000, "attention_uncached": 7000},
    }
    text = cache_timing_caption(timing)
    assert "slower here: 0.47×" in text and "1.90 ms" in text and "2.0M parameters" in text
    assert "≈900 keys" in text and "at most 128 positions" in text
