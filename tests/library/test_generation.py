"""The engine against transformers' generate(): greedy ids, cache on/off, seeds, cache stats, events, stop."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch

import playground
from playground.generation import GenerationConfig, SettingsError, StepEvent, generate, generate_all
from tests.hf_tiny import gpt2_like, llama_like, save_decoder

FAMILIES = {
    "gpt2": ("gpt2", gpt2_like()),
    "llama-gqa": ("llama", llama_like(num_attention_heads=8, num_key_value_heads=2)),
    "llama-mqa": ("llama", llama_like(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True)),
    "mistral": ("mistral", llama_like(num_attention_heads=4, num_key_value_heads=2, sliding_window=None)),
    "qwen2": ("qwen2", llama_like(num_attention_heads=6, num_key_value_heads=2)),
}
PROMPT = [5, 9, 23, 40, 7, 11]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def pair(request, tmp_path_factory):
    family, kwargs = FAMILIES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_decoder(directory, family, kwargs)
    return reference, playground.load_model(directory)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    reference = save_decoder(directory, "llama", llama_like(num_attention_heads=8, num_key_value_heads=2))
    return reference, playground.load_model(directory)


def _hf_greedy(reference, ids, n, **kwargs):
    with torch.no_grad():
        out = reference.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, **kwargs)
    return out[0, len(ids):].tolist()


def test_greedy_matches_transformers(pair):
    reference, lm = pair
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=20))
    assert result.token_ids == _hf_greedy(reference, PROMPT, 20)
    assert result.finish_reason in ("length", "eos")


def test_greedy_with_repetition_penalty_matches_transformers(pair):
    reference, lm = pair
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=16, repetition_penalty=1.4))
    assert result.token_ids == _hf_greedy(reference, PROMPT, 16, repetition_penalty=1.4)


def test_greedy_stops_at_eos_like_transformers(pair):
    reference, lm = pair
    free = _hf_greedy(reference, PROMPT, 12)
    eos = free[4]  # a token greedy decoding reaches: make it the end-of-sequence token
    lm.config.eos_token_id = eos
    try:
        result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=12))
    finally:
        lm.config.eos_token_id = 2
    assert result.token_ids == _hf_greedy(reference, PROMPT, 12, eos_token_id=eos, pad_token_id=0)
    assert result.token_ids[-1] == eos and result.finish_reason == "eos"
    assert result.steps[-1].finished and not any(e.finished for e in result.steps[:-1])


def test_without_cache_same_tokens(pair):
    _, lm = pair
    for cfg in (GenerationConfig(max_new_tokens=12), GenerationConfig(max_new_tokens=12, num_beams=3)):
        cached = generate_all(lm, PROMPT, cfg)
        uncached = generate_all(lm, PROMPT, cfg.replace(use_cache=False))
        assert cached.token_ids == uncached.token_ids
    assert uncached.cache["enabled"] is False and uncached.cache["bytes"] == 0


def test_seeded_sampling_repeats_and_differs(llama):
    _, lm = llama
    cfg = GenerationConfig(max_new_tokens=24, temperature=1.5, top_p=0.95, seed=7)
    first = generate_all(lm, PROMPT, cfg).token_ids
    assert generate_all(lm, PROMPT, cfg).token_ids == first
    others = [generate_all(lm, PROMPT, cfg.replace(seed=s)).token_ids for s in (8, 9, 10)]
    assert any(o != first for o in others)


def test_sampling_with_top_k_1_is_greedy(llama):
    _, lm = llama
    greedy = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=16)).token_ids
    sampled = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=16, temperature=2.0, top_k=1, seed=3)).token_ids
    assert sampled == greedy


def test_cache_bytes_follow_the_formula_every_step(pair):
    _, lm = pair
    c = lm.config
    per_token = 2 * c.n_layers * 1 * c.n_kv_heads * c.head_dim * 4
    events = list(generate(lm, PROMPT, GenerationConfig(max_new_tokens=8)))
    for k, event in enumerate(events):
        cache = event.cache
        assert cache["tokens"] == len(PROMPT) + k
        assert cache["bytes"] == per_token * cache["tokens"]
        assert cache["kv_heads"] == c.n_kv_heads and cache["layers"] == c.n_layers and cache["batch"] == 1
        assert cache["mha_equivalent_bytes"] == cache["bytes"] * c.n_heads // c.n_kv_heads
        assert cache["allocated_bytes"] == per_token * (len(PROMPT) + 8)
        assert len(cache["per_layer"]) == c.n_layers
    assert [b.cache["bytes"] - a.cache["bytes"] for a, b in zip(events, events[1:])] == [per_token] * 7


def test_beam_cache_counts_every_beam(llama):
    _, lm = llama
    c = lm.config
    event = next(iter(generate(lm, PROMPT, GenerationConfig(max_new_tokens=4, num_beams=3))))
    assert event.cache["batch"] == 3
    assert event.cache["bytes"] == 2 * c.n_layers * 3 * c.n_kv_heads * len(PROMPT) * c.head_dim * 4


def test_step_events_are_json_and_complete(llama):
    _, lm = llama
    cfg = GenerationConfig(max_new_tokens=5, temperature=0.9, top_k=10, top_p=0.9, repetition_penalty=1.2,
                           seed=1, top_candidates=6, capture_attention=True)
    events = list(generate(lm, PROMPT, cfg))
    assert [e.step for e in events] == list(range(5))
    for k, event in enumerate(events):
        assert isinstance(event, StepEvent)
        data = json.loads(json.dumps(event.to_dict()))
        assert data["token_ids"] == [e.token_id for e in events[: k + 1]]
        assert set(data["timing"]) >= {"prefill_ms", "step_ms", "decode_ms_per_token", "tokens_per_s", "elapsed_ms"}
        cands = event.candidates
        assert 1 <= len(cands) <= 6 and sum(c.chosen for c in cands) == 1
        chosen = next(c for c in cands if c.chosen)
        assert chosen.token_id == event.token_id and chosen.removed_by is None
        assert abs(chosen.prob_final - event.prob) < 1e-5
        for c in cands:
            assert list(c.stages) == ["raw", "repetition_penalty", "temperature", "top_k", "top_p"]
            assert c.removed_by in (None, "top_k", "top_p")
            assert (c.prob_final == 0.0) == (c.removed_by is not None)
        rows = event.attention["self"]
        assert len(rows) == lm.config.n_layers
        assert rows[0].shape == (lm.config.n_heads, len(PROMPT) + k)
        np.testing.assert_allclose(rows[0].sum(-1), 1.0, atol=1e-5)


def test_top_k_removal_is_reported(llama):
    _, lm = llama
    event = next(iter(generate(lm, PROMPT, GenerationConfig(max_new_tokens=1, temperature=1.0, top_k=2, seed=0, top_candidates=5))))
    assert [c.removed_by for c in event.candidates] == [None, None, "top_k", "top_k", "top_k"]


def test_fast_path_has_no_candidates_or_attention(llama):
    _, lm = llama
    event = next(iter(generate(lm, PROMPT, GenerationConfig(max_new_tokens=2, top_candidates=0))))
    assert event.candidates is None and event.attention is None and event.beams is None


def test_full_attention_in_the_result(llama):
    _, lm = llama
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=4, capture_attention=True))
    T = len(PROMPT) + 4
    assert result.attention["self"].shape == (lm.config.n_layers, lm.config.n_heads, T, T)
    # the streamed row of step k is row len(PROMPT) - 1 + k of the full matrix
    for k, event in enumerate(result.steps):
        np.testing.assert_allclose(event.attention["self"][1], result.attention["self"][1, :, len(PROMPT) - 1 + k, : len(PROMPT) + k], atol=1e-5)


def test_stop_event_halts_within_one_step(llama):
    _, lm = llama
    stop = threading.Event()
    seen = []
    for event in generate(lm, PROMPT, GenerationConfig(max_new_tokens=30), stop=stop):
        seen.append(event)
        if event.step == 2:
            stop.set()
    assert len(seen) == 3
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=30), stop=stop)
    assert result.finish_reason == "stopped" and result.token_ids == []


def test_closing_the_generator_stops_work(llama, monkeypatch):
    _, lm = llama
    calls = []
    original = lm.model.forward
    monkeypatch.setattr(lm.model, "forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    stream = generate(lm, PROMPT, GenerationConfig(max_new_tokens=30))
    next(stream), next(stream)
    stream.close()
    assert len(calls) == 2
    with pytest.raises(StopIteration):
        next(stream)


def test_settings_errors_are_raised_at_call(llama):
    _, lm = llama
    with pytest.raises(SettingsError, match="temperature"):
        generate(lm, PROMPT, GenerationConfig(temperature=-1))
    with pytest.raises(SettingsError, match="max_new_tokens"):
        generate(lm, PROMPT, GenerationConfig(max_new_tokens=lm.config.max_positions))
    with pytest.raises(SettingsError, match="vocabulary"):
        generate(lm, [5, 10_000], GenerationConfig())


def test_truncate_prompt_keeps_the_right_end(llama):
    _, lm = llama
    long = list(range(3, 90)) * 2  # 174 tokens > 128 positions
    result = generate_all(lm, long, GenerationConfig(max_new_tokens=8, truncate_prompt=True))
    assert result.prompt_ids == long[-120:] and len(result.token_ids) == 8 and result.notes


def test_tensor_prompt_and_public_exports(llama):
    _, lm = llama
    a = playground.generate_all(lm, torch.tensor([PROMPT]), playground.GenerationConfig(max_new_tokens=3))
    assert a.token_ids == generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=3)).token_ids


@pytest.mark.slow
def test_smollm2_greedy_and_beam_match_transformers(smollm2_dir):
    import transformers

    lm = playground.load_model(smollm2_dir)
    ids = lm.tokenize("What is the capital of France?", chat=True)
    reference = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    result = generate_all(lm, ids, GenerationConfig(max_new_tokens=32))
    assert result.token_ids == _hf_greedy(reference, ids, 32)
    assert "Paris" in result.text
    beam = generate_all(lm, ids, GenerationConfig(max_new_tokens=12, num_beams=4, length_penalty=0.6))
    assert beam.token_ids == _hf_greedy(reference, ids, 12, num_beams=4, length_penalty=0.6)


def test_stop_strings_end_the_run(llama):
    _, lm = llama
    free = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=10)).token_ids
    # without a tokenizer the text is the ids joined by spaces; stop on the third token's text
    marker = f"{free[1]} {free[2]}"
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=10, stop_strings=(marker,)))
    assert result.token_ids == free[:3] and result.finish_reason == "stop_string"


def test_empty_prompt_starts_from_bos(llama):
    _, lm = llama
    result = generate_all(lm, [], GenerationConfig(max_new_tokens=3))
    assert result.prompt_ids == [lm.config.bos_token_id] and len(result.token_ids) == 3 and result.notes
