"""Attention step by step: the stages, put back together, are the model's own numbers."""

from __future__ import annotations

import numpy as np
import pytest

from playground.analysis import RunCache, attention_matrix, attention_steps
from playground.analysis.attention_steps import attention_module
from playground.generation import full_attention
from playground.viz.attention_steps import attention_steps_caption, attention_steps_figure, heads_concat_figure
from tests.analysis_models import FAMILIES, load, record
from tests.float32_bounds import assert_within, float32_depth, recompose_bound, softmax_bound, weights_bound

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=FAMILIES + ("mistral",))
def run(request, recorded_runs):
    return recorded_runs(request.param)


def _kinds(lm) -> tuple[str, ...]:
    return ("self",) if lm.kind == "decoder" else ("self", "cross", "encoder")


def test_stages_recompose_the_layers_attention_output(run):
    """softmax(q·kᵀ·scale + bias + mask)·v for every head, concatenated, · W_O + b equals the output the
    model recorded for that layer (its SDPA path), at every step, layer, head and kind."""
    name, lm, result = run
    cache = RunCache(lm, result)
    c = lm.config
    for kind in _kinds(lm):
        layers = c.n_encoder_layers if kind == "encoder" else c.n_layers
        for layer in range(layers):
            for step in (0, 1, len(result.token_ids) - 1):
                s = attention_steps(lm, result, step, layer, step % c.n_heads, kind, cache=cache)
                assert_within(s["attention_output"], s["recorded_output"], recompose_bound(lm, s), "output")
                # The pieces are consistent with each other: every stage follows from the one before.
                np.testing.assert_allclose(s["scores"], s["q"] @ s["k"].T, rtol=1e-12)
                np.testing.assert_allclose(s["scaled"], s["scores"] * s["scale"], rtol=1e-12)
                np.testing.assert_allclose(s["weights"].sum(axis=-1), 1.0, atol=1e-12)
                assert np.all(s["weights"][~s["mask"]] == 0) and np.all(np.isneginf(s["masked"][~s["mask"]]))
                np.testing.assert_allclose(s["output"], s["weights"] @ s["v"], rtol=1e-12)
                head = s["head"]
                np.testing.assert_allclose(s["concat"][:, head * c.head_dim:(head + 1) * c.head_dim], s["output"])


def test_step_weights_equal_what_the_live_decode_step_computed(run):
    """The whole-sequence pass gives, at step t's query, the weights the cached decode step recorded live."""
    name, lm, result = run
    cache = RunCache(lm, result)
    kinds = ("self",) if lm.kind == "decoder" else ("self", "cross")
    for kind in kinds:
        for step in range(len(result.token_ids)):
            for layer in range(lm.config.n_layers):
                live = result.path[step].capture.attention[kind][layer]  # (h, S) of the query that chose the token
                for head in range(lm.config.n_heads):
                    s = attention_steps(lm, result, step, layer, head, kind, cache=cache)
                    assert_within(s["weights"][-1], live[head], weights_bound(lm, s), f"{kind} {step} {layer} {head}")


def test_decode_step_is_one_query_against_t_plus_one_keys(run):
    name, lm, result = run
    cache = RunCache(lm, result)
    prefix = len(result.decoder_prefix)
    first = attention_steps(lm, result, 0, 0, 0, cache=cache)
    assert first["phase"] == "prefill" and first["scores"].shape == (prefix, prefix)
    if prefix > 1:  # the causal triangle: query i never sees key j > i
        assert not first["mask"][0, 1] and np.isneginf(first["masked"][0, 1])
    for step in (1, 5):
        s = attention_steps(lm, result, step, 0, 0, cache=cache)
        assert s["phase"] == "decode" and s["q"].shape == (1, lm.config.head_dim)
        assert s["k"].shape == (prefix + step, lm.config.head_dim)  # T + 1 keys: T cached + the new token
        assert s["scores"].shape == (1, prefix + step)
        window = lm.config.sliding_window
        hidden = max(0, prefix + step - window) if window else 0
        assert int((~s["mask"]).sum()) == hidden  # only a sliding window hides keys at a decode step
    if lm.kind == "seq2seq":
        cross = attention_steps(lm, result, 3, 0, 0, "cross", cache=cache)
        assert cross["k"].shape[0] == len(result.prompt_ids) and cross["mask_kind"] == "none"
        assert cross["key_labels"] == cache.labels("source")


def test_sliding_window_hides_old_keys_as_minus_infinity(tmp_path_factory):
    lm = load("mistral", tmp_path_factory.mktemp("mistral"))
    result = record(lm, "mistral", new_tokens=8)
    s = attention_steps(lm, result, 7, 1, 3)
    keys = len(result.prompt_ids) + 7
    assert s["mask_kind"] == "causal + sliding window 4"
    assert s["mask"][0].tolist() == [False] * (keys - 4) + [True] * 4
    assert np.isneginf(s["masked"][0, : keys - 4]).all() and s["weights"][0, : keys - 4].sum() == 0
    assert_within(s["attention_output"], s["recorded_output"], recompose_bound(lm, s), "output")


