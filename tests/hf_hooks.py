"""The same edits as `playground.interventions`, made with forward hooks on transformers' own models:
zeroing a head's slice of the attention output projection's input (a forward pre-hook), replacing
the MLP's output (a forward hook), adding to or overwriting the decoder layer's output (a forward hook).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from playground.interventions import Ablate, Patch, Steer

# Where each family keeps its blocks, and inside a block its attention output projection, its
# cross-attention output projection and its MLP (OPT and BART have no MLP module: fc2's output is it).
LAYER_LISTS = ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers", "decoder.block")
ENCODER_LISTS = ("model.encoder.layers", "encoder.block")
OUT_PROJ = ("self_attn.o_proj", "attn.c_proj", "attention.dense", "attn.attention.out_proj", "self_attn.out_proj",
            "layer.0.SelfAttention.o")
CROSS_PROJ = ("encoder_attn.out_proj", "layer.1.EncDecAttention.o")
MLP = ("mlp", "fc2", "layer.2.DenseReluDense", "layer.1.DenseReluDense")


def _get(root: nn.Module, path: str) -> nn.Module | None:
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


def _first(root: nn.Module, paths: tuple[str, ...]) -> nn.Module:
    for path in paths:
        found = _get(root, path)
        if found is not None:
            return found
    raise LookupError(f"none of {paths} in {type(root).__name__}")


def hf_layers(model: nn.Module, stack: str = "decoder") -> nn.ModuleList:
    return _first(model, ENCODER_LISTS if stack == "encoder" else LAYER_LISTS)


def _edit_output(output, fn):
    if isinstance(output, tuple):
        return (fn(output[0]), *output[1:])
    return fn(output)


def _hook(model: nn.Module, iv, head_dim: int) -> torch.utils.hooks.RemovableHandle:
    layer = hf_layers(model, iv.stack)[iv.layer]
    if isinstance(iv, Ablate) and iv.component == "head":
        proj = _first(layer, CROSS_PROJ if iv.attention == "cross" else OUT_PROJ)
        lo, hi = iv.head * head_dim, (iv.head + 1) * head_dim
        mean = None if iv.mean is None else torch.tensor(iv.mean)

        def pre(module, args):
            x = args[0].clone()
            x[..., lo:hi] = 0.0 if mean is None else mean
            return (x, *args[1:])

        return proj.register_forward_pre_hook(pre)
    if isinstance(iv, Ablate):
        mlp = _first(layer, MLP)
        mean = None if iv.mean is None else torch.tensor(iv.mean)
        return mlp.register_forward_hook(
            lambda m, a, out: torch.zeros_like(out) if mean is None else mean.expand_as(out).clone()
        )
    if isinstance(iv, Steer):
        delta = torch.tensor(iv.vector) * iv.scale
        return layer.register_forward_hook(lambda m, a, out: _edit_output(out, lambda h: h + delta))
    if isinstance(iv, Patch):
        value = torch.tensor(iv.value)

        def overwrite(h: torch.Tensor) -> torch.Tensor:  # full forward passes only: position = row
            h = h.clone()
            h[:, iv.position] = value
            return h

        return layer.register_forward_hook(lambda m, a, out: _edit_output(out, overwrite))
    raise TypeError(iv)


@contextmanager
def hf_edited(model: nn.Module, interventions, *, head_dim: int, encoder_head_dim: int | None = None):
    """Edit `model` inside the `with`; head_dim: the decoder's (and the encoder's) head size."""
    handles = [_hook(model, iv, encoder_head_dim if iv.stack == "encoder" else head_dim) for iv in interventions]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
