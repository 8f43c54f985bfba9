"""Weight-only quantisation and rounding: what each precision does to one weight matrix, its error
bound, and the bytes of weights a generated token reads.

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
  below 2^-14 is subnormal: absolute error <= 2^-25 there). Whether the products then run in that dtype
  for real is `playground.models.low_precision`'s question; `playground.variants` builds the models and counts
the bytes a token reads.
"""

from __future__ import annotations

import torch
from torch import nn

from playground.models.layers import Linear
from playground.models.low_precision import LowPrecisionLinear

PRECISIONS = ("float32", "bfloat16", "float16", "int8", "int4")
INT4_GROUP = 32  # inputs per int4 group (along the input dimension of one output channel)
INT8_LEVELS, INT4_LEVELS = 127, 7
SCALE_BYTES = 4  # scales are held in float32: counted at 4 bytes each in the weight bytes per token
FLOAT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
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
    if precision in FLOAT_DTYPES:
        return w.to(FLOAT_DTYPES[precision]).to(w.dtype)
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
    if precision in FLOAT_DTYPES:
        return float(FLOAT_DTYPES[precision].itemsize)
    if precision == "int8":
        return 1.0 + SCALE_BYTES / in_features
    return 0.5 + SCALE_BYTES / INT4_GROUP
