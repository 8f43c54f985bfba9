"""Divergence of an edited run from the original, and the one-layer head sweep, on real tiny files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import playground
from playground.analysis.divergence import divergence, divergence_of_runs, first_difference, head_sweep, sweep_step
from playground.generation import GenerationConfig, generate_all
from playground.interventions import Ablate, Steer
from tests.hf_tiny import bart_like, llama_like, save_decoder, save_seq2seq

PROMPT = [5, 9, 23, 40, 7, 11]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_decoder(directory, "llama", llama_like(num_hidden_layers=3), init_std=0.1)
    return playground.load_model(directory)


def test_divergence_along_the_original_tokens(lm, one_thread):
    edits = (Ablate(1, head=2), Steer(0, torch.randn(lm.config.d_model, generator=torch.Generator().manual_seed(0)), 3.0))
    original = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=8))
    edited = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=8, interventions=edits))
    div = divergence_of_runs(lm, original, edited)
    ids = PROMPT + original.token_ids[:-1]
    p = torch.log_softmax(lm.logits([ids])[0, len(PROMPT) - 1:].double(), -1)
    q = torch.log_softmax(lm.logits([ids], interventions=edits)[0, len(PROMPT) - 1:].double(), -1)
    expected = F.kl_div(q, p, log_target=True, reduction="none").sum(-1)
    np.testing.assert_allclose(div.kl, expected.numpy(), atol=1e-9)
    assert div.kl.shape == (8,) and div.kl.max() > 1e-3
    np.testing.assert_allclose(div.original_prob, [s.prob for s in original.path], rtol=1e-5)
    assert (div.rank == 0).all() == (div.prob >= q.exp().max(-1).values.numpy() - 1e-12).all()
    assert q[0].argmax() == edited.token_ids[0]  # the first step reads the same prompt in both runs
    assert div.first_difference == first_difference(original.token_ids, edited.token_ids)
    same = divergence(lm, PROMPT, original.token_ids, (), edited_tokens=original.token_ids)
    assert (same.kl == 0).all() and (same.rank == 0).all() and same.first_difference is None


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_head_sweep_ranks_heads_by_the_drop_of_the_chosen_token(lm, one_thread):
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=3))
    sweep = sweep_step(lm, result, 2, 1)
    ids = PROMPT + result.token_ids[:2]
    token = result.token_ids[2]
    base = torch.log_softmax(lm.logits([ids])[0, -1].double(), -1)[token]
    for h in range(lm.config.n_heads):
        ablated = torch.log_softmax(lm.logits([ids], interventions=[Ablate(1, head=h)])[0, -1].double(), -1)[token]
        assert sweep.logprob_drop[h] == pytest.approx(float(base - ablated), abs=1e-6)
    assert sorted(sweep.logprob_drop[sweep.order].tolist(), reverse=True) == sweep.logprob_drop[sweep.order].tolist()
    calls = []
    partial = head_sweep(lm, ids, token, 1, progress=lambda done, total: calls.append((done, total)) or done < 2)
    assert calls == [(1, 4), (2, 4)] and np.isnan(partial.logprob_drop[2:]).all() and partial.order[-2:] == [2, 3]
    with pytest.raises(ValueError, match="layers 0..2"):
        head_sweep(lm, ids, token, 3)


def test_seq2seq_divergence_and_sweep(tmp_path, one_thread):
    save_seq2seq(tmp_path, "bart", bart_like(forced_eos_token_id=None))  # raw = processed distribution
    s2s = playground.load_model(tmp_path)
    source = [5, 9, 23, 40, 7, 11, 30]
    edits = (Ablate(0, head=1, attention="cross"),)
    original = generate_all(s2s, source, GenerationConfig(max_new_tokens=5))
    edited = generate_all(s2s, source, GenerationConfig(max_new_tokens=5, interventions=edits))
    div = divergence_of_runs(s2s, original, edited)
    np.testing.assert_allclose(div.original_prob, [s.prob for s in original.path], rtol=1e-5)
    assert div.kl.max() > 0
    sweep = sweep_step(s2s, original, 1, 1, attention="cross")
    assert sweep.logprob_drop.shape == (s2s.config.n_heads,) and not np.isnan(sweep.logprob_drop).any()


def test_whole_sequence_analyses_of_an_edited_run_see_its_edits(lm, one_thread):
    """RunCache (attention step by step, internals) replays a branch with the branch's own edits."""
    import dataclasses

    from playground.analysis.recorded import RunCache

    steer = Steer(0, torch.randn(lm.config.d_model, generator=torch.Generator().manual_seed(3)), 4.0)
    edited_run = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=3, interventions=(steer,)))
    same_tokens = dataclasses.replace(edited_run, interventions=[])
    with_edits = RunCache(lm, edited_run).internals(1)["self"]["q"]
    without = RunCache(lm, same_tokens).internals(1)["self"]["q"]
    assert np.abs(with_edits - without).max() > 1e-3
    torch.testing.assert_close(torch.from_numpy(RunCache(lm, edited_run).internals(0)["self"]["q"]),
                               torch.from_numpy(RunCache(lm, same_tokens).internals(0)["self"]["q"]), atol=0, rtol=0)
