"""A loaded model at another weight precision: a separate model object, built once and cached; and the bytes of
weights one of its tokens reads. (Above `playground.loaded`, which the models below never import.)

`variant(lm, precision)` rounds or quantizes the weights `playground.models.quantize` names (or, for
bf16/fp16 where native kernels are faster, runs the products in that dtype: `low_precision`). The copy
shares every tensor that does not change with the original, so it costs only its new weights, and the
loaded model is never modified: visitors share it, and its variants, safely.

What a copy will hold is known before it is built (`copy_bytes`, from the shapes alone), so a run is refused
before any weight is copied. A copy is built one matrix per step (`build_steps`: a server runs the steps as a
job's slices between the batch's steps), and kept in an LRU of at most `CACHE_SIZE` variants; a new copy
first makes room among them within what the memory budget leaves beside the model and its run (the plan
says how much), the least recently used going first.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import threading
import weakref
from collections.abc import Callable, Generator
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
    bytes_per_weight,
    matrices,
    out_in,
    rounded_copy,
)
from playground.models.quantized import QuantizedEmbedding, QuantizedHead, QuantizedLinear

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


def copy_bytes(lm: LoadedModel, precision: str, real: bool | None = None) -> int:
    """The bytes `variant(lm, precision, real=real)` holds beyond `lm`, from the shapes alone (nothing is built):
    its new weights (a cast model: every floating tensor) and the contiguous copy its tied head keeps of a new
    embedding. A native product's weight is counted at its dtype's size (oneDNN's packed layout may pad it)."""
    dtype = FLOAT_DTYPES.get(precision)
    own = lm.dtype
    if precision == str(own).removeprefix("torch."):
        return 0
    tied = getattr(lm.model, "lm_head", None) is None and hasattr(lm.model, "tied_head")
    if dtype is not None and own != torch.float32:  # every floating tensor cast, and the tied head's copy of it
        tensors = [t for t in list(lm.model.parameters()) + list(lm.model.buffers()) if t.is_floating_point()]
        embed = lm.model.embed.weight.numel() if tied else 0
        return sum(t.numel() for t in tensors) * dtype.itemsize + embed * dtype.itemsize
    use_native = uses_native(lm, precision, real)
    if use_native and precision in ("int8", "int4"):  # codes and scales, no float copy
        return quantized_bytes(lm, precision)
    total = 0
    for module, transposed in matrices(lm.model).values():
        if use_native and transposed:
            total += module.weight.numel() * dtype.itemsize  # a LowPrecisionLinear's weight
        else:
            total += module.weight.numel() * module.weight.element_size()  # a rounded copy in the model's dtype
    if tied:  # native: the head's own low-precision copy; simulated: the contiguous copy of the new embedding
        embed = lm.model.embed.weight
        total += embed.numel() * (dtype.itemsize if use_native else embed.element_size())
    return total


def quantized_bytes(lm: LoadedModel, precision: str) -> int:
    """What `_quantized_steps` holds beyond `lm`, from the shapes: each matrix's codes and scales, the
    embedding's, and an int4 tied head's packed copy of them."""
    total = 0
    for module, transposed in matrices(lm.model).values():
        out, n = out_in(module, transposed).shape
        total += quantized.product_bytes(precision, out, n) if transposed else quantized.embedding_bytes(precision, out, n)
    tied = getattr(lm.model, "lm_head", None) is None
    if tied and precision == "int4":
        vocab, d = lm.model.embed.weight.shape
        total += quantized.product_bytes(precision, vocab, d)
    return total


def build_steps(lm: LoadedModel, precision: str, real: bool | None = None) -> Generator[None, None, Variant]:
    """Build the variant one weight matrix per step (a server runs each `next()` as one slice of a job); the
    generator returns the Variant."""
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
                yield
        model = copy.deepcopy(lm.model, memo).eval()
        model.invariant_ready = False  # its prepacked copies were not copied
        model.prepare()
        return Variant(dataclasses.replace(lm, model=model, dtype=dtype, resident_bytes=lm.resident_bytes + added),
                       precision, False, precision, added, weight_bytes)
    use_native = uses_native(lm, precision, real)
    if use_native and precision in ("int8", "int4"):
        return (yield from _quantized_steps(lm, precision, weight_bytes))
    found = matrices(lm.model)
    added = 0
    for module, transposed in found.values():
        if use_native and transposed:
            continue  # replaced by a LowPrecisionLinear below
        with torch.no_grad():
            new = rounded_copy(module, transposed, precision)
        memo[id(module.weight)] = nn.Parameter(new, requires_grad=False)
        added += new.numel() * new.element_size()
        yield
    with torch.no_grad():
        model = copy.deepcopy(lm.model, memo)
    if use_native:
        for name, (module, transposed) in matrices(model).items():
            if transposed:
                parent, _, leaf = name.rpartition(".")
                with torch.no_grad():
                    replacement = LowPrecisionLinear(module, dtype)
                setattr(model.get_submodule(parent) if parent else model, leaf, replacement)
                added += replacement.matmul.nbytes()
                yield
        if getattr(model, "lm_head", None) is None and hasattr(model, "tied_head"):
            with torch.no_grad():
                model.tied_head = LowPrecisionHead(model.embed, dtype)
            added += model.tied_head.matmul.nbytes()
    model.eval()
    model.invariant_ready = False  # its prepacked copies were not copied
    model.prepare()
    variant_lm = dataclasses.replace(lm, model=model, resident_bytes=lm.resident_bytes + added)
    compute = precision if use_native else str(own).removeprefix("torch.")
    return Variant(variant_lm, precision, not use_native and precision != "float32", compute, added, weight_bytes)


def _quantized_steps(lm: LoadedModel, precision: str, weight_bytes: int) -> Generator[None, None, Variant]:
    """`lm` with its matrices held as int8 / int4 codes and multiplied by the machine's kernels
    (`models.quantized`), one matrix per step: no float copy of them is made, the rest is shared with `lm`."""
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
            with torch.no_grad():
                replacement = QuantizedLinear(module, precision)
            setattr(model.get_submodule(parent) if parent else model, leaf, replacement)
            added += replacement.nbytes()
            yield
    with torch.no_grad():
        model.embed = QuantizedEmbedding(lm.model.embed, precision)
        added += model.embed.nbytes()
        model.tied_head = QuantizedHead(model.embed)
    if model.lm_head is None:
        added += model.tied_head.nbytes()
    model.eval()
    model.invariant_ready = False
    variant_lm = dataclasses.replace(lm, model=model, resident_bytes=lm.resident_bytes + added)
    return Variant(variant_lm, precision, False, precision, added, weight_bytes)


Builder = Callable[[Generator[None, None, Variant]], Variant]  # runs a build's steps (a server: as a job)


def run_here(steps: Generator[None, None, Variant]) -> Variant:
    """A build's steps, run at once in the caller."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class _Variants:
    """The LRU of built variants, keyed by (model object, precision, real); thread-safe. A key holds a weak
    reference to the original model, so an unloaded model's variants are never handed to another. At most `size`
    are kept, and a new one first makes room among them for its copy (`room`: what the memory budget leaves)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: collections.OrderedDict[tuple[int, str, bool | None], tuple[Any, Variant, int]] = (
            collections.OrderedDict())
        self._lock = threading.Lock()

    def get(self, lm: LoadedModel, precision: str, real: bool | None, run: Builder = run_here,
            room: int | None = None) -> Variant:
        """The cached variant, or one built by `run(build_steps(...))` once the least recently used others left
        room for its copy (their copies and this one within `room` bytes; None: no limit but the count). The
        lock is never held while it builds (`run` may hand the steps to another thread); when two build one
        key, the first stored is kept."""
        key = (id(lm.model), precision, real)
        cost = copy_bytes(lm, precision, real)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0]() is lm.model:
                self._items.move_to_end(key)
                return hit[1]
            if room is not None:
                held = sum(c for _, _, c in self._items.values())
                for old in list(self._items):
                    if held + cost <= room:
                        break
                    held -= self._items.pop(old)[2]
        built = run(build_steps(lm, precision, real))
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0]() is lm.model:  # another builder was first: its copy is the one kept
                return hit[1]
            self._items[key] = (weakref.ref(lm.model), built, cost)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return built

    def held(self) -> tuple[int, int]:
        """(copies kept, the bytes their new weights take)."""
        with self._lock:
            return len(self._items), sum(c for _, _, c in self._items.values())

    def discard(self, lm: LoadedModel, precision: str, real: bool | None = None) -> None:
        """Forget a variant (a run refused after it was built): its copy goes with the last run holding it."""
        with self._lock:
            self._items.pop((id(lm.model), precision, real), None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


VARIANTS = _Variants(CACHE_SIZE)


def variant(lm: LoadedModel, precision: str, *, real: bool | None = None, run: Builder = run_here,
            room: int | None = None) -> Variant:
    """`lm` with its weights at `precision` (see the module docstring), built once and cached.

    `real`: None picks native low-precision products where this machine has them and they are faster
    (bf16 on a CPU with oneDNN bf16 kernels, bf16/fp16 on CUDA), False always simulates, True asks for
    native products wherever they exist (simulated where there are none). The
    model's own dtype is `lm` itself, untouched. `run` runs the build's steps (default: here, at once); `room`:
    the bytes the cached copies may take together (older ones go first)."""
    if precision not in PRECISIONS:
        raise ValueError(f"weight precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return VARIANTS.get(lm, precision, real, run, room)
