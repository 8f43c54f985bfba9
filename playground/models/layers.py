"""Building blocks shared by every model: linear maps, norms and feed-forward networks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from playground.config import ModelConfig
from playground.models import kernels


class Linear(nn.Module):
    """`y = x @ W + b` with W stored as (in, out).

    For one token at a time the forward pass is a matrix-vector product that streams W from memory.
    An (in, out) contiguous W streams faster than nn.Linear's (out, in) layout: up to twice as fast
    on some CPUs, 4% faster end to end on SmolLM2 on the development machine. Checkpoint converters
    transpose Hugging Face's (out, in) weights once at load time.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        # the batch-invariant kernel's prepacked copy, laid out once by `LaidOut.prepare_invariant` (None:
        # not prepared, or no such kernel for this weight: shared passes then use `x @ W` as well)
        self.packed: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        """x (..., in) -> (..., out); `invariant`: a shared pass's product (see `models/kernels.py`)."""
        if invariant and self.packed is not None:
            y = kernels.packed_matmul(x, self.packed, self.out_features)
        else:
            y = x @ self.weight
        return y + self.bias if self.bias is not None else y

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, bias={self.bias is not None}"


TRANSPOSE_ROWS = 1024  # rows per block: a block and its transpose stay in cache (~25% faster than one copy)


def transposed(parts: list[torch.Tensor], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Stack (out_i, in) matrices along `out` and transpose: one contiguous (in, Σ out_i) tensor.

    Fusion, transpose and dtype cast happen in a single copy, written block by block.
    """
    out = torch.empty(
        (parts[0].shape[1], sum(p.shape[0] for p in parts)), dtype=dtype or parts[0].dtype, device=parts[0].device
    )
    start = 0
    for part in parts:
        for row in range(0, part.shape[0], TRANSPOSE_ROWS):
            block = part[row : row + TRANSPOSE_ROWS]
            out[:, start + row : start + row + block.shape[0]].copy_(block.t())
        start += part.shape[0]
    return out


class TiedHead:
    """The output projection of a model whose head is its embedding matrix E (V, d): logits = x · Eᵀ.

    For one token, reading Eᵀ streams the embedding at about half the speed of a contiguous (d, V)
    matrix, so inference reads such a copy, laid out once by `prepare` (when the model is loaded, and
    again by whoever changes the embedding afterwards: nothing is checked per call, so a captured step
    reads it as a constant). Training, and a model never prepared, go through the parameter itself.
    A plain object, not a module: the copy never enters the state dict.
    """

    def __init__(self, embedding: nn.Embedding) -> None:
        self.embedding = embedding
        self.weight_t: torch.Tensor | None = None  # (d, V) contiguous
        self.packed: torch.Tensor | None = None  # the batch-invariant kernel's copy (LaidOut.prepare_invariant)

    @property
    def out_features(self) -> int:
        return self.embedding.weight.shape[0]

    def prepare(self) -> None:
        """Lay the head out from the embedding as it is now (dropping a prepacked copy of the old one)."""
        self.weight_t = transposed([self.embedding.weight.detach()])
        self.packed = None

    def __call__(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        if torch.is_grad_enabled() or self.weight_t is None:
            return x @ self.embedding.weight.t()
        if invariant and self.packed is not None:
            return kernels.packed_matmul(x, self.packed, self.out_features)
        return x @ self.weight_t


class LaidOut(nn.Module):
    """A model whose inference reads layouts derived from its weights (the tied head's (d, V) copy, the
    batch-invariant kernels' prepacked copies): laid out once (`prepare`, `prepare_invariant`),
    never checked per call, and laid out again when the model moves or changes dtype (`.to()`)."""

    tied_head: TiedHead
    lm_head: nn.Module | None
    invariant_ready = False  # the prepacked copies are laid out (`prepare_invariant`)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model computes in (its embedding's, also when the embedding is held as codes)."""
        return getattr(self.embed, "dtype", None) or self.embed.weight.dtype

    @property
    def device(self) -> torch.device:
        return getattr(self.embed, "device", None) or self.embed.weight.device

    def prepare(self) -> None:
        """Lay out what inference reads besides the weights: once the weights are in place, and again by
        whoever changes them in place afterwards."""
        if self.lm_head is None:  # an untied model never reads its tied head
            self.tied_head.prepare()

    def prepare_invariant(self) -> None:
        """Lay out the batch-invariant copy of every float32 CPU weight product (the `Linear`s and the tied
        head), once: shared passes (`Rows(shared=True)`) then multiply through them. Moving the model drops
        them; weights changed in place need `prepare()` and this again."""
        if self.invariant_ready:
            return
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, Linear) and module.packed is None and kernels.packable(module.weight):
                    module.packed = kernels.pack(module.weight)
            head = self.tied_head
            if head.weight_t is not None and head.packed is None and kernels.packable(head.weight_t):
                head.packed = kernels.pack(head.weight_t)
        self.invariant_ready = True

    def _apply(self, fn, recurse=True):  # noqa: ANN001, ANN202 - nn.Module's own signature
        out = super()._apply(fn, recurse)
        for module in self.modules():
            if isinstance(module, Linear):
                module.packed = None
        self.invariant_ready = False
        if self.tied_head.weight_t is not None:
            self.prepare()
        return out


class RMSNorm(nn.Module):
    """x / rms(x) * g, computed in float32 like Llama and T5 do."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused kernel; same formula
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class Float32RMSNorm(nn.Module):
    """x / rms(x) * (offset + g) with the scale applied in float32 before the cast back (OLMo 2: offset 0;
    Gemma: offset 1, its checkpoints store g - 1). Same as `RMSNorm` in float32, not in half precision."""

    def __init__(self, dim: int, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        self.eps, self.offset = eps, offset
        self.weight = nn.Parameter(torch.full((dim,), 1.0 - offset))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.weight.float() + self.offset if self.offset else self.weight.float()
        return F.rms_norm(x.float(), (x.shape[-1],), scale, self.eps).to(x.dtype)


def make_norm(config: ModelConfig, dim: int | None = None) -> nn.Module:
    """The config's norm over `dim` features (default d_model)."""
    dim = dim or config.d_model
    if config.norm == "rmsnorm":
        return RMSNorm(dim, config.norm_eps)
    if config.norm == "rmsnorm_f32":
        return Float32RMSNorm(dim, config.norm_eps)
    if config.norm == "rmsnorm_gemma":
        return Float32RMSNorm(dim, config.norm_eps, offset=1.0)
    return nn.LayerNorm(dim, eps=config.norm_eps, bias=config.norm_bias)


_ACTIVATIONS = {
    "silu": F.silu,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


class GatedMLP(nn.Module):
    """SwiGLU / GeGLU: down(act(gate(x)) * up(x)); gate and up fused into one matrix."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.d_ff = config.d_ff
        self.gate_up = Linear(config.d_model, 2 * config.d_ff, bias=config.mlp_bias)
        self.down = Linear(config.d_ff, config.d_model, bias=config.mlp_bias)
        self.act = _ACTIVATIONS[config.activation]

    def forward(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        gate, up = self.gate_up(x, invariant).split(self.d_ff, dim=-1)
        return self.down(self.act(gate) * up, invariant)


class PlainMLP(nn.Module):
    """The original FFN: fc2(act(fc1(x)))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.fc1 = Linear(config.d_model, config.d_ff, bias=config.mlp_bias)
        self.fc2 = Linear(config.d_ff, config.d_model, bias=config.mlp_bias)
        self.act = _ACTIVATIONS[config.activation]

    def forward(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x, invariant)), invariant)


def make_mlp(config: ModelConfig) -> nn.Module:
    return GatedMLP(config) if config.mlp == "gated" else PlainMLP(config)


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """Random initialisation for freshly built (untrained) models."""
    for sub in module.modules():
        if isinstance(sub, Linear):
            sub.reset_parameters()
        elif isinstance(sub, nn.Embedding):
            nn.init.normal_(sub.weight, std=std)
        elif isinstance(sub, Float32RMSNorm):
            nn.init.constant_(sub.weight, 1.0 - sub.offset)
        elif isinstance(sub, (nn.LayerNorm, RMSNorm)):
            nn.init.ones_(sub.weight)
            if getattr(sub, "bias", None) is not None:
                nn.init.zeros_(sub.bias)

