"""Our decoder-only models reproduce transformers' logits and attention on the same safetensors files."""

from __future__ import annotations

import pytest
import torch

import playground
from playground.models.recorder import Recorder
from tests.hf_tiny import gpt2_like, llama_like, save_decoder

CASES = {
    # family, HF config kwargs
    "gpt2-mha-tied": ("gpt2", gpt2_like()),
    "gpt2-untied-gelu": ("gpt2", gpt2_like(tie_word_embeddings=False, activation_function="gelu", n_head=3)),
    "llama-mha-untied": ("llama", llama_like()),
    "llama-gqa4-tied": ("llama", llama_like(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True)),
    "llama-mqa": ("llama", llama_like(num_attention_heads=6, num_key_value_heads=1)),
    "llama-odd-head-dim-bias": ("llama", llama_like(head_dim=10, attention_bias=True, mlp_bias=True, rope_theta=500.0)),
    "llama3-rope-scaling": (
        "llama",
        llama_like(
            rope_parameters={
                "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
            }
        ),
    ),
    "mistral-gqa": ("mistral", llama_like(num_attention_heads=4, num_key_value_heads=2, sliding_window=None)),
    "mistral-sliding-window": ("mistral", llama_like(num_attention_heads=4, num_key_value_heads=2, sliding_window=5)),
    "qwen2-gqa-bias": ("qwen2", llama_like(num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen2-mha": ("qwen2", llama_like(head_dim=6)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    family, kwargs = CASES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_decoder(directory, family, kwargs)
    return reference, playground.load_model(directory)


def test_logits_match_transformers(pair):
    reference, ours = pair
    ids = torch.randint(3, ours.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(ids).logits
    got = ours.logits(ids)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_captured_attention_matches_eager_output_attentions(pair):
    reference, ours = pair
    ids = torch.randint(3, ours.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = reference(ids, output_attentions=True).attentions
        recorder = Recorder()
        logits = ours.model(ids, recorder=recorder)
        fast = ours.model(ids)
    captured = recorder.layers_of("self", ours.config.n_layers)
    assert all(w is not None for w in captured)
    for ours_layer, theirs in zip(captured, expected):
        assert ours_layer.shape == (2, ours.config.n_heads, 17, 17)
        torch.testing.assert_close(ours_layer, theirs, atol=1e-5, rtol=0)
    # The explicit-softmax path and the SDPA fast path compute the same logits.
    torch.testing.assert_close(logits, fast, atol=1e-5, rtol=0)


def test_model_is_built_from_playground_classes(pair):
    _, ours = pair
    assert type(ours.model).__module__.startswith("playground.")
    assert all(not type(m).__module__.startswith("transformers") for m in ours.model.modules())
    assert ours.kind == "decoder"


def test_cached_decoding_matches_full_forward(pair):
    _, ours = pair
    ids = torch.randint(3, ours.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = ours.model(ids)
        cache = ours.model.new_cache(batch=2, max_tokens=16)
        prefix = ours.model(ids[:, :7], cache=cache)
        steps = [ours.model(ids[:, t : t + 1], cache=cache) for t in range(7, 12)]
    torch.testing.assert_close(torch.cat([prefix, *steps], dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == 12
