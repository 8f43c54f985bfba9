"""What a run records equals what one pass over the final sequence computes (issue: one owner for captures).

Every step's recorded attention row is the row of the query that chose that step's token in a single
forward pass over the finished sequence: for greedy, sampled and beam runs (beam search: along the
winning hypothesis' beam path), for a decoder and an encoder-decoder, on real safetensors files.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import playground
from playground.generation import GenerationConfig, full_attention, generate, generate_all
from tests.hf_tiny import llama_like, save_decoder, save_seq2seq, t5_like

RUNS = {
    "greedy": dict(),
    "sampled": dict(temperature=1.3, top_k=40, seed=5),
    "beam": dict(num_beams=3, length_penalty=0.8),
    "beam-early": dict(num_beams=4, early_stopping=True),
}


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_decoder(directory, "llama", llama_like(num_attention_heads=6, num_key_value_heads=2, num_hidden_layers=3))
    return playground.load_model(directory)


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    directory = tmp_path_factory.mktemp("t5")
    save_seq2seq(directory, "t5", t5_like())
    return playground.load_model(directory)


def _prompt(lm) -> list[int]:
    return [int(i) for i in torch.randint(3, lm.config.vocab_size, (7,), generator=torch.Generator().manual_seed(0))]


@pytest.mark.parametrize("knobs", list(RUNS.values()), ids=list(RUNS))
@pytest.mark.parametrize("which", ["decoder", "seq2seq"])
def test_every_recorded_row_equals_the_whole_sequence_pass(which, knobs, request):
    lm = request.getfixturevalue(which)
    result = generate_all(lm, _prompt(lm), GenerationConfig(max_new_tokens=9, capture_attention=True, **knobs))
    assert len(result.path) == len(result.token_ids) >= 2
    full = full_attention(lm, result.prompt_ids, result.token_ids)
    kinds = ["self"] if which == "decoder" else ["self", "cross"]
    first_query = len(result.decoder_prefix) - 1
    for t, step in enumerate(result.path):
        assert step.token_id == result.token_ids[t]
        for kind in kinds:
            rows = step.capture.attention[kind]
            assert len(rows) == lm.config.n_layers
            for layer, row in enumerate(rows):
                reference = full[kind][layer, :, first_query + t]  # (h, S_full)
                np.testing.assert_allclose(row, reference[:, : row.shape[-1]], atol=1e-5, rtol=0)
                if kind == "self":
                    assert row.shape[-1] == first_query + t + 1  # the new query sees itself and what came before
                    assert np.all(reference[:, row.shape[-1]:] == 0)  # and nothing after


def test_prompt_attention_and_the_residual_stream_are_recorded_when_asked(decoder):
    lm = decoder
    prompt = _prompt(lm)
    cfg = GenerationConfig(max_new_tokens=4, capture_prompt_attention=True, capture_residual=True)
    result = generate_all(lm, prompt, cfg)
    full = full_attention(lm, prompt, result.token_ids)["self"]
    P = len(prompt)
    for layer, maps in enumerate(result.prompt_attention["self"]):
        np.testing.assert_allclose(maps, full[layer, :, :P, :P], atol=1e-5, rtol=0)
    assert result.path[0].capture.attention is None  # per-step rows were not asked for
    ids = torch.tensor([prompt + result.token_ids])
    with torch.inference_mode():
        logits = lm.logits(ids)[0]
        for t, step in enumerate(result.path):
            residual = torch.from_numpy(step.capture.residual)  # (L + 1, d): embedding, then each block
            assert residual.shape == (lm.config.n_layers + 1, lm.config.d_model)
            last = lm.model.unembed(residual[-1][None, None])[0, 0]
            torch.testing.assert_close(last, logits[P - 1 + t], atol=1e-5, rtol=0)


def test_only_the_layers_asked_for_are_recorded(decoder):
    cfg = GenerationConfig(max_new_tokens=3, capture_attention=True, attention_layers=(1,))
    events = list(generate(decoder, _prompt(decoder), cfg))
    for event in events:
        rows = event.attention["self"]
        assert [r is not None for r in rows] == [False, True, False]
    assert all(e.attention is None and e.residual is None for e in generate(decoder, _prompt(decoder),
                                                                            GenerationConfig(max_new_tokens=3)))
    with pytest.raises(playground.PlaygroundError, match="attention_layers"):
        generate_all(decoder, _prompt(decoder), GenerationConfig(max_new_tokens=2, attention_layers=(7,)))


def test_one_rule_for_the_decoder_start_token(seq2seq):
    """The run and the whole-sequence pass start the decoder from the same token."""
    result = generate_all(seq2seq, _prompt(seq2seq), GenerationConfig(max_new_tokens=3))
    c = seq2seq.config
    start = c.decoder_start_token_id if c.decoder_start_token_id is not None else c.bos_token_id
    assert result.decoder_prefix == [start]
    assert result.steps[0].cache["tokens"] == 1  # the start token is the first thing the decoder cached


def test_a_forced_prefix_is_recorded_as_part_of_the_sequence(decoder):
    """A branch (forced tokens after the prompt) records the rows of its own queries, over the whole stream."""
    prompt = _prompt(decoder)
    forced = [5, 6]
    result = generate_all(decoder, prompt, GenerationConfig(max_new_tokens=3, capture_attention=True),
                          forced_prefix=forced)
    full = full_attention(decoder, prompt, forced + result.token_ids)["self"]
    first_query = len(prompt) + len(forced) - 1
    for t, step in enumerate(result.path):
        row = step.capture.attention["self"][2]
        np.testing.assert_allclose(row, full[2, :, first_query + t, : row.shape[-1]], atol=1e-5, rtol=0)
