"""Honest numbers on the page: every timing comparison is a few interleaved repeats with their spread, and says
when the difference is inside the noise or the machine was busy (issue 36, point 4: one unrepeated measurement
showed a prefill *with* the KV cache 2× slower than without)."""

from __future__ import annotations

import threading

import pytest

import playground
from playground.analysis import sdpa
from playground.app import cache_rerun, measurements, noise
from playground.app import lessons as app_lessons
from playground.app.panels import cache
from playground.app.serving import Server
from playground.app.words import t
from playground.generation import GenerationConfig
from playground.viz import kv_lesson
from tests.hf_tiny import llama_like, save_decoder


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_decoder(directory, "llama", llama_like(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                                num_key_value_heads=2, vocab_size=112, max_position_embeddings=512),
                 init_std=0.1)
    return playground.load_model(directory)


def test_repeats_alternate_their_order_so_drift_hits_both_sides():
    assert [name for _, name in noise.turns(["a", "b"], 4)] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [r for r, _ in noise.turns(["a", "b"], 3)] == [0, 0, 1, 1, 2, 2]


def test_overlapping_ranges_are_called_noise_and_separate_ones_measured():
    slow, fast, near = noise.spread([10.0, 11.0, 12.5]), noise.spread([5.0, 5.5, 6.0]), noise.spread([9.0, 10.5, 11])
    assert slow == {"median": 11.0, "min": 10.0, "max": 12.5, "n": 3}
    assert noise.verdict(slow, near, None, "en") == t("noise_overlap", "en", n=3)
    assert noise.verdict(slow, fast, None, "en") == t("noise_clear", "en", n=3)
    busy = {"load": 5.2, "cores": 2.0}
    assert noise.verdict(slow, fast, busy, "zh").endswith(t("noise_busy", "zh", load=5.2, cores=2))
    assert "5.2" in t("noise_busy", "en", load=5.2, cores=2) and not noise.busy({"load": 1.5, "cores": 2.0})


def test_the_cache_rerun_times_each_mode_three_times_interleaved(lm):
    cfg = GenerationConfig(max_new_tokens=12, top_candidates=0)
    items = list(Server(call=lambda fn: fn()).jobs(cache_rerun.rerun_work(lm, list(range(5, 60)), cfg, [], 12),
                                                   threading.Event(), "a"))
    result = items[-1]
    # a run's progress counts its steps after those of the earlier repeats: (mode, repeat) names each timed run
    runs = list(dict.fromkeys((i.stage, (max(i.done, 1) - 1) // 12) for i in items[:-1] if i.stage != "warmup"))
    assert runs == [("cached", 0), ("uncached", 0), ("uncached", 1), ("cached", 1), ("cached", 2), ("uncached", 2)]
    assert items[-2].total == 3 * 12
    for mode in ("cached", "uncached"):
        for key, s in result.spreads[mode].items():
            assert s["n"] == 3 and s["min"] <= s["median"] <= s["max"]
            assert getattr(result, mode)[key] == s["median"]
    assert set(result.load) == {"load", "cores"} and result.same_tokens


def _result(prefill_c, prefill_u, decode_c, decode_u, load=1.0):
    def mode(prefill, decode):
        return {"prefill_ms": noise.spread(prefill), "decode_ms_per_token": noise.spread(decode),
                "tokens_per_s": noise.spread([100.0] * 3), "total_ms": noise.spread([50.0] * 3)}
    spreads = {"cached": mode(prefill_c, decode_c), "uncached": mode(prefill_u, decode_u)}
    median = {m: {k: s["median"] for k, s in keys.items()} for m, keys in spreads.items()}
    return cache_rerun.RerunResult(median["cached"], median["uncached"], spreads, {"load": load, "cores": 2.0},
                                   12, 12, True, 1.0, 1.0, 0.05)


def test_the_cache_tab_says_a_prefill_difference_inside_the_noise_and_draws_the_ranges():
    """The prefill ranges overlap (the 2× of one measurement was noise), the decode ranges do not."""
    slots = cache.rerun_slots(_result([4.0, 9.0, 5.0], [4.5, 4.0, 5.5], [2.0, 2.1, 2.2], [6.0, 6.5, 7.0]), "en")
    words = slots["compare_md"].value
    assert t("rerun_spread_prefill", "en", c=5.0, c_lo=4.0, c_hi=9.0, u=4.5, u_lo=4.0, u_hi=5.5) in words
    assert words.count(t("noise_overlap", "en", n=3)) == 1 and words.count(t("noise_clear", "en", n=3)) == 1
    assert t("noise_busy", "en", load=1.0, cores=2) not in words
    fig = slots["compare"].changes["value"]
    bars = [tr for tr in fig.data if tr.type == "bar" and len(tr.x) == 2]
    assert list(bars[0].error_y.array) == pytest.approx([4.0, 0.1]) and list(bars[0].error_y.arrayminus) == \
        pytest.approx([1.0, 0.1])
    busy = cache.rerun_slots(_result([4.0] * 3, [4.0] * 3, [2.0] * 3, [6.0] * 3, load=3.5), "zh")["compare_md"].value
    assert t("noise_busy", "zh", load=3.5, cores=2) in busy


def test_sdpa_times_its_two_paths_interleaved():
    """Both attention paths take turns at each length (A B, B A, A B), not all of one path and then the other."""
    order = []
    spans = sdpa._interleaved_ms((lambda: order.append("sdpa"), lambda: order.append("explicit")), 3, lambda: None)
    assert order == ["sdpa", "explicit", "explicit", "sdpa", "sdpa", "explicit"]
    assert all(lo <= med <= hi for med, lo, hi in spans)


def test_time_the_cache_and_the_sdpa_measure_say_when_they_are_inside_the_noise():
    lm = playground.load_model("weights/tiny-lm")
    timing = list(measurements.time_cache_work(lm, [5, 6, 7, 8], 4, 3))[-1]
    c, u = timing["cached"]["decode_ms"], timing["uncached"]["decode_ms"]
    assert c["n"] == u["n"] == 3 and set(timing["load"]) == {"load", "cores"}
    words = app_lessons.cache_timing_words(timing, "en")
    assert words.startswith(kv_lesson.cache_timing_caption(timing, lang="en"))
    assert words.endswith(noise.verdict(c, u, timing["load"], "en"))
    data = list(measurements.sdpa_work(lm, (32, 64), memory=False))[-1]
    rows = [{**r, "sdpa_ms_min": 1.0, "sdpa_ms_max": 2.0, "explicit_ms_min": 1.5 + 2 * i, "explicit_ms_max": 4.0}
            for i, r in enumerate(data["rows"])]  # 32 overlaps, 64 does not
    quiet = {**data, "rows": rows, "load": {"load": 0.5, "cores": 2.0}}
    assert app_lessons.sdpa_words(quiet, "en").endswith(t("sdpa_noise_overlap", "en", n=3, lengths="32"))
    apart = [{**r, "explicit_ms_min": 3.0} for r in rows]
    busy = app_lessons.sdpa_words({**quiet, "rows": apart, "load": {"load": 4.0, "cores": 2.0}}, "zh")
    assert busy.endswith(t("noise_clear", "zh", n=3) + t("noise_busy", "zh", load=4.0, cores=2))
