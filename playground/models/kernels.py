"""Matrix products for a few rows: the batched decoding path, and the candidates that chose it.

Batched decoding (`playground.generation.batch`) runs every weight product of a shared pass
(`models.rows.Rows(shared=True)`) through oneDNN with the weight prepacked once (`prepare_invariant`
of `models.layers.LaidOut`, when a scheduler first runs the model; `packed_matmul`): the kernel is the
pass's, never chosen per call. Measured here (`python -m playground.tools.kernels`, SmolLM2's 49152×576
head, 2 threads, weights read from memory): 4.1 / 4.6 / 4.8 / 5.5 / 6.9 ms for 1 / 2 / 4 / 8 / 16 rows,
where today's `x @ W` takes 3.4 / 5.6 / 7.7 / 10.6 / 12.1 (MKL repacks the whole weight on every
call with more than one row) and `F.linear` 4.1 / 4.3 / 8.8 / 14.2 / 9.0.

It is also batch invariant: a row's output is bitwise the same whatever the other rows and their
number, for every SmolLM2 shape with 576 inputs; with 1536 inputs (the MLP's down projection) one
row differs from two or more, which agree with each other, so products get at least two rows.
That is what makes a visitor's numbers independent of who else is decoding. The single-request path
keeps `x @ W`: fastest for one row and what the parity tests pin.

Each candidate is `prepare(name, weight)` once (weight stored (in, out), as `Linear` holds it) and
`CANDIDATES[name](x, prepared)` per call, x (M, in) -> (M, out). They compute the same product and
differ in the memory layout of the weight and the library routine that streams it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

MIN_ROWS = 2  # oneDNN computes one row differently from 2+ for long inputs; 2+ rows all agree


def packable(weight: torch.Tensor) -> bool:
    return weight.device.type == "cpu" and weight.dtype == torch.float32


def pack(weight: torch.Tensor) -> torch.Tensor:
    """A (in, out) weight prepacked for oneDNN's linear (its own layout, a copy)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().t().contiguous(), None)  # no batch-size hint


def packed_matmul(x: torch.Tensor, packed: torch.Tensor, out_features: int) -> torch.Tensor:
    """x @ W through W's prepacked copy (`pack`); x (..., in) -> (..., out_features)."""
    lead = x.shape[:-1]
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if n < MIN_ROWS:
        rows = torch.cat((rows, rows.new_zeros(MIN_ROWS - n, rows.shape[1])))
    y = torch.ops.mkldnn._linear_pointwise(rows.contiguous(), packed, None, "none", [], "")
    return y[:n].reshape(*lead, out_features)


def _matmul(x: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
    return x @ wt  # today's Linear: (in, out) contiguous


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w)  # nn.Linear's layout: (out, in) contiguous


def _w_xt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (w @ x.t()).t()  # (out, in) times a few columns


def _wt_t(x: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
    return (wt.t() @ x.t()).t()  # today's weight, read as its transpose (no copy)


def _mkldnn(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def _rows(x: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[i : i + 1] @ wt for i in range(x.shape[0])])  # one matrix-vector product per row


CHUNK_BYTES = 1 << 20  # a column block of the weight that stays in cache while the library repacks it


def _chunks(x: torch.Tensor, blocks: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([x @ b for b in blocks], dim=-1)  # one small product per contiguous column block


def column_blocks(weight: torch.Tensor, block_bytes: int = CHUNK_BYTES) -> list[torch.Tensor]:
    """The (in, out) weight as contiguous (in, c) column blocks of about `block_bytes` each."""
    width = max(64, block_bytes // (weight.shape[0] * weight.element_size()) // 64 * 64)
    return [weight[:, i : i + width].contiguous() for i in range(0, weight.shape[1], width)]


def _prepare(name: str, weight: torch.Tensor) -> Any:
    if name in ("matmul", "wt_t", "rows"):
        return weight
    if name in ("linear", "w_xt"):
        return weight.t().contiguous()
    if name == "chunks":
        return column_blocks(weight)
    if name == "mkldnn":
        return torch.ops.mkldnn._reorder_linear_weight(weight.t().contiguous(), None)
    raise KeyError(name)


CANDIDATES: dict[str, Callable[[torch.Tensor, Any], torch.Tensor]] = {
    "matmul": _matmul, "linear": _linear, "w_xt": _w_xt, "wt_t": _wt_t, "mkldnn": _mkldnn, "rows": _rows,
    "chunks": _chunks,
}


def prepare(name: str, weight: torch.Tensor) -> Any:
    """The weight (in, out) in the layout candidate `name` reads."""
    return _prepare(name, weight)
