"""The lessons' measurements on demand are bounded by the model and run as sliced jobs (round 4, row 3:
"Measure SDPA vs explicit" on a 256-head upload allocated 2 GiB at a fixed 1,024 positions)."""

from __future__ import annotations

import dataclasses
import threading

import pytest

import playground
from playground.app import measurements
from playground.app.jobs import Progress
from playground.app.serving import Server


@pytest.fixture(scope="module")
def lm():
    return playground.load_model("weights/tiny-lm")


def with_config(lm, **fields):
    return dataclasses.replace(lm, config=dataclasses.replace(lm.config, **fields))


def test_sdpa_lengths_follow_the_model_not_a_fixed_size(lm):
    assert measurements.sdpa_lengths(lm) == (128,)  # tiny-lm holds 128 positions
    wide = with_config(lm, max_positions=4096)
    assert measurements.sdpa_lengths(wide) == (128, 256, 512, 1024)
    many = with_config(lm, max_positions=4096, n_heads=256, n_kv_heads=256)
    lengths = measurements.sdpa_lengths(many)
    assert lengths == (128, 256)  # 2 · 256 · 512² · 4 bytes = 512 MiB would pass the budget
    assert all(measurements.explicit_bytes(256, T) <= measurements.SDPA_BYTES for T in lengths)
    assert measurements.explicit_bytes(256, 512) > measurements.SDPA_BYTES
    absurd = with_config(lm, max_positions=4096, n_heads=2**20, n_kv_heads=2**20)
    assert measurements.sdpa_lengths(absurd) == ()


def test_sdpa_job_measures_one_length_a_slice(lm):
    items = list(Server(call=lambda fn: fn()).jobs(measurements.sdpa_work(lm, (32, 64), memory=False),
                                                     threading.Event(), "a"))
    assert items[:2] == [Progress("lengths", 1, 2), Progress("lengths", 2, 2)]
    data = items[-1]
    assert [r["length"] for r in data["rows"]] == [32, 64] and data["memory_method"] == "analytic"
    assert all(r["max_abs_diff"] < 1e-5 and r["sdpa_ms"] > 0 for r in data["rows"])


def test_kv_timing_shrinks_to_its_budget(lm):
    assert measurements.time_cache_shape(lm, 20, 30) == (30, 5)
    assert measurements.time_cache_shape(lm, 20, 100) == (48, 5)
    assert measurements.time_cache_shape(lm, 20, 2) == (8, 5)
    assert measurements.time_cache_shape(lm, 100, 48, cap=5e9) == (2, 3)  # 24, 12, 6, 3, 2 tokens; then 3 repeats
    cached, uncached = measurements._step_flops(lm, 100, 2)
    assert 4 * float((cached + uncached).sum()) <= 5e9 < 6 * float((cached + uncached).sum())  # warm-up + repeats
    assert measurements.time_cache_shape(lm, 100, 48, cap=1e6) is None


def test_kv_timing_job_is_one_run_a_slice(lm):
    items = list(Server(call=lambda fn: fn()).jobs(measurements.time_cache_work(lm, [5, 6, 7, 8], 4, 1),
                                                     threading.Event(), "a"))
    assert [i.done for i in items[:-1]] == [1, 2, 3, 4]  # warm-up with and without the cache, then one pair
    result = items[-1]
    assert result["repeats"] == 1 and result["max_new_tokens"] == 4 and result["same_tokens"]
