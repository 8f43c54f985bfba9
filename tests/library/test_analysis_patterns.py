"""Attention patterns (seed 004): the masks, their cost against full attention, and the model's real
weights under its own mask."""

from __future__ import annotations

import numpy as np
import pytest

from playground.analysis import RunCache, attention_patterns, own_pattern_weights
from playground.analysis.patterns import pattern_masks
from playground.generation import full_attention
from playground.viz.patterns import (
    own_weights_caption,
    own_weights_figure,
    pattern_gallery_caption,
    pattern_gallery_figure,
)
from tests.analysis_models import FAMILIES

pytestmark = pytest.mark.usefixtures("one_thread")


def test_masks_follow_their_definitions():
    T = 12
    m = pattern_masks(T, window=3, global_tokens=2, stride=4, dilation=2, real_length=9)
    i, j = np.indices((T, T))
    assert m["full"].all() and (m["causal"] == (j <= i)).all()
    assert (m["sliding_window"] == ((j <= i) & (j > i - 3))).all()
    assert m["sliding_window"].sum() == 3 * T - 3  # T·w minus the first rows' missing keys (0 + 1 + 2... ) = 36 − 3
    assert m["local_global"][11].tolist() == [True, True] + [False] * 7 + [True] * 3  # globals 0, 1 and the window
    assert np.flatnonzero(m["strided"][11]).tolist() == [3, 7, 8, 9, 10, 11]  # every 4th back, and the last 4
    assert np.flatnonzero(m["dilated"][11]).tolist() == [7, 9, 11]  # every 2nd within 3 · 2 = 6
    assert m["padding"][:9, :9].sum() == 45 and not m["padding"][9:].any() and not m["padding"][:, 9:].any()


@pytest.fixture(scope="module", params=FAMILIES + ("mistral",))
def run(request, recorded_runs):
    return recorded_runs(request.param)


def test_gallery_costs_and_the_models_own_mask(run):
    name, lm, result = run
    g = attention_patterns(lm, 16)
    by = {p["key"]: p for p in g["patterns"]}
    assert by["full"]["cells"] == 256 and by["causal"]["cells"] == 136 and by["causal"]["fraction_of_causal"] == 1
    for p in g["patterns"]:
        assert p["cells"] == int(p["mask"].sum()) and p["fraction_of_full"] == p["cells"] / 256
        assert p["flops_per_layer"] == 4 * lm.config.n_heads * lm.config.head_dim * p["cells"]
    own = {p["key"]: p["own"] for p in g["patterns"] if p["own"]}
    if name == "mistral":
        assert own == {"sliding_window": "self"} and g["window"] == 4 and g["window_is_models"]
    elif lm.kind == "seq2seq":
        assert own == {"full": "encoder", "causal": "self"}
    else:
        assert own == {"causal": "self"} and not g["window_is_models"]
    fig = pattern_gallery_figure(g)
    assert len(fig.data) == len(g["patterns"]) and sum(1 for s in fig.layout.shapes) == len(own)
    assert "★" in pattern_gallery_caption(g)


def test_real_weights_under_the_models_own_mask(run):
    name, lm, result = run
    cache = RunCache(lm, result)
    kinds = ("self",) if lm.kind == "decoder" else ("self", "encoder")
    maps = full_attention(lm, result.prompt_ids, result.token_ids, layers=[0])
    for kind in kinds:
        w = own_pattern_weights(lm, result, 0, 1, kind, cache=cache)
        np.testing.assert_allclose(w["weights"], maps[kind][0, 1], atol=1e-5)  # what the model computes
        assert w["hidden_mass"] == 0.0
        np.testing.assert_allclose(w["weights"].sum(axis=1), 1.0, atol=1e-9)
        if kind == "self":
            window = lm.config.sliding_window
            T = w["mask"].shape[0]
            i, j = np.indices((T, T))
            expected = (j <= i) & ((j > i - window) if window else True)
            assert (w["mask"] == expected).all()
        fig = own_weights_figure(w)
        assert np.isnan(np.asarray(fig.data[0].z, dtype=float)[~w["mask"]]).all()
        assert "hidden cells carry 0" in own_weights_caption(w)
