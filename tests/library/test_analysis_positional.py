"""Positional encodings: the model's own scheme over the positions shown, compared bases, RoPE's relative
property on the model's real q and k, and the seeds' schemes side by side."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from playground.analysis import RunCache, attention_steps, pe_schemes, positional_data, rope_shift_scores
from playground.analysis.positional import alibi_slopes
from playground.models.positional import rope_inverse_frequencies, sinusoidal_table
from playground.viz import rope_score_curve
from playground.viz.positional_compare import (
    pe_schemes_caption,
    pe_schemes_figure,
    rope_base_caption,
    rope_base_comparison,
    rope_shift_caption,
    rope_shift_figure,
)
from tests.analysis_models import load, record

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    return {name: load(name, tmp) for name in ("tiny-lm", "tiny-seq2seq", "gpt2", "t5", "bart")}


def test_rope_compare_base_and_positions_drive_every_curve(models):
    lm = models["tiny-lm"]
    data = positional_data(lm, 100, compare_base=500.0)
    assert data["scheme"] == "rope" and data["length"] == 100 and data["context"] == 128
    np.testing.assert_allclose(data["inv_freq"], rope_inverse_frequencies(lm.config).double().numpy())
    expected = 500.0 ** (-np.arange(0, 48, 2) / 48)
    np.testing.assert_allclose(data["compare_inv_freq"], expected, rtol=1e-6)
    assert data["distances"].tolist() == list(range(100))  # "Positions shown" sets the decay plot's range
    np.testing.assert_allclose(data["decay"], rope_score_curve(data["inv_freq"], data["distances"]))
    # The model computes θ in float32, hence the tolerance against this float64 reference.
    np.testing.assert_allclose(data["compare_decay"], rope_score_curve(expected, data["distances"]), atol=1e-4)
    assert not np.allclose(data["decay"], data["compare_decay"])
    same = positional_data(lm, 100, compare_base=lm.config.rope_theta)
    np.testing.assert_allclose(same["compare_decay"], same["decay"])
    assert positional_data(lm, 5000)["length"] == 128  # clipped to the model's positions
    fig = rope_base_comparison(data)
    assert len(fig.data) == 4 and list(fig.data[1].x) == list(range(100))
    assert "base 500" in rope_base_caption(data)


def test_other_schemes_come_from_the_models_own_tables(models):
    s = positional_data(models["tiny-seq2seq"], 40, compare_base=300.0)
    c = models["tiny-seq2seq"].config
    np.testing.assert_allclose(s["table"], sinusoidal_table(40, c.d_model, c.sinusoidal_base, c.sinusoidal_layout))
    np.testing.assert_allclose(s["compare_table"], sinusoidal_table(40, c.d_model, 300.0, c.sinusoidal_layout))
    for name, offset in (("gpt2", 0), ("bart", 2)):
        lm = models[name]
        learned = positional_data(lm, 20)
        table = next(m for n, m in lm.model.named_modules() if "position" in n and hasattr(m, "weight")).weight
        np.testing.assert_array_equal(learned["table"], table[offset:offset + 20].detach().numpy())
    rel = positional_data(models["t5"], 10)
    assert rel["bias"].shape == (models["t5"].config.n_heads, 19) and rel["distances"].tolist() == list(range(-9, 10))


def test_rope_score_depends_only_on_the_distance_for_the_models_own_q_and_k(models):
    lm = models["tiny-lm"]
    result = record(lm, "tiny-lm", new_tokens=10)
    cache = RunCache(lm, result)
    for layer, head, key in ((0, 0, 0), (2, 3, 2), (3, 1, 5)):
        shift = rope_shift_scores(lm, result, 8, layer, head, key_position=key, cache=cache)
        assert shift["available"] and len(shift["shifts"]) >= 4 and max(shift["shifts"]) > 100
        m, n = shift["query_position"], shift["key_position"]
        assert all(b - a == n - m for a, b in shift["positions"])
        np.testing.assert_allclose(shift["scores"], shift["scores"][0], atol=1e-4)  # one score for every shift
        # At shift 0 it is the score the model computed for this pair (the scaled stage of attention_steps).
        steps = attention_steps(lm, result, 8, layer, head, cache=cache)
        assert shift["recorded_score"] == pytest.approx(steps["scaled"][0, n], abs=1e-6)
        assert shift["scores"][0] == pytest.approx(shift["recorded_score"], abs=1e-4)
        # Moving only the key changes n - m, and with it the score.
        assert shift["by_distance"][m - n] == pytest.approx(shift["recorded_score"], abs=1e-4)
        assert np.ptp(shift["by_distance"]) > 1e3 * max(shift["spread"], 1e-12)
    fig = rope_shift_figure(shift)
    assert len(fig.data) == 2 and "agree to" in rope_shift_caption(shift)


def test_rope_property_needs_rope(models):
    lm = models["tiny-seq2seq"]
    result = record(lm, "tiny-seq2seq", new_tokens=3)
    shift = rope_shift_scores(lm, result, 1, 0, 0)
    assert not shift["available"] and "sinusoidal" in shift["reason"]
    assert "does not use RoPE" in rope_shift_caption(shift)


def test_schemes_side_by_side_highlight_the_models_own(models):
    expected = {"tiny-lm": "rope", "tiny-seq2seq": "sinusoidal", "gpt2": "learned", "t5": "relative", "bart": "learned"}
    for name, own in expected.items():
        lm = models[name]
        schemes = pe_schemes(lm, 24)
        assert schemes["own"] == own and schemes["distances"].tolist() == list(range(24))
        for key, entry in schemes["schemes"].items():
            if key == own:
                assert entry["source"] == "model"
            elif key == "learned":
                assert entry["source"] == "unavailable" and entry["curves"].shape[0] == 0
            else:
                assert entry["source"] == "formula"
        assert schemes["schemes"]["sinusoidal"]["curves"][0, 0] == pytest.approx(1.0)
        assert schemes["schemes"]["rope"]["curves"][0, 0] == pytest.approx(1.0)
        np.testing.assert_allclose(schemes["schemes"]["alibi"]["curves"][:, 0], 0.0)
        fig = pe_schemes_figure(schemes)
        framed = [s for s in fig.layout.shapes if s.line.color == "#d62728"]
        assert len(framed) == 1
        assert "drawn from the model itself" in pe_schemes_caption(schemes)
    learned = pe_schemes(models["gpt2"], 24)["schemes"]["learned"]["curves"][0]
    assert learned[0] == pytest.approx(1.0)  # a row is fully similar to itself
    t5 = pe_schemes(models["t5"], 24)["schemes"]["relative"]
    assert t5["curves"].shape == (models["t5"].config.n_heads, 24)
    bias = models["t5"].model.decoder.relative_bias
    with torch.no_grad():
        first = bias(1, 1)[0, :, 0, 0].numpy()  # δ = 0: the bucket of a token attending to itself
    np.testing.assert_allclose(t5["curves"][:, 0], first, rtol=1e-6)


def test_alibi_slopes_follow_the_paper():
    np.testing.assert_allclose(alibi_slopes(4), [2**-2, 2**-4, 2**-6, 2**-8])
    np.testing.assert_allclose(alibi_slopes(8), [2 ** -(i + 1) for i in range(8)])
    six = alibi_slopes(6)  # not a power of two: 4 slopes of H=4, then every other one of H=8
    np.testing.assert_allclose(six, [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
