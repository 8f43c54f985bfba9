"""Weight precision what-ifs: the same model with its weights in bfloat16, float16, int8 or int4.

Which weights: every `Linear` weight (attention, MLP, projections, an untied LM head) and the token
embedding matrix, which is also the LM head of a tied model. Norms, biases, position tables and
relative-position biases keep the model's own dtype (they are small and added, not multiplied).

- int8: per-output-channel symmetric, scale = max|w| / 127 over each output channel's inputs,
  q = round(w / scale) in [-127, 127]; error per element <= scale / 2 (plus the rounding of q * scale:
  two float32 ulps of |w|, one ulp on a bf16/fp16 model: `error_bound`).
- int4: group-wise symmetric along the input dimension, groups of `INT4_GROUP` (32) inputs of one
  output channel, scale = max|w_g| / 7, q in [-7, 7] (15 levels); error per element <= scale_g / 2.
  Both are simulated: quantize, dequantize to the compute dtype, then our exact float kernels.
- bfloat16 / float16: real casts of those weights; relative rounding error <= 2^-8 / 2^-11 (float16
  below 2^-14 is subnormal: absolute error <= 2^-25 there). Where oneDNN has a native kernel on this CPU (AVX-512 BF16 / AMX, AVX-512 FP16), the
  weight products run in that dtype for real (activations cast to it at each product, float32
  accumulation; norms, attention and the residual stream stay float32). Otherwise the weights are
  rounded and the products run in float32: simulated.

A variant is a separate model object built once per (model, precision) and kept in a small LRU
(`variant`), so the loaded model is never modified and visitors share variants; tensors that do not
change are shared with the original, so a variant costs only its new weights.
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
from playground.models.layers import Linear, TiedHead

PRECISIONS = ("float32", "bfloat16", "float16", "int8", "int4")
INT4_GROUP = 32  # inputs per int4 group (along the input dimension of one output channel)
INT8_LEVELS, INT4_LEVELS = 127, 7
SCALE_BYTES = 4  # scales are held in float32: counted at 4 bytes each in the weight bytes per token
CACHE_SIZE = 2  # variants kept (each costs its weights)
_FLOATS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ROUNDING = {"bfloat16": 2.0**-8, "float16": 2.0**-11}  # relative error bound of one cast (round to nearest)


# --- quantisers over an (out, in) matrix: what each precision does to one weight matrix


def int8_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 (out, in), scale (out, 1)) with scale = max|w| / 127 per output channel (row)."""
    scale = w.float().abs().amax(dim=1, keepdim=True) / INT8_LEVELS
    q = torch.round(w.float() / scale.clamp_min(torch.finfo(torch.float32).tiny)).clamp(-INT8_LEVELS, INT8_LEVELS)
    return q.to(torch.int8), scale


def int4_groupwise(w: torch.Tensor, group: int = INT4_GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 holding [-7, 7] (out, in), scale (out, ceil(in / group))): one scale per `group` inputs.

    A last group shorter than `group` (an input size not divisible by it) has its own scale."""
    out, n = w.shape
    pad = (-n) % group
    wf = torch.nn.functional.pad(w.float(), (0, pad)).reshape(out, -1, group)  # (out, groups, group)
    scale = wf.abs().amax(dim=2, keepdim=True) / INT4_LEVELS
    q = torch.round(wf / scale.clamp_min(torch.finfo(torch.float32).tiny)).clamp(-INT4_LEVELS, INT4_LEVELS)
    return q.reshape(out, -1)[:, :n].to(torch.int8), scale[..., 0]


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, group: int | None = None) -> torch.Tensor:
    """q (out, in) times its scales -> (out, in) in `dtype`: one scale per channel (out, 1), or per `group`
    inputs (out, ceil(in / group))."""
    group = q.shape[1] if group is None else group
    return (q.float() * scale.repeat_interleave(group, dim=1)[:, : q.shape[1]]).to(dtype)


def rounded(w: torch.Tensor, precision: str) -> torch.Tensor:
    """`w` (out, in) as `precision` stores it, returned in w's dtype: cast, or quantize -> dequantize."""
    if precision in _FLOATS:
        return w.to(_FLOATS[precision]).to(w.dtype)
    if precision == "int8":
        return dequantize(*int8_per_channel(w), w.dtype)
    if precision == "int4":
        return dequantize(*int4_groupwise(w), w.dtype, INT4_GROUP)
    raise ValueError(f"weight precision {precision!r}: use one of {', '.join(PRECISIONS)}")


ROW_BLOCK = 1024  # output channels quantised at a time: the temporaries stay a few MB, whatever the matrix


def rounded_copy(module: nn.Module, transposed: bool, precision: str) -> torch.Tensor:
    """A module's weight as `precision` stores it, in the module's own layout and dtype, written block by
    block of output channels: building it holds the new matrix and one block's temporaries, no more."""
    weight = module.weight.detach()
    new = torch.empty_like(weight, memory_format=torch.contiguous_format)
    source, dest = (weight.t(), new.t()) if transposed else (weight, new)  # both (out, in) views
    for a in range(0, source.shape[0], ROW_BLOCK):
        dest[a:a + ROW_BLOCK] = rounded(source[a:a + ROW_BLOCK], precision)
    return new


