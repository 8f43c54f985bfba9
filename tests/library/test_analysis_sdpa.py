"""SDPA against the explicit softmax at the model's head sizes: both of our own code paths."""

from __future__ import annotations

import sys

import pytest

from playground.analysis import sdpa_vs_explicit
from playground.viz.sdpa import sdpa_caption, sdpa_figure, sdpa_table
from tests.analysis_models import load

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", ["tiny-lm", "tiny-seq2seq"])
def test_both_paths_agree_and_the_explicit_one_holds_the_score_matrix(name, tmp_path):
    lm = load(name, tmp_path)
    data = sdpa_vs_explicit(lm, (64, 512), repeats=2)
    c = lm.config
    assert (data["n_heads"], data["n_kv_heads"], data["head_dim"]) == (c.n_heads, c.n_kv_heads, c.head_dim)
    for row in data["rows"]:
        assert row["max_abs_diff"] < 1e-5
        assert row["score_bytes"] == c.n_heads * row["length"] ** 2 * 4
        assert 0 < row["sdpa_ms_min"] <= row["sdpa_ms"] <= row["sdpa_ms_max"]
    if sys.platform == "linux":
        assert data["memory_method"] == "measured"
        big = data["rows"][-1]
        # At T = 512 the explicit path's (h, T, T) scores are megabytes; SDPA stays near its output's size.
        assert big["explicit_peak_bytes"] >= big["score_bytes"]
        assert big["sdpa_peak_bytes"] < big["score_bytes"] / 4
    fig = sdpa_figure(data)
    assert {t.name for t in fig.data} >= {"SDPA (fused, block by block)", "explicit softmax(QKᵀ/√d)·V"}
    assert "Outputs agree" in sdpa_caption(data) and len(sdpa_table(data)) == 2


def test_without_memory_measurement_the_caption_says_it_is_computed(tmp_path):
    data = sdpa_vs_explicit(load("tiny-lm", tmp_path), (32,), repeats=1, memory=False)
    assert data["memory_method"] == "analytic" and data["rows"][0]["sdpa_peak_bytes"] is None
    assert "computed from the shapes" in sdpa_caption(data)
