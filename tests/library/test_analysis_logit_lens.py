"""Logit lens: the last layer is the model's own next-token distribution; the other layers go through
the same final norm and head."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from playground.analysis import RunCache, lens_logits, logit_lens, logit_lens_ranks, strip_steps
from playground.generation import GenerationConfig, generate_all
from playground.viz.logit_lens import lens_rank_strip, logit_lens_caption, logit_lens_figure
from tests.analysis_models import FAMILIES, load, record

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=FAMILIES)
def run(request, recorded_runs):
    return recorded_runs(request.param)


def _model_logits(lm, result, step: int) -> np.ndarray:
    """The model's logits for the token chosen at `step`, from one plain teacher-forced forward pass."""
    stream = list(result.decoder_prefix) + list(result.token_ids[:step])
    if lm.kind == "decoder":
        return lm.logits(torch.tensor([stream]))[0, -1].numpy()
    return lm.logits(torch.tensor([result.prompt_ids]), torch.tensor([stream]))[0, -1].numpy()


def test_last_layer_is_the_models_own_distribution(run):
    name, lm, result = run
    for step in range(len(result.token_ids)):
        logits = lens_logits(lm, result, step)
        assert logits.shape == (lm.config.n_layers + 1, lm.config.vocab_size)
        np.testing.assert_allclose(logits[-1], _model_logits(lm, result, step), atol=1e-5, rtol=1e-5)
        entries = logit_lens(lm, result, step, top_k=5)
        last = entries[-1]
        probs = torch.softmax(torch.from_numpy(_model_logits(lm, result, step)).double(), -1)
        top = torch.topk(probs, 5)
        assert last["token_ids"] == top.indices.tolist()
        np.testing.assert_allclose(last["probs"], top.values.numpy(), atol=1e-5)
        # Greedy: the step chose the top token with exactly this probability, except where the pipeline
        # forced a token (BART forces end-of-text at the last position), which the lens ranks honestly.
        forced = lm.config.forced_eos_token_id is not None and step == len(result.token_ids) - 1
        if forced:
            assert result.token_ids[step] == lm.config.forced_eos_token_id
            assert last["prob"] == pytest.approx(float(probs[result.token_ids[step]]), abs=1e-6)
        else:
            assert last["rank"] == 1 and last["token_ids"][0] == result.token_ids[step]
            assert last["prob"] == pytest.approx(result.path[step].prob, abs=1e-5)


def test_every_layer_goes_through_the_final_norm_and_head(run):
    name, lm, result = run
    step = 3
    residual = torch.from_numpy(result.path[step].capture.residual)
    with torch.inference_mode():
        expected = lm.model.unembed(residual[None])[0].numpy()
    lens = lens_logits(lm, result, step)
    np.testing.assert_allclose(lens[:-1], expected[:-1], atol=1e-6)
    np.testing.assert_allclose(lens[-1], expected[-1], atol=1e-5)  # computed alone, as the step computed it
    entries = logit_lens(lm, result, step, top_k=3)
    assert [e["layer"] for e in entries] == list(range(lm.config.n_layers + 1))
    assert entries[0]["name"] == "embedding" and entries[-1]["name"] == f"block {lm.config.n_layers - 1}"
    chosen = result.token_ids[step]
    for e, row in zip(entries, expected):
        p = np.exp(row - row.max())
        p /= p.sum()
        assert e["rank"] == int((p > p[chosen]).sum()) + 1
        assert e["prob"] == pytest.approx(float(p[chosen]), rel=1e-5)
        assert e["probs"] == sorted(e["probs"], reverse=True) and len(e["token_ids"]) == 3


def test_rank_strip_matches_the_lens_and_reuses_the_cache(run):
    name, lm, result = run
    cache = RunCache(lm, result)
    strip = logit_lens_ranks(lm, result, cache=cache)
    n = len(result.token_ids)
    assert strip["ranks"].shape == (lm.config.n_layers + 1, n) and strip["steps"] == list(range(n))
    for step in (0, n - 1):
        entries = logit_lens(lm, result, step, cache=cache)
        assert strip["ranks"][:, step].tolist() == [e["rank"] for e in entries]
    assert set(cache.lens_rows) == set(range(n))  # each step unembedded once, kept for the next call
    fig = lens_rank_strip(strip["ranks"], strip["layer_names"], strip["steps"], strip["token_texts"], selected=2)
    assert fig.data[0].z.shape == strip["ranks"].shape and len(fig.layout.shapes) == 1


def test_strip_fills_in_within_a_budget(run):
    """For big models each call computes only the nearest missing steps; later calls fill in the rest."""
    from playground.analysis.logit_lens import lens_flops

    name, lm, result = run
    cache = RunCache(lm, result)
    steps = list(range(len(result.token_ids)))
    first = logit_lens_ranks(lm, result, steps, cache=cache, around=5, max_flops=2 * lens_flops(lm))
    assert first["computed"].tolist() == [s in (4, 5) for s in steps]
    assert np.isnan(first["ranks"][:, 0]).all() and not np.isnan(first["ranks"][:, 5]).any()
    second = logit_lens_ranks(lm, result, steps, cache=cache, around=5, max_flops=2 * lens_flops(lm))
    assert second["computed"].tolist() == [s in (3, 4, 5, 6) for s in steps]
    full = logit_lens_ranks(lm, result, steps, cache=cache)  # no budget: the rest at once
    assert full["computed"].all()
    np.testing.assert_array_equal(full["ranks"][:, 5], first["ranks"][:, 5])
    fig = lens_rank_strip(first["ranks"], first["layer_names"], steps, first["token_texts"], selected=5)
    assert "not computed yet" in str(fig.data[0].customdata[0, 0, 1])


def test_strip_window_follows_the_selected_step():
    assert strip_steps(10, 4, width=40) == list(range(10))
    assert strip_steps(512, 0, width=40) == list(range(40))
    assert strip_steps(512, 300, width=40) == list(range(280, 320))
    assert strip_steps(512, 511, width=40) == list(range(472, 512))


def test_needs_the_residual_stream(tmp_path_factory):
    lm = load("tiny-lm", tmp_path_factory.mktemp("plain"))
    result = generate_all(lm, "The", GenerationConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match="capture_residual=True"):
        logit_lens(lm, result, 0)


def test_beam_search_lens_follows_the_winning_beam(tmp_path_factory):
    lm = load("tiny-lm", tmp_path_factory.mktemp("beam"))
    result = record(lm, "tiny-lm", new_tokens=5, num_beams=3)
    for step in range(len(result.token_ids)):
        np.testing.assert_allclose(lens_logits(lm, result, step)[-1], _model_logits(lm, result, step), atol=1e-5)


def test_figure_and_caption(run):
    name, lm, result = run
    entries = logit_lens(lm, result, 2)
    fig = logit_lens_figure(entries, 2)
    assert fig.data[0].z.shape == (lm.config.n_layers + 1, 6)  # top 5 + the chosen token's column
    text = logit_lens_caption(entries, 2, result.path[2].token_text)
    assert "step 3" in text and ("reaches rank 1" in text or "No layer but the last" in text)  # index 2: shown from 1
