"""The batch of a captured decode step: one new token per row, everything a tensor.

`StaticRows` is a `models.rows.Batch` whose pass `torch.compile(fullgraph=True)` and `torch.export`
trace without a break or a data-dependent shape: the token ids, their positions and the caches' lengths
are tensors; each layer's keys live in a static buffer (rows, h_kv, width, d) written at the rows'
position tensors (`index_put_`) and read at its full width, with a mask derived from the positions;
RoPE and absolute positions are computed from the position tensor. What the page records (the chosen
layers' attention rows, the residual stream) and the run's edits (ablate, steer, patch) are tensors
too: `Capture` says what to record, `Edits` what to change, and both are part of a step's shape (a graph
per combination), never of its values.

The buffers are rows of a `KVPool` (`models.kv_pool`): the eager prefill writes a prompt into a row
through an ordinary `KVCache` of that pool, then the captured step reads and extends it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from playground.interventions import Ablate, Intervention, Patch, Steer
from playground.models import edits
from playground.models.attention import attend, attend_padded
from playground.models.rows import Batch


@dataclasses.dataclass(frozen=True)
class Capture:
    """What a step records: the attention rows of `layers` (in this order) and, with `residual`, the
    residual stream after the embedding and after each block."""

    layers: tuple[int, ...] = ()
    residual: bool = False


# One edit of a step: ("heads", layer) or ("mlp", layer) (ablations), ("steer", layer) or ("patch", layer),
# each the nth of its kind on that layer, in the order a run lists them (the order an eager pass applies them).
EditKey = tuple[str, int, int]


# The edits a step takes as per-row values, by their type (the kind of buffer each becomes).
EDIT_KINDS: dict[type, Callable[[Any], str]] = {
    Ablate: lambda iv: "heads" if getattr(iv, "component", "head") == "head" else "mlp",
    Steer: lambda iv: "steer",
    Patch: lambda iv: "patch",
}


def untaken_edit(interventions: Sequence[Intervention]) -> str | None:
    """The name of the first edit a step cannot take as per-row values (None: it takes them all)."""
    return next((type(iv).__name__ for iv in interventions if type(iv) not in EDIT_KINDS), None)


def edit_keys(interventions: Sequence[Intervention]) -> tuple[EditKey, ...]:
    """The shape of a run's edits (which ones, on which layers, in order): a step's graph depends on it. Every edit
    must be one the step takes (`untaken_edit`)."""
    keys: list[EditKey] = []
    for iv in interventions:
        kind = EDIT_KINDS[type(iv)](iv)
        keys.append((kind, iv.layer, sum(k[0] == kind and k[1] == iv.layer for k in keys)))
    return tuple(keys)


class Edits:
    """A step's edits as per-row buffers: each `EditKey` has a mask and values per row (a row without that
    edit has a mask of False, or a position of -1): the same numbers an eager pass's edits give (`models.edits`)."""

    def __init__(self, keys: tuple[EditKey, ...], rows: int, heads: int, head_dim: int, d_model: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        self.keys = keys
        self.buffers: dict[str, torch.Tensor] = {}
        for kind, layer, n in keys:
            name = f"{kind}_{layer}_{n}"
            width = heads * head_dim if kind == "heads" else d_model
            if kind in ("heads", "mlp"):
                self.buffers[f"{name}_mask"] = torch.zeros((rows, 1, width if kind == "heads" else 1), dtype=torch.bool,
                                                           device=device)
            if kind == "patch":
                self.buffers[f"{name}_at"] = torch.full((rows,), -1, dtype=torch.long, device=device)
            self.buffers[f"{name}_value"] = torch.zeros((rows, 1, width), dtype=dtype, device=device)

    def set_row(self, row: int, interventions: Sequence[Intervention], head_dim: int) -> None:
        """Row `row` takes these interventions (their `edit_keys` must be a subset of this step's)."""
        b = self.buffers
        for name, t in b.items():  # clear the row
            t[row] = -1 if name.endswith("_at") else 0
        for (kind, layer, n), iv in zip(edit_keys(interventions), interventions):
            name = f"{kind}_{layer}_{n}"
            value = b[f"{name}_value"]
            written = edits.value(iv, value.dtype, value.device)  # what the eager pass writes or adds (None: zero)
            if kind == "heads":
                lo, hi = iv.head * head_dim, (iv.head + 1) * head_dim
                b[f"{name}_mask"][row, :, lo:hi] = True
                if written is not None:
                    value[row, :, lo:hi] = written
            elif kind == "mlp":
                b[f"{name}_mask"][row] = True
                if written is not None:
                    value[row, 0] = written
            else:
                value[row, 0] = written
                if kind == "patch":
                    b[f"{name}_at"][row] = iv.position


class StaticRows(Batch):
    """One token per row (R, 1) at `positions` (R,), against `keys`/`values` per layer (R, h_kv, width, d).

    `rings[layer]`: that layer keeps its sliding window in a ring of `width` slots (position p in slot
    p % width); `buffers(name)`: the step's edit tensors by name (`Edits`); `long_rope`: longrope's long
    table (a run past the original context from its prompt on)."""

    def __init__(
        self, ids: torch.Tensor, positions: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
        rings: list[bool], *, capture: Capture = Capture(), edits: tuple[EditKey, ...] = (),
        buffers: Callable[[str], torch.Tensor] | None = None, length: int, long_rope: bool = False,
    ) -> None:
        self.tokens, self.positions, self.keys, self.values, self.rings = ids, positions, keys, values, rings
        self.capture, self.length, self.long_rope = capture, length, long_rope
        self.edits: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for kind, layer, n in edits:
            self.edits.setdefault(("block" if kind in ("steer", "patch") else kind, layer), []).append((kind, n))
        self.buffer = buffers
        self.rows = torch.arange(ids.shape[0], device=ids.device)
        self.attention: dict[int, torch.Tensor] = {}  # layer -> (R, h, length): weights by absolute position
        self.residual: list[torch.Tensor] = []  # (R, d) after the embedding and each block
        self._masks: dict[tuple, torch.Tensor] = {}

    def ids(self) -> torch.Tensor:
        return self.tokens

    def absolute(self, module: torch.nn.Module, *, with_ids: bool = False) -> torch.Tensor:
        return module.at(self.positions)[:, None]  # (R, 1, d)

    def rotary(self, rope: torch.nn.Module, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = rope.at(self.positions, dtype, long=self.long_rope and rope.switch_after is not None)
        return cos[:, None, None], sin[:, None, None]  # (R, 1, 1, r)

    def _mask(self, width: int, ring: bool, window: int | None) -> torch.Tensor:
        """(R, 1, 1, width) bool: the slots each row's query sees once its own key is written."""
        key = (width, ring, window)
        if key not in self._masks:
            slot = torch.arange(width, device=self.positions.device)[None, :]
            here = self.positions[:, None]
            visible = slot <= here  # a ring's slots all hold keys of the window once it wrapped
            if window is not None and not ring:
                visible = visible & (slot > here - window)
            self._masks[key] = visible[:, None, None, :]
        return self._masks[key]

    def attend(self, attn: torch.nn.Module, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (R, h, 1, d), k and v (R, h_kv, 1, d) -> (R, 1, h·d): the new keys stored at each row's slot,
        then one masked attention over every slot of the layer."""
        keys, values, ring = self.keys[layer], self.values[layer], self.rings[layer]
        width = keys.shape[2]
        slot = self.positions % width if ring else self.positions
        keys[self.rows, :, slot] = k[:, :, 0]  # index_put_ at each row's own slot
        values[self.rows, :, slot] = v[:, :, 0]
        mask = self._mask(width, ring, attn.window)
        R, h, _, d = q.shape
        if layer in self.capture.layers:
            out, weights = attend(q, keys, values, scale=attn.scale, mask=mask, need_weights=True)
            self.attention[layer] = self._by_position(weights[:, :, 0], ring)
        else:
            out = attend_padded(q, keys, values, mask, scale=attn.scale)
        return out.reshape(R, 1, h * d)

    def _by_position(self, weights: torch.Tensor, ring: bool) -> torch.Tensor:
        """(R, h, width) weights by slot -> (R, h, length) by absolute position (0 where nothing is held)."""
        if not ring:  # slots are positions, `length` of them
            return weights
        width = weights.shape[-1]
        position = torch.arange(self.length, device=weights.device)
        held = (position[None, :] <= self.positions[:, None]) & (position[None, :] > self.positions[:, None] - width)
        return weights[:, :, position % width] * held[:, None, :].to(weights.dtype)

    def edit_heads(self, layer: int, x: torch.Tensor, head_dim: int, *, cross: bool = False) -> torch.Tensor:
        for _, n in self.edits.get(("heads", layer), ()):
            x = torch.where(self.buffer(f"heads_{layer}_{n}_mask"), self.buffer(f"heads_{layer}_{n}_value"), x)
        return x

    def edit_mlp(self, layer: int, y: torch.Tensor) -> torch.Tensor:
        for _, n in self.edits.get(("mlp", layer), ()):
            y = torch.where(self.buffer(f"mlp_{layer}_{n}_mask"), self.buffer(f"mlp_{layer}_{n}_value"), y)
        return y

    def edit_block(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        for kind, n in self.edits.get(("block", layer), ()):
            value = self.buffer(f"{kind}_{layer}_{n}_value")
            if kind == "steer":
                x = x + value
            else:
                at = self.buffer(f"patch_{layer}_{n}_at")
                x = torch.where((self.positions == at)[:, None, None], value, x)
        return x

    def record_residual(self, x: torch.Tensor) -> None:
        if self.capture.residual:
            self.residual.append(x[:, 0])

    def logits(self, x: torch.Tensor, unembed: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor | None]:
        return [unembed(x)]  # (R, 1, V)


def capturable(model: Any) -> str | None:
    """Why `model`'s decoding cannot be captured (None: it can)."""
    if getattr(model.config, "kind", None) != "decoder":
        return "only decoder-only models have a captured step (an encoder-decoder decodes eagerly)"
    if model.positions is not None and not hasattr(model.positions, "at"):
        return "these absolute positions depend on the token ids: eager"
    return None
