"""Seq2seq generation equals transformers' generate() for T5, BART and Marian: greedy and beam search."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import playground
from playground.generation import GenerationConfig, generate, generate_all
from tests.hf_tiny import bart_like, marian_like, save_seq2seq, t5_like

transformers.logging.set_verbosity_error()

CASES = {
    "t5": ("t5", t5_like()),
    "bart": ("bart", bart_like()),
    "bart-forced-bos-eos": ("bart", bart_like(forced_bos_token_id=0, forced_eos_token_id=2)),
    "marian": ("marian", marian_like()),
}
SOURCE = [5, 9, 23, 40, 7, 11, 3]


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    family, kwargs = CASES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_seq2seq(directory, family, kwargs, init_std=0.1 if family == "t5" else 0.2)
    return reference, playground.load_model(directory)


def _hf(reference, n, **kwargs):
    with torch.no_grad():
        return reference.generate(torch.tensor([SOURCE]), max_new_tokens=n, do_sample=False, **kwargs)


def test_greedy_matches_transformers(pair):
    reference, lm = pair
    result = generate_all(lm, SOURCE, GenerationConfig(max_new_tokens=12))
    expected = _hf(reference, 12)[0, 1:].tolist()
    pad = lm.config.pad_token_id
    while expected and expected[-1] == pad and len(expected) > len(result.token_ids):
        expected.pop()
    assert result.token_ids == expected
    uncached = generate_all(lm, SOURCE, GenerationConfig(max_new_tokens=12, use_cache=False))
    assert uncached.token_ids == result.token_ids


@pytest.mark.parametrize("num_beams,length_penalty,early_stopping", [(2, 1.0, False), (3, 0.6, True), (4, 1.5, False)])
def test_beam_matches_transformers(pair, num_beams, length_penalty, early_stopping):
    reference, lm = pair
    cfg = GenerationConfig(max_new_tokens=10, num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping)
    result = generate_all(lm, SOURCE, cfg)
    out = _hf(reference, 10, num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping,
              num_return_sequences=num_beams, return_dict_in_generate=True, output_scores=True)
    lengths = (out.beam_indices + 1).bool().sum(dim=1).tolist()
    start = 1
    expected = [row[start: start + n].tolist() for row, n in zip(out.sequences, lengths)]
    assert [s.token_ids for s in result.sequences] == expected
    torch.testing.assert_close(
        torch.tensor([s.score for s in result.sequences]), out.sequences_scores.float(), atol=1e-4, rtol=0
    )
    assert [s.token_ids for s in generate_all(lm, SOURCE, cfg.replace(use_cache=False)).sequences] == expected


def test_cache_stats_include_cross_attention(pair):
    _, lm = pair
    c = lm.config
    events = list(generate(lm, SOURCE, GenerationConfig(max_new_tokens=4)))
    for k, event in enumerate(events):
        assert event.cache["tokens"] == 1 + k
        assert event.cache["bytes"] == 2 * c.n_layers * c.n_kv_heads * (1 + k) * c.head_dim * 4
        cross = event.cache["cross_attention"]
        assert cross["tokens"] == len(SOURCE)
        assert cross["bytes"] == 2 * c.n_layers * c.n_kv_heads * len(SOURCE) * c.head_dim * 4


def test_captured_attention_shapes(pair):
    _, lm = pair
    c = lm.config
    result = generate_all(lm, SOURCE, GenerationConfig(max_new_tokens=3, capture_attention=True))
    rows = result.steps[1].attention
    assert len(rows["self"]) == len(rows["cross"]) == c.n_layers
    assert rows["self"][0].shape == (c.n_heads, 2) and rows["cross"][0].shape == (c.n_heads, len(SOURCE))
    T, S = 1 + len(result.token_ids), len(SOURCE)
    assert result.attention["encoder"].shape == (c.n_encoder_layers, c.n_heads, S, S)
    assert result.attention["self"].shape == (c.n_layers, c.n_heads, T, T)
    assert result.attention["cross"].shape == (c.n_layers, c.n_heads, T, S)
    np.testing.assert_allclose(result.attention["cross"].sum(-1), 1.0, atol=1e-5)
