"""Logits processors equal transformers' on random logits; settings validation and clamping."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from transformers import generation as hf

from playground.app.limits import Caps, clamp_settings
from playground.config import ModelConfig
from playground.generation import GenerationConfig, SettingsError
from playground.generation.processors import (
    MinP,
    RepetitionPenalty,
    Temperature,
    TopK,
    TopP,
    build_pipeline,
)

V = 50


def _logits(seed: int, batch: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, V, generator=g) * 3
    ids = torch.randint(0, V, (batch, 12), generator=g)
    return ids, scores


def _hf_list(cfg: GenerationConfig) -> hf.LogitsProcessorList:
    procs = []
    if cfg.repetition_penalty != 1.0:
        procs.append(hf.RepetitionPenaltyLogitsProcessor(cfg.repetition_penalty))
    if cfg.do_sample:
        if cfg.temperature != 1.0:
            procs.append(hf.TemperatureLogitsWarper(cfg.temperature))
        if cfg.top_k:
            procs.append(hf.TopKLogitsWarper(cfg.top_k))
        if cfg.top_p < 1.0:
            procs.append(hf.TopPLogitsWarper(cfg.top_p))
        if cfg.min_p:
            procs.append(hf.MinPLogitsWarper(cfg.min_p))
    return hf.LogitsProcessorList(procs)


@pytest.mark.parametrize(
    "penalty,temperature,top_k,top_p,min_p",
    list(itertools.product([1.0, 1.3, 0.7], [0.0, 0.5, 1.0, 1.7], [0, 1, 7], [1.0, 0.9, 0.3], [0.0]))
    + [(1.2, 0.8, 10, 0.95, 0.05), (1.0, 1.0, 0, 1.0, 0.2)],
)
def test_pipeline_equals_transformers(penalty, temperature, top_k, top_p, min_p):
    cfg = GenerationConfig(repetition_penalty=penalty, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    for seed in range(3):
        ids, scores = _logits(seed)
        ours = build_pipeline(cfg).run(ids, scores.clone())
        theirs = _hf_list(cfg)(ids, scores.clone())
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
        torch.testing.assert_close(torch.softmax(ours, -1), torch.softmax(theirs, -1), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "ours,theirs",
    [
        (RepetitionPenalty(1.5), hf.RepetitionPenaltyLogitsProcessor(1.5)),
        (Temperature(0.6), hf.TemperatureLogitsWarper(0.6)),
        (TopK(5), hf.TopKLogitsWarper(5)),
        (TopK(3, min_tokens_to_keep=4), hf.TopKLogitsWarper(3, min_tokens_to_keep=4)),
        (TopP(0.8), hf.TopPLogitsWarper(0.8)),
        (TopP(0.1, min_tokens_to_keep=2), hf.TopPLogitsWarper(0.1, min_tokens_to_keep=2)),
        (MinP(0.1), hf.MinPLogitsWarper(0.1)),
    ],
)
def test_each_processor_equals_transformers(ours, theirs):
    for seed in range(5):
        ids, scores = _logits(seed)
        a, b = ours(ids, scores.clone()), theirs(ids, scores.clone())
        assert torch.equal(a, b)


def test_processors_do_not_modify_their_input():
    ids, scores = _logits(0)
    before = scores.clone()
    build_pipeline(GenerationConfig(repetition_penalty=1.3, temperature=0.7, top_k=5, top_p=0.8)).run(ids, scores)
    assert torch.equal(scores, before)


def test_stages_in_hf_order_and_greedy_has_no_warpers():
    cfg = GenerationConfig(repetition_penalty=1.3, temperature=0.7, top_k=5, top_p=0.8, min_p=0.1)
    assert [p.name for p in build_pipeline(cfg).processors] == ["repetition_penalty", "temperature", "top_k", "top_p", "min_p"]
    greedy = build_pipeline(cfg.replace(temperature=0.0))
    assert [p.name for p in greedy.processors] == ["repetition_penalty"] and not greedy.sampling
    assert [p.name for p in build_pipeline(cfg.replace(num_beams=3)).processors] == ["repetition_penalty"]
    ids, scores = _logits(1)
    stages = build_pipeline(cfg).run_stages(ids, scores)
    assert [n for n, _ in stages] == ["raw", "repetition_penalty", "temperature", "top_k", "top_p", "min_p"]
    assert torch.equal(stages[0][1], scores)


@pytest.mark.parametrize(
    "changes,word",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"num_beams": 0}, "num_beams"),
        ({"num_beams": 17}, "num_beams"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"early_stopping": "sometimes"}, "early_stopping"),
        ({"temperature": float("nan")}, "temperature"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
    ],
)
def test_validation_names_the_knob(changes, word):
    with pytest.raises(SettingsError, match=word):
        GenerationConfig(**changes).validate()


def _lm(kind: str = "decoder", max_positions: int = 64, vocab: int = 100, bos: int | None = 1, positional=None):
    config = ModelConfig(
        family="llama", vocab_size=vocab, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_positions=max_positions,
        kind=kind, n_encoder_layers=1 if kind == "seq2seq" else 0, bos_token_id=bos, decoder_start_token_id=0,
        positional=positional or ("learned" if kind == "seq2seq" else "rope"),
    )
    return SimpleNamespace(config=config, kind=kind)


@pytest.mark.parametrize(
    "changes,prompt_len,check",
    [
        ({"temperature": -1.0}, 5, lambda c: c.temperature == 0.0),
        ({"top_p": 1.7}, 5, lambda c: c.top_p == 1.0),
        ({"top_p": 0.0}, 5, lambda c: c.top_p == 1.0),
        ({"top_k": 1000}, 5, lambda c: c.top_k == 100),
        ({"num_beams": 12}, 5, lambda c: c.num_beams == 8),
        ({"max_new_tokens": 5000}, 5, lambda c: c.max_new_tokens == 59),
        ({"max_new_tokens": 60}, 10, lambda c: c.max_new_tokens == 54),
        ({}, 0, lambda c: True),
        ({"max_new_tokens": 8}, 100, lambda c: c.truncate_prompt and c.max_new_tokens == 8),
        ({"num_beams": 3, "temperature": 0.7}, 5, lambda c: c.num_beams == 3),
    ],
)
def test_clamp_settings_notes_every_change(changes, prompt_len, check):
    cfg, notes = clamp_settings(GenerationConfig(**changes), _lm(), prompt_len, Caps(max_new_tokens=1024, num_beams=8))
    assert check(cfg), cfg
    assert len(notes) >= 1, notes
    assert all(isinstance(n, str) and n for n in notes)


def test_clamp_settings_leaves_good_settings_alone():
    cfg = GenerationConfig(max_new_tokens=10, temperature=0.7, top_k=20, top_p=0.9)
    clamped, notes = clamp_settings(cfg, _lm(), 5)
    assert notes == [] and clamped == cfg and clamped is not cfg


def test_clamp_settings_long_source_for_seq2seq():
    cfg, notes = clamp_settings(GenerationConfig(max_new_tokens=100), _lm("seq2seq", max_positions=32), 50)
    assert cfg.truncate_prompt and cfg.max_new_tokens == 31
    assert any("truncated on the left" in n for n in notes)


def test_clamp_settings_relative_positions_have_no_source_limit():
    cfg, notes = clamp_settings(GenerationConfig(max_new_tokens=100), _lm("seq2seq", 32, positional="relative"), 50)
    assert not cfg.truncate_prompt and cfg.max_new_tokens == 100 and notes == []
