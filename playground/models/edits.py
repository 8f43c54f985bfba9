"""The interventions (`playground.interventions`) as values of a pass: where each one acts and what it writes.

An edit is part of what a pass computes, never a change to the shared model: each `models.rows.Segment`
carries its request's edits, and the pass applies them to that segment's rows only (`Rows.edit_heads`,
`edit_mlp`, `edit_block`; the captured step's `StaticRows` does the same from per-row buffers). So an
edited request shares a batched pass with plain ones, and nobody else's rows ever see its edits.

Where each acts, on every block kind (pre-, post- and sandwich norms, parallel residual, seq2seq blocks),
exactly where transformers' modules would be hooked:
- a head: its slice of the attention's heads (L0, L1, h·d_head) before the output projection (o_proj's
  input), set to zero or its mean;
- an MLP: the block's MLP output (L0, L1, d), replaced by zero or its mean;
- Steer / Patch: the block's output, the residual stream after it (the decoder layer's output).

The model's own passes (`forward`, `encode`, `decode`: one segment) take the edits of the `edited` scope, and
call the taps of the `tapped` scope with what each site holds once edited (what an analysis reads there):

    with edited(model, interventions), tapped(model, {(MLP, "decoder", 3): kept.append}):
        logits = model(ids, cache)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from playground.interventions import Ablate, Intervention, Patch, Steer


def blocks_of(model: nn.Module, stack: str) -> nn.ModuleList:
    """The blocks of a decoder-only model, or of one stack ("decoder" / "encoder") of a seq2seq model."""
    if hasattr(model, "blocks"):
        return model.blocks
    return model.encoder.blocks if stack == "encoder" else model.decoder.blocks


# Where a pass applies an edit: the heads of a self-attention, of a cross-attention, an MLP's output, a block's output.
HEADS, CROSS_HEADS, MLP, BLOCK = "heads", "cross-heads", "mlp", "block"


def site(iv: Intervention) -> str:
    """Where in its block `iv` acts (`HEADS`, `CROSS_HEADS`, `MLP` or `BLOCK`)."""
    if isinstance(iv, Ablate):
        if iv.component != "head":
            return MLP
        return CROSS_HEADS if iv.attention == "cross" else HEADS
    if isinstance(iv, (Steer, Patch)):
        return BLOCK
    raise TypeError(f"not an intervention: {iv!r}")


def value(iv: Intervention, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """What `iv` writes or adds, in the pass's dtype: a head's or an MLP's mean (None: zero), a steering
    vector times its scale (multiplied in float64, then rounded once), a patch's value."""
    if isinstance(iv, Ablate):
        return None if iv.mean is None else torch.tensor(iv.mean, dtype=dtype, device=device)
    if isinstance(iv, Steer):
        return torch.tensor(iv.vector, dtype=torch.float64).mul(iv.scale).to(dtype=dtype, device=device)
    if isinstance(iv, Patch):
        return torch.tensor(iv.value, dtype=dtype, device=device)
    raise TypeError(f"not an intervention: {iv!r}")


# A reader of one site of the model's own passes: (site, stack, layer) -> called with the site's value (B, T, ·).
Taps = Mapping[tuple[str, str, int], Callable[[torch.Tensor], None]]


class Scoped:
    """The edits and taps of the model's own passes now (`edited`, `tapped`): none outside any scope."""

    scoped_edits: tuple[Intervention, ...] = ()
    scoped_taps: Taps = {}


@contextmanager
def edited(model: nn.Module, interventions: Sequence[Intervention] = ()) -> Iterator[None]:
    """Every pass the model runs itself inside the `with` carries `interventions` (already checked against the
    model's config) as its segment's edits. The app runs every pass on one thread, one at a time, so a scope
    never reaches another visitor's pass.

    A wrapper that puts them on its own segments (`applies_own_edits`: the batch scheduler's stand-in, whose
    passes run later, beside other requests') is left alone."""
    if not interventions or getattr(model, "applies_own_edits", False):
        yield
        return
    before = model.scoped_edits
    model.scoped_edits = tuple(interventions)
    try:
        yield
    finally:
        model.scoped_edits = before


@contextmanager
def tapped(model: nn.Module, taps: Taps) -> Iterator[None]:
    """Every pass the model runs itself inside the `with` calls `taps` with the value at each of their sites, its
    edits applied: a block's output, an MLP's output, the heads before the output projection (B, T, ·)."""
    before = model.scoped_taps
    model.scoped_taps = {**before, **taps}
    try:
        yield
    finally:
        model.scoped_taps = before
