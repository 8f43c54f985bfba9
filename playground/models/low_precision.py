"""Weight products in bfloat16 / float16 for real, where the machine has kernels for them.

On the CPU, oneDNN's prepacked linear (AVX-512 BF16 / AMX, AVX-512 FP16); on CUDA, a plain product.
The activations are cast to the weights' dtype at each product and summed in float32 by the kernel;
norms, attention and the residual stream stay in the model's float32.
"""

from __future__ import annotations

import torch
from torch import nn

from playground.models import kernels
from playground.models.layers import Linear, TiedHead

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

    def forward(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        y = self.matmul(x)  # prepacked with at least two rows: batch invariant whatever `invariant` asks
        return y + self.bias if self.bias is not None else y


class LowPrecisionHead(TiedHead):
    """The tied head (x · Eᵀ) with the embedding held in bf16/fp16 for the product."""

    def __init__(self, embedding: nn.Embedding, dtype: torch.dtype) -> None:
        super().__init__(embedding)
        self.matmul = _LowPrecisionMatmul(embedding.weight.detach().t(), dtype)

    def prepare(self) -> None:
        """Nothing to lay out: the product reads its own low-precision copy."""

    def __call__(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        return self.matmul(x)
