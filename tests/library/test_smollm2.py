"""The real pretrained SmolLM2-135M-Instruct: our implementation against transformers, same files."""

from __future__ import annotations

import pytest
import torch
import transformers

import playground

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ours(smollm2_dir):
    return playground.load_model(smollm2_dir)


def test_config_maps_faithfully(ours):
    c = ours.config
    assert (c.family, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.d_model) == ("llama", 30, 9, 3, 64, 576)
    assert c.rope_theta == 100000.0 and c.tie_word_embeddings
    assert 134_000_000 < ours.parameter_count < 135_000_000


def test_logits_match_transformers_on_64_tokens(ours, smollm2_dir):
    reference = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    text = "The Transformer architecture replaced recurrence with attention. " * 8
    ids = torch.tensor([ours.tokenizer.encode(text)[:64]])
    assert ids.shape[1] == 64
    with torch.no_grad():
        expected = reference(ids).logits
    got = ours.logits(ids)
    assert (got - expected).abs().max().item() <= 1e-3
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_greedy_chat_answer_names_paris(ours):
    ids = ours.tokenize("What is the capital of France?", chat=True)
    prompt = torch.tensor([ids])
    eos = set(ours.config.eos_token_ids)
    generated: list[int] = []
    with torch.inference_mode():
        cache = ours.model.new_cache(batch=1, max_tokens=len(ids) + 24)
        logits = ours.model(prompt, cache=cache)
        for _ in range(24):
            token = int(logits[0, -1].argmax())
            if token in eos:
                break
            generated.append(token)
            logits = ours.model(torch.tensor([[token]]), cache=cache)
    answer = ours.detokenize(generated)
    assert "Paris" in answer, answer
