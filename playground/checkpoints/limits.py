"""Resource limits checked before a checkpoint is read: file size, tensor count and estimated memory.

A public Space receives uploads from strangers; a file that would not fit is refused with the
numbers, before a single tensor is materialised. The same `Limits` travel with the loaded model
(`LoadedModel.limits`) so that every request is checked against them too
(`playground.generation.budget`).

Settings (environment variables, read by `Limits.default()`):
- PLAYGROUND_MAX_CHECKPOINT_BYTES: total size of a checkpoint's weight files (default 8 GiB);
- PLAYGROUND_MEMORY_BUDGET_BYTES: what one model plus one request may use (default 70% of the
  memory available when the model is loaded).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from playground.checkpoints.expected import StateLayout
from playground.checkpoints.safetensors_io import FLOAT_DTYPES, SafetensorsHeader
from playground.config import ModelConfig
from playground.errors import CheckpointError, PlaygroundError

GIB = 1024**3
MIB = 1024**2
# Python objects of one layer's modules, parameters and state-dict entries: 20-60 KiB measured for
# tiny layers on the development machine (torch 2.13); 64 KiB keeps the estimate an upper bound.
MODULE_BYTES_PER_LAYER = 64 * 1024
# Non-persistent float32 buffers (sinusoidal tables) are computed in float64 with sin/cos
# temporaries: building a (P, d) table peaks at 16·P·d bytes, 3x the 4·P·d it keeps (measured).
BUFFER_BUILD_FACTOR = 3


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux); a generous fallback elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 16 * GIB


def _env_bytes(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        raise PlaygroundError(f"{name} must be a whole number of bytes (e.g. 2147483648), got {raw!r}") from None
    if value <= 0:
        raise PlaygroundError(f"{name} must be positive, got {value}")
    return value


@dataclass(frozen=True)
class Limits:
    """max_file_bytes: total size of the checkpoint's weight files; memory_budget_bytes: the model
    (weights, position tables, modules) plus a KV cache of `cache_tokens` tokens must fit in it at load
    time, and the model plus any one request afterwards; max_tensors: tensors a checkpoint may list."""

    max_file_bytes: int
    memory_budget_bytes: int
    cache_tokens: int = 2048
    max_tensors: int = 16_384  # Llama 3 405B has ~1,100; the header parser stops counting here

    @classmethod
    def default(cls) -> Limits:
        """From PLAYGROUND_MAX_CHECKPOINT_BYTES / PLAYGROUND_MEMORY_BUDGET_BYTES, else 8 GiB files and
        70% of the memory available now."""
        max_file = _env_bytes("PLAYGROUND_MAX_CHECKPOINT_BYTES", 8 * GIB)
        budget = _env_bytes("PLAYGROUND_MEMORY_BUDGET_BYTES", int(0.7 * available_memory_bytes()))
        return cls(max_file_bytes=max_file, memory_budget_bytes=budget)


def human_bytes(n: int) -> str:
    """'512.0 MiB' below a GiB, '6.1 GiB' from there: what refusals print."""
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / MIB:,.1f} MiB"


def check_file_sizes(sizes: dict[str, int], limits: Limits) -> None:
    total = sum(sizes.values())
    if total > limits.max_file_bytes:
        names = ", ".join(sorted(sizes))
        raise CheckpointError(
            f"{names}: {human_bytes(total)} of weights exceeds the {human_bytes(limits.max_file_bytes)} limit for "
            "checkpoints here; use a smaller model (or raise PLAYGROUND_MAX_CHECKPOINT_BYTES when running locally)"
        )


def check_file_holds(layout: StateLayout, headers: list[SafetensorsHeader], where: str) -> None:
    """Refuse a config that claims far more than the file holds, before anything of its size exists.

    Every parameter of our model is made from file tensors of the same total size (copies, fusions
    and transposes keep the element count), each from at least one tensor of its own. A config that
    claims more than twice the file's tensors or elements is an obvious lie, refused here by
    arithmetic; a smaller mismatch gets the precise message (which tensor, which shape) from the
    header-only validation that follows, whose cost this bound keeps proportional to the file.
    """
    tensors = [info for header in headers for info in header.tensors.values()]
    present = sum(info.numel for info in tensors if info.dtype in FLOAT_DTYPES)
    if layout.tensor_count > 2 * len(tensors) + 8 or layout.numel > 2 * present + 4096:
        raise CheckpointError(
            f"{where}: the config declares {layout.layers:,} layers ({layout.numel:,} parameters in "
            f"{layout.tensor_count:,} tensors) but the file holds {present:,} parameters in {len(tensors):,} "
            "tensors; the config does not describe these weights (fix the layer count and sizes in the config)"
        )


@dataclass(frozen=True)
class LoadEstimate:
    """Bytes a loaded model keeps (`resident`) and what loading it needs at its peak."""

    weights: int
    buffers: int  # non-persistent tables (sinusoidal positions, RoPE frequencies)
    buffer_build: int  # temporaries while the largest table is computed
    modules: int  # Python objects of the layers
    cache: int  # KV cache of `cache_tokens` tokens (what a modest request needs)
    cache_tokens: int

    @property
    def resident(self) -> int:
        return self.weights + self.buffers + self.modules

    @property
    def peak(self) -> int:
        return self.resident + max(self.buffer_build, self.cache)


def estimate_load(layout: StateLayout, config: ModelConfig, element_size: int, cache_tokens: int) -> LoadEstimate:
    """What loading `config` costs: weights in the target dtype, its buffers and their construction,
    the modules' Python objects, and a KV cache of `cache_tokens` tokens (x2 for seq2seq: cross K/V)."""
    tokens = min(cache_tokens, config.max_positions)
    cache = 2 * config.n_layers * config.n_kv_heads * config.head_dim * tokens * element_size
    if config.kind == "seq2seq":
        cache *= 2  # cross-attention K/V of a source as long as the target
    return LoadEstimate(
        weights=layout.numel * element_size,
        buffers=layout.buffer_bytes,
        buffer_build=BUFFER_BUILD_FACTOR * layout.largest_buffer_bytes,
        modules=layout.layers * MODULE_BYTES_PER_LAYER,
        cache=cache,
        cache_tokens=tokens,
    )


def check_memory(estimate: LoadEstimate, limits: Limits, where: str) -> None:
    """Refuse a model whose peak while loading, or whose resident size plus a modest KV cache, exceeds the budget."""
    if estimate.peak > limits.memory_budget_bytes:
        parts = [f"{human_bytes(estimate.weights)} of weights"]
        if estimate.buffers:
            parts.append(
                f"{human_bytes(estimate.buffers)} of position tables + {human_bytes(estimate.buffer_build)} while "
                "computing them"
            )
        parts.append(f"{human_bytes(estimate.modules)} of module objects")
        parts.append(f"{human_bytes(estimate.cache)} of KV cache for {estimate.cache_tokens} tokens")
        raise CheckpointError(
            f"{where}: needs about {human_bytes(estimate.peak)} ({', '.join(parts)}) but the memory budget is "
            f"{human_bytes(limits.memory_budget_bytes)}; choose a smaller model, fewer max_positions or dtype "
            "bfloat16/float16"
        )
