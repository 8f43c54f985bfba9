"""Declarative weight maps: checkpoint tensors fused, transposed and cast into our state dict, or refused."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from playground.checkpoints.safetensors_io import TensorReader
from playground.checkpoints.weight_map import Rule, build_state_dict, copy, expand_layers, linear
from playground.errors import CheckpointError


@pytest.fixture
def reader(tmp_path):
    g = torch.Generator().manual_seed(0)
    tensors = {
        "model.q.weight": torch.randn(6, 4, generator=g), "model.k.weight": torch.randn(2, 4, generator=g),
        "model.v.weight": torch.randn(2, 4, generator=g), "model.q.bias": torch.randn(6, generator=g),
        "model.k.bias": torch.randn(2, generator=g), "model.v.bias": torch.randn(2, generator=g),
        "model.norm.weight": torch.ones(4), "model.rotary.inv_freq": torch.ones(2),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    return TensorReader.open([path]), tensors


SHAPES = {"qkv.weight": torch.Size([4, 10]), "qkv.bias": torch.Size([10]), "norm.weight": torch.Size([4])}


def test_fused_and_transposed_weights_equal_the_file_tensors(reader):
    r, t = reader
    rules = linear("qkv", "q", "k", "v", bias=True) + [copy("norm.weight", "norm.weight")]
    state = build_state_dict(r, rules, expected_shapes=SHAPES, ignore=(r"rotary\.inv_freq",), prefix="model.",
                             dtype=torch.bfloat16)
    expected = torch.cat([t["model.q.weight"], t["model.k.weight"], t["model.v.weight"]]).t()
    torch.testing.assert_close(state["qkv.weight"], expected.to(torch.bfloat16), atol=0, rtol=0)
    assert state["qkv.weight"].is_contiguous() and state["qkv.weight"].dtype == torch.bfloat16
    torch.testing.assert_close(state["qkv.bias"].float(), torch.cat([t["model.q.bias"], t["model.k.bias"],
                                                                      t["model.v.bias"]]), atol=1e-2, rtol=0)


def test_every_tensor_is_used_or_ignored_and_every_parameter_found(reader):
    r, _ = reader
    rules = linear("qkv", "q", "k", "v", bias=True) + [copy("norm.weight", "norm.weight")]
    with pytest.raises(CheckpointError, match="unexpected tensor 'model.rotary.inv_freq'"):
        build_state_dict(r, rules, expected_shapes=SHAPES, prefix="model.")
    with pytest.raises(CheckpointError, match="missing tensor 'model.gone.weight'"):
        build_state_dict(r, rules + [copy("gone.weight", "gone.weight")], expected_shapes={**SHAPES, "gone.weight": (1,)},
                         prefix="model.", ignore=(r"rotary\.inv_freq",))
    optional = rules + [copy("gone.bias", "gone.bias", optional=True)]
    assert "gone.bias" not in build_state_dict(r, optional, expected_shapes=SHAPES, prefix="model.",
                                               ignore=(r"rotary\.inv_freq",))
    with pytest.raises(CheckpointError, match="does not fit qkv.weight"):
        build_state_dict(r, rules, expected_shapes={**SHAPES, "qkv.weight": torch.Size([4, 12])}, prefix="model.",
                         ignore=(r"rotary\.inv_freq",))


def test_layer_placeholders_expand_for_decoder_and_encoder_layers():
    rules = expand_layers([Rule("blocks.{i}.w", ("h.{i}.w",), transpose=True), Rule("enc.{e}.w", ("e.{e}.w",)),
                           Rule("top", ("top",))], layers=2, encoder_layers=3)
    assert [r.target for r in rules] == ["blocks.0.w", "blocks.1.w", "enc.0.w", "enc.1.w", "enc.2.w", "top"]
    assert rules[1].sources == ("h.1.w",) and rules[1].transpose and not rules[2].transpose
