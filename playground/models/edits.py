"""Applying interventions (`playground.interventions`) to our models for the length of a forward pass.

    with edited(model, interventions):
        logits = model(ids, cache)

Each edit is a hook on one of the model's own modules, installed on entry and removed in `finally`:
- a head: a forward pre-hook on the attention's output projection (`attn.out`, or `cross.out`) that
  overwrites the head's slice of its input (B, T, h·d_head), so the head adds nothing (or its mean);
- an MLP: a forward hook on the block's `mlp` that replaces its output (B, T, d_model);
- Steer / Patch: a forward hook on the block that edits its output, the residual stream after it.

Every block kind (pre-, post- and sandwich norms, parallel residual, seq2seq blocks) routes its
attention through `attn.out` and its MLP through `mlp`, so the same hooks mean the same thing on
every family, exactly where transformers' modules would be hooked (o_proj's input, the MLP's output,
the decoder layer's output). Without interventions nothing is installed: the model runs as always.

The hooks live only inside the `with`: the app runs every forward pass on one thread, one at a time,
so a visitor's edits never reach another visitor's pass on the same shared model.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from playground.interventions import Ablate, Intervention, Patch, Steer
from playground.models.rows import Batch


def blocks_of(model: nn.Module, stack: str) -> nn.ModuleList:
    """The blocks of a decoder-only model, or of one stack ("decoder" / "encoder") of a seq2seq model."""
    if hasattr(model, "blocks"):
        return model.blocks
    return model.encoder.blocks if stack == "encoder" else model.decoder.blocks


def _batch_of(args: tuple, kwargs: dict) -> Batch:
    """The pass a block was called in (its last argument: `models.rows.Batch`)."""
    return kwargs["batch"] if "batch" in kwargs else args[-1]


def _install(model: nn.Module, iv: Intervention, dtype: torch.dtype, device: torch.device):
    block = blocks_of(model, iv.stack)[iv.layer]
    if isinstance(iv, Ablate):
        if iv.component == "head":
            attn = block.cross if iv.attention == "cross" else block.attn
            d = attn.head_dim
            lo, hi = iv.head * d, (iv.head + 1) * d
            mean = None if iv.mean is None else torch.tensor(iv.mean, dtype=dtype, device=device)

            def ablate_head(module: nn.Module, args: tuple) -> tuple:
                x = args[0].clone()  # (B, T, h·d_head)
                x[..., lo:hi] = 0.0 if mean is None else mean
                return (x, *args[1:])

            return attn.out.register_forward_pre_hook(ablate_head)
        mean = None if iv.mean is None else torch.tensor(iv.mean, dtype=dtype, device=device)

        def ablate_mlp(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
            return torch.zeros_like(output) if mean is None else mean.expand_as(output).clone()

        return block.mlp.register_forward_hook(ablate_mlp)
    if isinstance(iv, Steer):
        delta = torch.tensor(iv.vector, dtype=torch.float64).mul(iv.scale).to(dtype=dtype, device=device)

        def steer(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
            return output + delta

        return block.register_forward_hook(steer)
    if isinstance(iv, Patch):
        value = torch.tensor(iv.value, dtype=dtype, device=device)

        def patch(module: nn.Module, args: tuple, kwargs: dict, output: torch.Tensor) -> torch.Tensor:
            return _batch_of(args, kwargs).patch(output, iv.position, value)

        return block.register_forward_hook(patch, with_kwargs=True)
    raise TypeError(f"not an intervention: {iv!r}")


@contextmanager
def edited(model: nn.Module, interventions: Sequence[Intervention] = ()) -> Iterator[None]:
    """Apply `interventions` (already checked against the model's config) inside the `with`.

    A wrapper that applies them itself around each real pass (`applies_own_edits`: the batch scheduler's
    stand-in, whose passes run later, beside other requests') is left alone."""
    if not interventions or getattr(model, "applies_own_edits", False):
        yield
        return
    dtype, device = model.dtype, model.device
    handles = []
    try:
        for iv in interventions:
            handles.append(_install(model, iv, dtype, device))
        yield
    finally:
        for handle in handles:
            handle.remove()
