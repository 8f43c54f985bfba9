"""Steering vectors and mean activations against transformers' own hidden states on real files."""

from __future__ import annotations

import pytest
import torch

import playground
from playground.analysis.steering import (
    contrast_vector,
    mean_ablation,
    patch_from_run,
    residual_after,
    run_vector,
    token_vector,
    typical_norm,
)
from playground.generation import GenerationConfig, generate_all
from playground.interventions import Ablate
from tests.hf_hooks import hf_layers
from tests.hf_tiny import gpt2_like, llama_like, opt_like, save_decoder

POSITIVE = [5, 9, 23, 40, 7, 11]
NEGATIVE = [60, 61, 3, 17, 80]
CASES = {"llama": ("llama", llama_like(num_hidden_layers=3)), "gpt2": ("gpt2", gpt2_like(n_layer=3))}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    family, kwargs = CASES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_decoder(directory, family, kwargs, init_std=0.1)
    return reference, playground.load_model(directory)


def _hidden(reference, ids, layer):
    """transformers' residual after block `layer` (not the last one, which it returns normalised)."""
    with torch.no_grad():
        return reference(torch.tensor([ids]), output_hidden_states=True).hidden_states[layer + 1][0]


def test_contrast_vector_is_the_mean_residual_difference(pair, one_thread):
    reference, lm = pair
    sv = contrast_vector(lm, POSITIVE, NEGATIVE, 1)
    pos, neg = _hidden(reference, POSITIVE, 1), _hidden(reference, NEGATIVE, 1)
    torch.testing.assert_close(sv.vector, pos.mean(0) - neg.mean(0), atol=1e-5, rtol=0)
    assert sv.norm == pytest.approx(float(sv.vector.norm()))
    assert sv.typical_norm == pytest.approx(float(torch.cat([pos, neg]).norm(dim=-1).mean()), rel=1e-5)
    assert sv.steer(-2.0).scale == -2.0 and sv.steer().layer == 1
    assert typical_norm(lm, POSITIVE, 0) == pytest.approx(float(_hidden(reference, POSITIVE, 0).norm(dim=-1).mean()),
                                                          rel=1e-5)


def test_token_vector_is_the_unembedding_and_raises_that_token(pair, one_thread):
    reference, lm = pair
    token = 42
    sv = token_vector(lm, token, lm.config.n_layers - 1, POSITIVE)
    torch.testing.assert_close(sv.vector, reference.get_output_embeddings().weight[token].detach(), atol=0, rtol=0)
    before = lm.logits([POSITIVE])[0, -1]
    after = lm.logits([POSITIVE], interventions=[sv.steer(3.0 * sv.typical_norm / sv.norm)])[0, -1]
    assert (after - before)[token] > 0 and (after - before).argmax() == token


def test_run_vector_and_patch_carry_another_runs_residual(pair, one_thread):
    reference, lm = pair
    other = generate_all(lm, NEGATIVE, GenerationConfig(max_new_tokens=4))
    sv = run_vector(lm, other, 2, 1)
    ids = NEGATIVE + other.token_ids[:2]
    torch.testing.assert_close(sv.vector, _hidden(reference, ids, 1)[-1], atol=1e-5, rtol=0)
    # patching that value at the same layer and position of a run over the same tokens changes nothing
    patch = patch_from_run(lm, other, 2, 1)
    assert patch.position == len(ids) - 1
    again = generate_all(lm, NEGATIVE, GenerationConfig(max_new_tokens=4, interventions=(patch,)))
    assert again.token_ids == other.token_ids
    torch.testing.assert_close(lm.logits([ids], interventions=[patch]), lm.logits([ids]), atol=1e-5, rtol=0)


def test_mean_ablation_uses_the_parts_mean_over_the_prompt(pair, one_thread):
    reference, lm = pair
    kept = []
    layer = hf_layers(reference)[1]
    mlp = layer.mlp
    handle = mlp.register_forward_hook(lambda m, a, out: kept.append(out[0]))
    try:
        with torch.no_grad():
            reference(torch.tensor([POSITIVE]))
    finally:
        handle.remove()
    ablate = mean_ablation(lm, POSITIVE, 1, component="mlp")
    assert ablate.mode == "mean" and len(ablate.mean) == lm.config.d_model
    torch.testing.assert_close(torch.tensor(ablate.mean, dtype=torch.float32), kept[0].mean(0), atol=1e-5, rtol=0)
    head = mean_ablation(lm, POSITIVE, 0, head=1)
    assert len(head.mean) == lm.config.head_dim
    # a mean-ablated head on a one-token prompt: its output at that position is its mean, so nothing changes
    one = mean_ablation(lm, POSITIVE[:1], 0, head=1)
    torch.testing.assert_close(lm.logits([POSITIVE[:1]], interventions=[one]), lm.logits([POSITIVE[:1]]),
                               atol=1e-5, rtol=0)
    assert isinstance(one, Ablate)


def test_bad_requests_say_what_to_do(pair, tmp_path):
    _, lm = pair
    with pytest.raises(ValueError, match="layers 0..2"):
        contrast_vector(lm, POSITIVE, NEGATIVE, 3)
    with pytest.raises(ValueError, match="empty"):
        contrast_vector(lm, [], NEGATIVE, 0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        token_vector(lm, 10_000, 0, POSITIVE)
    with pytest.raises(ValueError, match="heads 0"):
        mean_ablation(lm, POSITIVE, 0, head=99)
    save_decoder(tmp_path, "opt", opt_like(word_embed_proj_dim=24, num_attention_heads=3, do_layer_norm_before=False))
    projected = playground.load_model(tmp_path)
    with pytest.raises(ValueError, match="contrast pair"):
        token_vector(projected, 5, 0, POSITIVE)
    assert residual_after(projected, POSITIVE, 0).shape == (len(POSITIVE), projected.config.d_model)
