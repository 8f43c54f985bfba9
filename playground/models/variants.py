"""A loaded model at another weight precision: a separate model object, built once and cached.

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
from playground.models import quantized
from playground.models.layers import Linear, TiedHead
from playground.models.low_precision import FASTER_ON_CPU, LowPrecisionHead, LowPrecisionLinear, native
from playground.models.quantize import (
    FLOAT_DTYPES,
    INT4_GROUP,
    PRECISIONS,
    matrices,
    out_in,
    rounded_copy,
    weight_bytes_per_token,
)
from playground.models.quantized import QuantizedEmbedding, QuantizedHead, QuantizedLinear

CACHE_SIZE = 2  # variants kept (each costs its weights)


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
    if precision in ("int8", "int4"):
        scheme = ("int8 weight-only, per output channel, symmetric (scale = max|w| / 127)" if precision == "int8" else
                  f"int4 weight-only, groups of {INT4_GROUP} inputs, symmetric (scale = max|w| / 7 per group)")
        if simulated:
            return f"{scheme}, on {which}; simulated: quantized, dequantized to float32, then the exact float32 kernels."
        return (f"{scheme}, on {which}; real: held as {precision} codes and scales (no float copy), multiplied by "
                f"this CPU's {precision} kernel, which reads the activations and scales in "
                f"{str(quantized.activation_dtype()).removeprefix('torch.')}.")
    how = ("simulated: weights rounded, products computed in float32" if simulated else
           "real: products computed in that dtype by this CPU's native kernels (inputs cast to it, float32 "
           "accumulation); norms, attention and the residual stream stay float32")
    return f"{precision} weights on {which}; {how}."


def uses_native(lm: LoadedModel, precision: str, real: bool | None = None) -> bool:
    """Whether `variant(lm, precision, real=real)` runs its weight products in that precision for real."""
    if precision in ("int8", "int4"):
        if lm.dtype != torch.float32 or not quantized.available(precision, lm.device):
            return False
        found = [out_in(m, t).shape for m, t in matrices(lm.model).values()]
        if not all(quantized.fits(precision, *shape) for shape in found):
            return False
        return precision in quantized.FASTER_ON_CPU if real is None else real
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
    replaced for what changes) and starts without the layouts derived from its weights (the tied head's
    copy, prepacked weights): the copy lays out its own (`model.prepare()`, `prepare_invariant()`)."""
    memo: dict[int, Any] = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    for module in model.modules():
        for value in [module, *vars(module).values()]:
            if isinstance(value, (TiedHead, Linear)):
                for name in ("weight_t", "packed"):
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
        model.invariant_ready = False  # its prepacked copies were not copied
        model.prepare()
        return Variant(dataclasses.replace(lm, model=model, dtype=dtype, resident_bytes=lm.resident_bytes + added),
                       precision, False, precision, added, weight_bytes)
    use_native = uses_native(lm, precision, real)
    if use_native and precision in ("int8", "int4"):
        return _build_quantized(lm, precision, weight_bytes)
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
    model.invariant_ready = False  # its prepacked copies were not copied
    model.prepare()
    variant_lm = dataclasses.replace(lm, model=model, resident_bytes=lm.resident_bytes + added)
    compute = precision if use_native else str(own).removeprefix("torch.")
    return Variant(variant_lm, precision, not use_native and precision != "float32", compute, added, weight_bytes)


def _build_quantized(lm: LoadedModel, precision: str, weight_bytes: int) -> Variant:
    """`lm` with its matrices held as int8 / int4 codes and multiplied by the machine's kernels
    (`models.quantized`): no float copy of them is made, the rest is shared with `lm`."""
    memo = _shared(lm.model)
    found = matrices(lm.model)
    for module, _ in found.values():
        memo[id(module.weight)] = None  # replaced below: never copied
    added = 0
    with torch.no_grad():
        model = copy.deepcopy(lm.model, memo)
        for name, (module, transposed) in found.items():
            if transposed:
                parent, _, leaf = name.rpartition(".")
                replacement = QuantizedLinear(module, precision)
                setattr(model.get_submodule(parent) if parent else model, leaf, replacement)
                added += replacement.nbytes()
        model.embed = QuantizedEmbedding(lm.model.embed, precision)
        added += model.embed.nbytes()
        model.tied_head = QuantizedHead(model.embed)
        if model.lm_head is None:
            added += model.tied_head.nbytes()
    model.eval()
    model.invariant_ready = False
    variant_lm = dataclasses.replace(lm, model=model, resident_bytes=lm.resident_bytes + added)
    return Variant(variant_lm, precision, False, precision, added, weight_bytes)


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
