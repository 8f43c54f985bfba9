"""How checkpoints become our parameters: fused, transposed and cast in one copy, tokenizer optional."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

import playground
from tests.hf_tiny import llama_like, save_decoder


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama-gqa")
    save_decoder(directory, "llama", llama_like(num_attention_heads=4, num_key_value_heads=2))
    return directory


def test_fused_weights_are_the_file_tensors_transposed_side_by_side(llama_dir):
    file = load_file(llama_dir / "model.safetensors")
    model = playground.load_model(llama_dir).model
    attn, mlp = model.blocks[1].attn, model.blocks[1].mlp
    q, k, v = (file[f"model.layers.1.self_attn.{n}_proj.weight"] for n in "qkv")
    assert torch.equal(attn.qkv.weight, torch.cat([q, k, v]).t())
    assert attn.qkv.weight.is_contiguous() and attn.qkv.weight.shape == (48, 48 + 2 * 24)
    gate, up = file["model.layers.1.mlp.gate_proj.weight"], file["model.layers.1.mlp.up_proj.weight"]
    assert torch.equal(mlp.gate_up.weight, torch.cat([gate, up]).t())
    assert torch.equal(mlp.down.weight, file["model.layers.1.mlp.down_proj.weight"].t())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_cast_load_holds_exactly_the_cast_weights(llama_dir, dtype):
    full = playground.load_model(llama_dir).model.state_dict()
    cast = playground.load_model(llama_dir, dtype=dtype).model.state_dict()
    assert full.keys() == cast.keys()
    for name, tensor in cast.items():
        assert tensor.dtype == getattr(torch, dtype), name
        assert torch.equal(tensor, full[name].to(tensor.dtype)), name


def test_tokenizer_false_loads_the_same_model_without_a_tokenizer(llama_dir):
    with_tokenizer = playground.load_model("weights/tiny-lm")
    without = playground.load_model("weights/tiny-lm", tokenizer=False)
    assert with_tokenizer.tokenizer is not None
    assert without.tokenizer is None and "tokenizer=False" in without.tokenizer_error
    ids = torch.tensor([[5, 17, 300, 42]])
    assert torch.equal(without.logits(ids), with_tokenizer.logits(ids))
    hf = playground.load_model(llama_dir, tokenizer=False)
    assert hf.tokenizer is None and "tokenizer=False" in hf.tokenizer_error


def test_blocked_transpose_equals_cat_then_transpose_across_block_edges():
    from playground.models.layers import TRANSPOSE_ROWS, transposed

    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(rows, 7, generator=g) for rows in (TRANSPOSE_ROWS + 3, 5, 2 * TRANSPOSE_ROWS)]
    out = transposed(parts)
    assert out.is_contiguous() and torch.equal(out, torch.cat(parts).t())
    half = transposed(parts, torch.bfloat16)
    assert half.dtype == torch.bfloat16 and torch.equal(half, torch.cat(parts).t().to(torch.bfloat16))
