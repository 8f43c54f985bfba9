"""A loaded model at another weight precision: a separate model object, built once and cached; and the bytes of
weights one of its tokens reads. (Above `playground.loaded`, which the models below never import.)

`variant(lm, precision)` rounds or quantizes the weights `playground.models.quantize` names (or, for
bf16/fp16 where native kernels are faster, runs the products in that dtype: `low_precision`). The copy
shares every tensor that does not change with the original, so it costs only its new weights, and the
loaded model is never modified: visitors share it, and its variants, safely. The last `CACHE_SIZE`
variants are kept.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from playground.loaded import LoadedModel
from playground.models import kernels
from playground.models.layers import TiedHead
from playground.models.low_precision import FASTER_ON_CPU, LowPrecisionHead, LowPrecisionLinear, native
from playground.models.quantize import FLOAT_DTYPES, INT4_GROUP, PRECISIONS, bytes_per_weight, matrices, rounded_copy

CACHE_SIZE = 2  # variants kept (each costs its weights)


def weight_bytes_per_token(lm: LoadedModel, precision: str | None) -> int:
    """Bytes of weights one generated token reads: every Linear weight, the LM head (the embedding when
    tied: all of it) and one embedding row, at `precision` (None: the model's own dtype), plus the
    small tensors (norms, biases) at the model's dtype. Position tables are not counted (one row each)."""
    model = lm.model
    total = 0.0
    counted: set[int] = set()
    for module, transposed in matrices(model).values():
        if isinstance(module, LowPrecisionLinear):  # its weight lives packed: sizes from the module
            out, n, size = module.out_features, module.in_features, module.matmul.dtype.itemsize
        else:
            w = module.weight
            counted.add(id(w))
            out, n = (w.shape[1], w.shape[0]) if transposed else (w.shape[0], w.shape[1])
            size = w.element_size()
        per = float(size) if precision is None else bytes_per_weight(precision, n)
        if transposed:
            total += per * out * n
        else:  # the embedding: a lookup reads one row; a tied head reads the whole matrix
            tied = getattr(model, "lm_head", None) is None
            total += per * n * (out + 1 if tied else 1)
    for name, p in model.named_parameters():
        if id(p) not in counted and "embed_positions" not in name and p.dim() < 2:
            total += p.numel() * p.element_size()
    return int(round(total))


@dataclass(frozen=True)
class Variant:
    """A model at one weight precision: `lm` to generate with, and what it is."""

    lm: LoadedModel
    precision: str
    simulated: bool  # True: rounded/quantised weights, products in the model's own dtype
    compute: str  # the dtype the weight products run in
    added_bytes: int  # memory the variant holds beyond the original
    weight_bytes: int  # bytes of weights one generated token reads at this precision

    def to_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision, "simulated": self.simulated, "compute": self.compute,
            "weight_bytes_per_token": self.weight_bytes,
            "description": describe(self.precision, simulated=self.simulated),
        }


def describe(precision: str, *, simulated: bool = True) -> str:
    """One sentence a page can show: what the precision does to which weights, and whether it is simulated."""
    which = ("every linear layer's weights and the token embedding (also the output head when tied); "
             "norms, biases and position tables stay float32")
    if precision == "float32":
        return "float32 weights: the model as loaded, exact."
    if precision == "int8":
        return (f"int8 weight-only, per output channel, symmetric (scale = max|w| / 127), on {which}; "
                "simulated: quantized, dequantized to float32, then the exact float32 kernels.")
    if precision == "int4":
        return (f"int4 weight-only, groups of {INT4_GROUP} inputs, symmetric (scale = max|w| / 7 per group), "
                f"on {which}; simulated: quantized, dequantized to float32, then the exact float32 kernels.")
    how = ("simulated: weights rounded, products computed in float32" if simulated else
           "real: products computed in that dtype by this CPU's native kernels (inputs cast to it, float32 "
           "accumulation); norms, attention and the residual stream stay float32")
    return f"{precision} weights on {which}; {how}."


def uses_native(lm: LoadedModel, precision: str, real: bool | None = None) -> bool:
    """Whether `variant(lm, precision, real=real)` runs its weight products in that dtype for real."""
    if lm.dtype != torch.float32 or not native(precision, lm.device):
        return False
    faster = lm.device.type == "cuda" or precision in FASTER_ON_CPU
    return faster if real is None else real


