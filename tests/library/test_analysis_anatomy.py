"""Anatomy: every parameter of the model in its diagram, the wiring as the blocks compute it, and the
residual stream's norm per layer."""

from __future__ import annotations

import numpy as np
import pytest

from playground.analysis import anatomy, residual_norms
from playground.viz.anatomy import anatomy_figure, residual_norm_caption, residual_norm_figure
from tests.analysis_models import FAMILIES

pytestmark = pytest.mark.usefixtures("one_thread")

WIRING = {  # (stack, pre-LN) per model: the defaults, GPT-2 and T5 are pre-LN; the 2017 paper and BART post-LN
    "tiny-lm": {"decoder": True}, "gpt2": {"decoder": True}, "t5": {"encoder": True, "decoder": True},
    "tiny-seq2seq": {"encoder": False, "decoder": False}, "bart": {"encoder": False, "decoder": False},
}


@pytest.fixture(scope="module", params=FAMILIES)
def run(request, recorded_runs):
    return recorded_runs(request.param, new_tokens=6)


def test_every_parameter_is_in_the_diagram(run):
    name, lm, result = run
    a = anatomy(lm)
    assert a["parameters"] == a["model_parameters"] == lm.parameter_count
    assert {s["name"]: s["pre"] for s in a["stacks"]} == WIRING[name]
    for stack in a["stacks"]:
        blocks = lm.model.blocks if lm.kind == "decoder" else getattr(lm.model, stack["name"]).blocks
        assert stack["layers"] == len(blocks)
        assert stack["block_params"] == sum(p.numel() for p in blocks[0].parameters())
        keys = [p["key"] for p in stack["parts"] if p["repeat"] > 1]
        assert keys == ["attn_norm", "attn"] + (["cross_norm", "cross"] if stack["name"] == "decoder" and
                                                 lm.kind == "seq2seq" else []) + ["mlp_norm", "mlp"]
        attn = next(p for p in stack["parts"] if p["key"] == "attn")
        c = lm.config.encoder_config() if stack["name"] == "encoder" else lm.config  # its own head sizes
        assert dict(attn["tensors"])["qkv.weight"] == (c.d_model, (c.n_heads + 2 * c.n_kv_heads) * c.head_dim)
    assert a["embedding"]["tensors"] == [("weight", (lm.config.vocab_size, lm.config.d_model))]
    assert (a["head"]["note"] == "tied") == lm.config.tie_word_embeddings


def test_wiring_equations():
    from playground.analysis.anatomy import wiring

    assert wiring(True, False) == ["h1 = x + SelfAttention(Norm(x))", "x' = h1 + MLP(Norm(h1))"]
    assert wiring(False, True) == ["h1 = Norm(x + SelfAttention(x))", "h2 = Norm(h1 + CrossAttention(h1, enc))",
                                   "x' = Norm(h2 + MLP(h2))"]


def test_residual_norms_are_the_recorded_streams_norms(run):
    name, lm, result = run
    norms = residual_norms(result)
    assert norms["norms"].shape == (lm.config.n_layers + 1, len(result.token_ids))
    for step in range(len(result.token_ids)):
        np.testing.assert_allclose(norms["norms"][:, step], np.linalg.norm(result.path[step].capture.residual, axis=1),
                                   rtol=1e-6)
    a = anatomy(lm)
    if not WIRING[name]["decoder"]:  # post-LN: every block output is a LayerNorm output, ‖x‖ ≈ √d · gain
        final = lm.model.decoder.blocks[-1].mlp_norm
        gain = np.linalg.norm(final.weight.detach().numpy()) if final.weight is not None else np.sqrt(lm.config.d_model)
        assert norms["norms"][-1].max() < 3 * gain + 3 * np.linalg.norm(final.bias.detach().numpy())
    fig = residual_norm_figure(norms, 2)
    assert len(fig.data) == 4  # the run's max, min and median over steps, and the selected step
    np.testing.assert_allclose(fig.data[3].y, norms["norms"][:, 2])
    text = residual_norm_caption(a, norms, 2)
    assert ("pre-LN" in text) == WIRING[name]["decoder"] and "step 3" in text  # index 2, shown from 1


def test_figure_draws_every_stack(run):
    name, lm, result = run
    fig = anatomy_figure(anatomy(lm))
    texts = " ".join(a.text for a in fig.layout.annotations if a.text)
    assert "token embedding" in texts and "self-attention" in texts and "MLP" in texts
    assert ("cross-attention" in texts) == (lm.kind == "seq2seq")
    assert f"{lm.parameter_count:,}" in fig.layout.title.text