def error_bound(w: torch.Tensor, precision: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The largest |rounded(w) - w| each element (out, in) may have, as stated in the module docstring,
    for weights held in `dtype` (default w's): int8 / int4 dequantize to it, so its own rounding adds."""
    if precision in ROUNDING:  # float16 below 2^-14 is subnormal: a fixed spacing of 2^-24, half of it at most
        return w.float().abs() * ROUNDING[precision] + (2.0**-25 if precision == "float16" else 0.0)
    # int8 / int4: half a step, plus the rounding of q * scale in float32 and in the weights' dtype (two
    # float32 ulps of |w|, or one ulp of a half-precision dtype)
    held = dtype or w.dtype
    ulps = w.float().abs() * max(2.0**-22, torch.finfo(held).eps if held.is_floating_point else 0.0)
    if precision == "int8":
        return int8_per_channel(w)[1] / 2 + ulps
    if precision == "int4":
        scale = int4_groupwise(w)[1]
        return scale.repeat_interleave(INT4_GROUP, dim=1)[:, : w.shape[1]] / 2 + ulps
    return torch.zeros(w.shape)


# --- which matrices, and what reading them costs


def matrices(model: nn.Module) -> dict[str, tuple[nn.Module, bool]]:
    """The weight matrices a precision changes: name -> (module, stored (in, out)) for `Linear`s,
    (out, in) = (vocab, d) for the token embedding."""
    out: dict[str, tuple[nn.Module, bool]] = {}
    for name, module in model.named_modules():
        if isinstance(module, (Linear, LowPrecisionLinear)):
            out[name] = (module, True)
    embed = getattr(model, "embed", None)
    if isinstance(embed, nn.Embedding):
        out["embed"] = (embed, False)
    return out


def out_in(module: nn.Module, transposed: bool) -> torch.Tensor:
    """A matrix as (out, in): `Linear` holds (in, out), the embedding (vocab, d) already is."""
    return module.weight.detach().t() if transposed else module.weight.detach()


def bytes_per_weight(precision: str, in_features: int) -> float:
    """Bytes one weight costs to read, scales included (int8: one per output channel, int4: per group)."""
    if precision in _FLOATS:
        return float(_FLOATS[precision].itemsize)
    if precision == "int8":
        return 1.0 + SCALE_BYTES / in_features
    return 0.5 + SCALE_BYTES / INT4_GROUP


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


# --- real low-precision products (oneDNN), where this CPU has the kernels


# Where native products are also faster (the default choice). Measured on this CPU (Xeon with AVX-512 BF16,
# AMX and AVX-512 FP16), SmolLM2-135M greedy, 2 threads: float32 36 tok/s, bf16 through oneDNN 41.5,
# fp16 through oneDNN 30 (slower: simulated by default). On CUDA both are native and faster.
FASTER_ON_CPU = ("bfloat16",)


def native(precision: str, device: torch.device) -> bool:
    """Whether the weight products can run in `precision` for real here (float32 models only)."""
    if precision not in ("bfloat16", "float16"):
        return False
    if device.type == "cuda":
        return True
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    check = ops._is_mkldnn_bf16_supported if precision == "bfloat16" else ops._is_mkldnn_fp16_supported
    return bool(check())


class _LowPrecisionMatmul:
    """x (float32) @ W (in, out) with W held in bf16/fp16 and x cast to it: oneDNN prepacked on the CPU
    (always at least `kernels.MIN_ROWS` rows, so a row's output never depends on the others), a plain
    product elsewhere; the result back in x's dtype."""

    def __init__(self, weight_in_out: torch.Tensor, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self.out_features = weight_in_out.shape[1]
        w = weight_in_out.detach().to(dtype)
        if w.device.type == "cpu":
            self.packed: torch.Tensor | None = torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), None)
            self.weight = None
        else:
            self.packed, self.weight = None, w.contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        rows = x.reshape(-1, x.shape[-1]).to(self.dtype)
        if self.packed is None:
            return (rows @ self.weight).to(x.dtype).reshape(*lead, self.out_features)
        n = rows.shape[0]
        if n < kernels.MIN_ROWS:
            rows = torch.cat((rows, rows.new_zeros(kernels.MIN_ROWS - n, rows.shape[1])))
        y = torch.ops.mkldnn._linear_pointwise(rows.contiguous(), self.packed, None, "none", [], "")
        return y[:n].to(x.dtype).reshape(*lead, self.out_features)

    def nbytes(self) -> int:
        held = self.packed if self.packed is not None else self.weight
        return held.numel() * held.element_size()

    def dense(self) -> torch.Tensor:
        """The weight as held, (in, out) in bf16/fp16 (a copy out of the packed layout on the CPU)."""
        return self.packed.to_dense().t() if self.packed is not None else self.weight


class LowPrecisionLinear(nn.Module):
    """A `Linear` whose product runs in bf16/fp16 for real; the bias (if any) stays in float32."""

    def __init__(self, linear: Linear, dtype: torch.dtype) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.matmul = _LowPrecisionMatmul(linear.weight, dtype)  # the only copy of the weight it keeps
        self.bias = linear.bias

    @property
    def weight(self) -> torch.Tensor:
        """The weight as held, (in, out) in bf16/fp16, for what reads weights (error bounds): a copy each time."""
        return self.matmul.dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.matmul(x)
        return y + self.bias if self.bias is not None else y


class LowPrecisionHead(TiedHead):
    """The tied head (x · Eᵀ) with the embedding held in bf16/fp16 for the product."""

    def __init__(self, embedding: nn.Embedding, dtype: torch.dtype) -> None:
        super().__init__(embedding)
        self.matmul = _LowPrecisionMatmul(embedding.weight.detach().t(), dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul(x)


# --- building a variant


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
            precision in _FLOATS and lm.dtype != torch.float32)
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
    dtype = _FLOATS.get(precision)
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