def options(lm: LoadedModel) -> list[dict[str, Any]]:
    """What each precision would be on `lm`, without building anything: for a page's chooser."""
    own = str(lm.dtype).removeprefix("torch.")
    out = []
    for precision in PRECISIONS:
        simulated = precision != own and not uses_native(lm, precision) and not (
            precision in FLOAT_DTYPES and lm.dtype != torch.float32)
        out.append({"precision": precision, "simulated": simulated, "description": describe(precision, simulated=simulated),
                    "weight_bytes_per_token": weight_bytes_per_token(lm, precision)})
    return out


def _shared(model: nn.Module) -> dict[int, Any]:
    """A deepcopy memo under which a copy of `model` shares every parameter and buffer with it (entries are
    replaced for what changes) and starts with empty caches of derived copies (tied head, packed weights)."""
    memo: dict[int, Any] = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, (TiedHead, kernels.PackedWeight)):
                for name in ("_copy", "_packed"):
                    if getattr(value, name, None) is not None:
                        memo[id(getattr(value, name))] = None
    return memo


def _build(lm: LoadedModel, precision: str, real: bool | None) -> Variant:
    dtype = FLOAT_DTYPES.get(precision)
    own = lm.dtype
    weight_bytes = weight_bytes_per_token(lm, precision)
    if precision == str(own).removeprefix("torch."):
        return Variant(lm, precision, False, precision, 0, weight_bytes)
    memo = _shared(lm.model)
    if dtype is not None and own != torch.float32:  # e.g. "float32" on a bf16 model: every tensor cast, once
        added = 0
        for t in list(lm.model.parameters()) + list(lm.model.buffers()):
            if t.is_floating_point():
                cast = t.detach().to(dtype)
                memo[id(t)] = nn.Parameter(cast, requires_grad=False) if isinstance(t, nn.Parameter) else cast
                added += cast.numel() * cast.element_size()
        model = copy.deepcopy(lm.model, memo).eval()
        return Variant(dataclasses.replace(lm, model=model, dtype=dtype, resident_bytes=lm.resident_bytes + added),
                       precision, False, precision, added, weight_bytes)
    use_native = uses_native(lm, precision, real)
    found = matrices(lm.model)
    added = 0
    with torch.no_grad():
        for module, transposed in found.values():
            if use_native and transposed:
                continue  # replaced by a LowPrecisionLinear below
            new = rounded_copy(module, transposed, precision)
            memo[id(module.weight)] = nn.Parameter(new, requires_grad=False)
            added += new.numel() * new.element_size()
        model = copy.deepcopy(lm.model, memo)
        if use_native:
            for name, (module, transposed) in matrices(model).items():
                if transposed:
                    parent, _, leaf = name.rpartition(".")
                    replacement = LowPrecisionLinear(module, dtype)
                    setattr(model.get_submodule(parent) if parent else model, leaf, replacement)
                    added += replacement.matmul.nbytes()
            if getattr(model, "lm_head", None) is None and hasattr(model, "tied_head"):
                model.tied_head = LowPrecisionHead(model.embed, dtype)
                added += model.tied_head.matmul.nbytes()
    model.eval()
    variant_lm = dataclasses.replace(lm, model=model, resident_bytes=lm.resident_bytes + added)
    compute = precision if use_native else str(own).removeprefix("torch.")
    return Variant(variant_lm, precision, not use_native and precision != "float32", compute, added, weight_bytes)


class _Variants:
    """The LRU of built variants, keyed by (model object, precision, real); thread-safe. A key holds a weak
    reference to the original model, so an unloaded model's variants are never handed to another."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: collections.OrderedDict[tuple[int, str, bool | None], tuple[Any, Variant]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, lm: LoadedModel, precision: str, real: bool | None) -> Variant:
        key = (id(lm.model), precision, real)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0]() is lm.model:
                self._items.move_to_end(key)
                return hit[1]
            built = _build(lm, precision, real)
            self._items[key] = (weakref.ref(lm.model), built)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            return built

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


VARIANTS = _Variants(CACHE_SIZE)


def variant(lm: LoadedModel, precision: str, *, real: bool | None = None) -> Variant:
    """`lm` with its weights at `precision` (see the module docstring), built once and cached.

    `real`: None picks native low-precision products where this machine has them and they are faster
    (bf16 on a CPU with oneDNN bf16 kernels, bf16/fp16 on CUDA), False always simulates, True asks for
    native products wherever they exist (simulated where there are none). The
    model's own dtype is `lm` itself, untouched."""
    if precision not in PRECISIONS:
        raise ValueError(f"weight precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return VARIANTS.get(lm, precision, real)
