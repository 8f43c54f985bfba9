"""Beam search equals transformers' generate(num_beams=...): the same n-best sequences and scores."""

from __future__ import annotations

import pytest
import torch

import playground
from playground.generation import GenerationConfig, generate, generate_all
from tests.hf_tiny import gpt2_like, llama_like, save_decoder

PROMPT = [5, 9, 23, 40, 7]
SETTINGS = [
    # num_beams, length_penalty, early_stopping
    (2, 1.0, False),
    (2, 0.6, True),
    (3, 1.5, False),
    (4, 0.6, False),
    (4, 1.5, True),
    (3, -0.5, "never"),
    (4, 2.0, "never"),
]


@pytest.fixture(scope="module", params=["gpt2", "llama-gqa"])
def pair(request, tmp_path_factory):
    family, kwargs = {
        "gpt2": ("gpt2", gpt2_like()),
        "llama-gqa": ("llama", llama_like(num_attention_heads=8, num_key_value_heads=2)),
    }[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_decoder(directory, family, kwargs, init_std=0.1)
    return reference, playground.load_model(directory)


def _hf_beams(reference, n_new, num_beams, length_penalty, early_stopping, eos, **kwargs):
    with torch.no_grad():
        out = reference.generate(
            torch.tensor([PROMPT]), max_new_tokens=n_new, do_sample=False, num_beams=num_beams,
            num_return_sequences=num_beams, length_penalty=length_penalty, early_stopping=early_stopping,
            eos_token_id=eos, pad_token_id=0, return_dict_in_generate=True, output_scores=True, **kwargs,
        )
    lengths = (out.beam_indices + 1).bool().sum(dim=1).tolist()
    seqs = [row[len(PROMPT): len(PROMPT) + n].tolist() for row, n in zip(out.sequences, lengths)]
    return seqs, out.sequences_scores.tolist()


def _reachable_eos(lm, cfg: GenerationConfig) -> int:
    """A token the best beam produces mid-way, made the EOS token so that hypotheses finish early."""
    free = generate_all(lm, PROMPT, cfg).sequences
    return free[0].token_ids[3]


@pytest.mark.parametrize("num_beams,length_penalty,early_stopping", SETTINGS)
def test_beam_search_matches_transformers(pair, num_beams, length_penalty, early_stopping):
    reference, lm = pair
    cfg = GenerationConfig(max_new_tokens=10, num_beams=num_beams, length_penalty=length_penalty,
                           early_stopping=early_stopping)
    eos = _reachable_eos(lm, cfg)
    lm.config.eos_token_id = eos
    try:
        result = generate_all(lm, PROMPT, cfg)
        uncached = generate_all(lm, PROMPT, cfg.replace(use_cache=False))
    finally:
        lm.config.eos_token_id = 2
    seqs, scores = _hf_beams(reference, 10, num_beams, length_penalty, early_stopping, eos)
    assert [s.token_ids for s in result.sequences] == seqs
    torch.testing.assert_close(torch.tensor([s.score for s in result.sequences]), torch.tensor(scores), atol=1e-4, rtol=0)
    assert result.token_ids == seqs[0]
    assert [s.token_ids for s in uncached.sequences] == seqs
    # the test exercises EOS: hypotheses ended on it during the search (long ones may win at the end)
    assert any(b.finished and b.token_ids[-1] == eos for e in result.steps for b in e.beams)


def test_beam_search_without_eos_and_with_repetition_penalty(pair):
    reference, lm = pair
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=8, num_beams=3, repetition_penalty=1.3))
    seqs, scores = _hf_beams(reference, 8, 3, 1.0, False, 2, repetition_penalty=1.3)
    assert [s.token_ids for s in result.sequences] == seqs
    torch.testing.assert_close(torch.tensor([s.score for s in result.sequences]), torch.tensor(scores), atol=1e-4, rtol=0)


def test_beam_events_show_live_beams(pair):
    _, lm = pair
    events = list(generate(lm, PROMPT, GenerationConfig(max_new_tokens=6, num_beams=4, top_candidates=3)))
    for event in events[:-1]:
        live = [b for b in event.beams if not b.finished]
        assert len(live) == 4 and all(len(b.token_ids) == event.step + 1 for b in live)
        assert [b.score for b in live] == sorted((b.score for b in live), reverse=True)
        assert event.token_ids == live[0].token_ids
        assert event.candidates and any(c.chosen for c in event.candidates)
    assert events[-1].finished and events[-1].finish_reason in ("length", "eos")


def test_final_beam_event_describes_the_best_hypothesis(pair):
    """The last event's token, probability and candidates belong to the step that completed the
    returned best hypothesis, and beams that ended are not listed as live ones."""
    _, lm = pair
    cfg = GenerationConfig(max_new_tokens=6, num_beams=3, top_candidates=50)
    *earlier, last = list(generate(lm, PROMPT, cfg))
    assert last.finish_reason == "length" and len(last.token_ids) == 6
    assert last.token_id == last.token_ids[-1]
    assert all(b.score > -1e8 for b in last.beams)
    chosen = [c for c in last.candidates if c.chosen]
    assert [c.token_id for c in chosen] == [last.token_id]
    # Its score (length penalty 1: summed log-probability / length) extends the live beam it came from
    # by log p(last token).
    best = next(b for b in last.beams if b.finished and b.token_ids == last.token_ids)
    parent = next(b for b in earlier[-1].beams if b.token_ids == last.token_ids[:-1])
    expected = (parent.score + torch.log(torch.tensor(last.prob)).item()) / len(last.token_ids)
    assert abs(best.score - expected) < 1e-5
