"""Model internals that parity tests do not reach: fast paths agree with the plain computation."""

from __future__ import annotations

import torch

from playground.config import ModelConfig
from playground.models import build_model
from playground.models.attention import attend
from playground.models.layers import init_weights


def _tiny(**overrides) -> torch.nn.Module:
    config = ModelConfig(family="llama", vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, **overrides)
    torch.manual_seed(0)
    model = build_model(config)
    init_weights(model, std=0.2)
    return model.eval()


def test_the_tied_head_is_laid_out_once_and_again_after_a_change_or_a_move():
    model = _tiny()
    ids, hidden = torch.tensor([[1, 2, 3]]), torch.randn(1, 1, 32)
    with torch.inference_mode():
        plain = model.tied_head(hidden)  # never prepared: the embedding itself
        model.prepare()
        assert model.tied_head.weight_t.is_contiguous() and model.tied_head.weight_t.shape == (32, 50)
        torch.testing.assert_close(model.tied_head(hidden), plain)
        before = model(ids)
    with torch.no_grad():
        model.embed.weight.mul_(2.0)
    model.prepare()  # weights changed in place: their layouts again (nothing is checked per call)
    with torch.inference_mode():
        after = model(ids)
        assert not torch.allclose(before, after)
        torch.testing.assert_close(model.tied_head(hidden), hidden @ model.embed.weight.t())
    model.to(torch.float64)  # a move or a cast lays the head out again from the converted embedding
    assert model.tied_head.weight_t.dtype == torch.float64 and not model.invariant_ready
    with torch.inference_mode():
        torch.testing.assert_close(model.tied_head(hidden.double()), hidden.double() @ model.embed.weight.t())


def test_last_only_logits_equal_the_last_row():
    model = _tiny()
    ids = torch.tensor([[4, 5, 6, 7]])
    with torch.inference_mode():
        torch.testing.assert_close(model(ids, last_only=True), model(ids)[:, -1:])


def test_single_query_grouped_attention_fast_path_matches_explicit():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 1, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    fast, _ = attend(q, k, v, scale=0.3)
    slow, weights = attend(q, k, v, scale=0.3, need_weights=True)
    torch.testing.assert_close(fast, slow)
    assert weights.shape == (2, 6, 1, 9)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 6, 1))