def test_full_matrix_equals_full_attention(run):
    name, lm, result = run
    cache = RunCache(lm, result)
    maps = full_attention(lm, result.prompt_ids, result.token_ids, layers=[1])
    for kind in _kinds(lm):
        got = attention_matrix(lm, result, 1, kind, cache=cache)["weights"]  # (h, T, S)
        rec = cache.internals(1)[kind]
        module = attention_module(lm, kind, 1)
        group = module.n_heads // module.n_kv_heads
        for head in range(module.n_heads):
            bound = softmax_bound(got[head], rec["q"][head], rec["k"][head // group], float(module.scale),
                                  float32_depth(lm, kind, 1))
            assert_within(got[head], maps[kind][0][head], bound, f"{kind} head {head}")


def test_beam_search_follows_the_winning_hypothesis(tmp_path_factory):
    lm = load("tiny-lm", tmp_path_factory.mktemp("beam"))
    result = record(lm, "tiny-lm", new_tokens=6, num_beams=3)
    cache = RunCache(lm, result)
    for step in range(len(result.token_ids)):
        live = result.path[step].capture.attention["self"][2]
        s = attention_steps(lm, result, step, 2, 1, cache=cache)
        assert_within(s["weights"][-1], live[1], weights_bound(lm, s), f"step {step}")


def test_bad_requests_say_what_to_change(run):
    name, lm, result = run
    with pytest.raises(ValueError, match="step"):
        attention_steps(lm, result, len(result.token_ids), 0, 0)
    with pytest.raises(ValueError, match="head"):
        attention_steps(lm, result, 0, 0, lm.config.n_heads)
    if lm.kind == "decoder":
        with pytest.raises(ValueError, match="only self-attention"):
            attention_steps(lm, result, 0, 0, 0, "cross")
    other = record(lm, name, new_tokens=2)
    with pytest.raises(ValueError, match="another run"):
        attention_steps(lm, other, 0, 0, 0, cache=RunCache(lm, result))


def test_internals_are_held_for_a_bounded_chunk_of_layers(run):
    name, lm, result = run
    cache = RunCache(lm, result, budget_bytes=1)  # one layer per pass
    first = cache.internals(0)
    assert cache.held_layers == [0]
    cache.internals(1)
    assert cache.held_layers == [1]
    np.testing.assert_array_equal(cache.internals(0)["self"]["q"], first["self"]["q"])  # recomputed alike
    whole = RunCache(lm, result)  # the default budget holds every layer of these small models in one pass
    whole.internals(0)
    assert whole.held_layers == list(range(max(lm.config.n_layers, lm.config.n_encoder_layers)))


def test_figures_and_caption(run):
    name, lm, result = run
    cache = RunCache(lm, result)
    for kind in _kinds(lm):
        s = attention_steps(lm, result, 2, 0, 1, kind, cache=cache)
        fig = attention_steps_figure(s)
        assert len(fig.data) == 8 and "step 3" in fig.layout.title.text  # index 2, shown from 1
        masked = fig.data[4].z
        assert np.isnan(np.asarray(masked, dtype=float)[~s["mask"]]).all()  # hidden cells are drawn blank (grey)
        assert len(heads_concat_figure(s).data) == 4
        text = attention_steps_caption(s)
        assert "put" in text.lower() or "together" in text
    decode = attention_steps(lm, result, 3, 0, 0, cache=cache)
    assert "T + 1 = " in attention_steps_caption(decode)


def test_an_encoder_with_its_own_head_count(tmp_path):
    """DistilBART-like: the encoder has 2 heads of 16, the decoder 4 of 8; every kind reads its own."""
    import playground
    from tests.hf_tiny import bart_like, save_seq2seq

    save_seq2seq(tmp_path, "bart", bart_like(encoder_attention_heads=2, encoder_layers=1))
    lm = playground.load_model(tmp_path)
    assert (lm.config.n_encoder_heads, lm.config.n_heads) == (2, 4)
    result = record(lm, "bart", new_tokens=4)
    cache = RunCache(lm, result)
    enc = attention_steps(lm, result, 0, 0, 1, "encoder", cache=cache)
    assert (enc["n_heads"], enc["head_dim"], enc["concat"].shape[1]) == (2, 16, 32)
    assert_within(enc["attention_output"], enc["recorded_output"], recompose_bound(lm, enc), "encoder output")
    with pytest.raises(ValueError, match="head 2"):
        attention_steps(lm, result, 0, 0, 2, "encoder", cache=cache)
    for kind in ("self", "cross"):
        s = attention_steps(lm, result, 2, 1, 3, kind, cache=cache)
        assert s["n_heads"] == 4 and s["head_dim"] == 8
        assert_within(s["attention_output"], s["recorded_output"], recompose_bound(lm, s), f"{kind} output")


@pytest.mark.parametrize("name", ["tiny-lm", "tiny-seq2seq"])
def test_a_branch_with_forced_tokens(name, tmp_path):
    """A run branched from a step starts with forced tokens: they are part of the prefill, and the whole
    pass feeds them as the stepper did (the live weights agree)."""
    from playground.generation import GenerationConfig, generate_all

    lm = load(name, tmp_path)
    base = record(lm, name, new_tokens=4)
    forced = base.token_ids[:2]
    prompt = "The import statement" if name == "tiny-lm" else "March 5, 2021"
    result = generate_all(lm, prompt, GenerationConfig(max_new_tokens=3, capture_attention=True),
                          forced_prefix=forced)
    assert result.decoder_prefix[-2:] == forced
    cache = RunCache(lm, result)
    assert cache.forced == forced
    for step in range(len(result.token_ids)):
        live = result.path[step].capture.attention["self"][0]
        s = attention_steps(lm, result, step, 0, 1, cache=cache)
        assert_within(s["weights"][-1], live[1], weights_bound(lm, s), f"step {step}")
        assert_within(s["attention_output"], s["recorded_output"], recompose_bound(lm, s), f"step {step}")
