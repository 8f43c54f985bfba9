"""The real pretrained Gemma 3 270M: our implementation against transformers on the same files,
past the 512-position sliding window of its local layers."""

from __future__ import annotations

import pytest
import torch
import transformers

import playground
from playground.app import describe
from playground.generation import GenerationConfig, generate_all

pytestmark = pytest.mark.slow

QUESTION = "Question: What is the capital of France?\nAnswer:"


@pytest.fixture(scope="module")
def ours(gemma3_dir):
    return playground.load_model(gemma3_dir)


@pytest.fixture(scope="module")
def reference(gemma3_dir):
    return transformers.AutoModelForCausalLM.from_pretrained(gemma3_dir, dtype=torch.float32).eval()


def _long_prompt(ours, n: int) -> list[int]:
    text = " ".join(f"Line {i}: the Transformer replaced recurrence with attention." for i in range(80))
    ids = ours.tokenize(text)
    assert len(ids) >= n
    return ids[:n]


def test_config_maps_faithfully(ours):
    c = ours.config
    assert (c.family, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.d_model) == ("gemma3_text", 18, 4, 1, 256, 640)
    assert (c.norm, c.norm_position, c.qk_norm, c.sliding_window) == ("rmsnorm_gemma", "sandwich", "head", 512)
    assert describe.layer_summary(c) == "15 sliding (window 512, RoPE base 10000) + 3 full (RoPE base 1e+06)"
    assert 268_000_000 < ours.parameter_count < 268_200_000


def test_logits_match_transformers_past_the_window(ours, reference):
    ids = torch.tensor([_long_prompt(ours, 600)])
    with torch.no_grad():
        expected = reference(ids).logits
    got = ours.logits(ids)
    assert (got - expected).abs().max().item() <= 1e-3
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def _hf(reference, ids: list[int], n: int, **kwargs) -> list[int]:
    with torch.no_grad():
        out = reference.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, **kwargs)
    return out[0, len(ids):].tolist()


def test_greedy_past_the_window_matches_transformers(ours, reference):
    ids = _long_prompt(ours, 505)  # the cache of the local layers wraps after 7 new tokens
    result = generate_all(ours, ids, GenerationConfig(max_new_tokens=12, top_candidates=0))
    assert result.token_ids == _hf(reference, ids, 12)
    assert result.cache["per_layer"][0]["tokens"] == 512 and result.cache["per_layer"][5]["tokens"] == 516


def test_answer_names_paris_and_greedy_and_beam_match_transformers(ours, reference):
    ids = ours.tokenize(QUESTION)
    greedy = generate_all(ours, ids, GenerationConfig(max_new_tokens=24, top_candidates=0))
    assert greedy.token_ids == _hf(reference, ids, 24)
    assert greedy.text.strip().startswith("Paris"), greedy.text
    beam = generate_all(ours, ids, GenerationConfig(max_new_tokens=12, num_beams=4, length_penalty=0.6, top_candidates=0))
    assert beam.token_ids == _hf(reference, ids, 12, num_beams=4, length_penalty=0.6)
