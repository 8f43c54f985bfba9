"""Resource limits checked before a checkpoint is read: file size and estimated memory.

A public Space receives uploads from strangers; a file that would not fit is refused with the
numbers, before a single tensor is materialised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from playground.checkpoints.safetensors_io import ITEM_SIZES, SafetensorsHeader
from playground.config import ModelConfig
from playground.errors import CheckpointError

GIB = 1024**3


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


@dataclass(frozen=True)
class Limits:
    """max_file_bytes: total size of the checkpoint's weight files; memory_budget_bytes: weights in the
    target dtype plus a KV cache of `cache_tokens` tokens must fit in it."""

    max_file_bytes: int
    memory_budget_bytes: int
    cache_tokens: int = 2048

    @classmethod
    def default(cls) -> "Limits":
        """From PLAYGROUND_MAX_CHECKPOINT_BYTES / PLAYGROUND_MEMORY_BUDGET_BYTES, else 8 GiB files and
        70% of the memory available now."""
        max_file = int(os.environ.get("PLAYGROUND_MAX_CHECKPOINT_BYTES", 8 * GIB))
        budget = int(os.environ.get("PLAYGROUND_MEMORY_BUDGET_BYTES", int(0.7 * available_memory_bytes())))
        return cls(max_file_bytes=max_file, memory_budget_bytes=budget)


def _mib(n: int) -> str:
    return f"{n / 1024**2:,.1f} MiB"


def check_file_sizes(sizes: dict[str, int], limits: Limits) -> None:
    total = sum(sizes.values())
    if total > limits.max_file_bytes:
        names = ", ".join(sorted(sizes))
        raise CheckpointError(
            f"{names}: {_mib(total)} of weights exceeds the {_mib(limits.max_file_bytes)} limit for checkpoints "
            "here; use a smaller model (or raise PLAYGROUND_MAX_CHECKPOINT_BYTES when running locally)"
        )


def estimate_memory(headers: list[SafetensorsHeader], config: ModelConfig, element_size: int, cache_tokens: int) -> dict[str, int]:
    weights = sum(info.numel * (element_size if info.dtype.startswith(("F", "BF")) else ITEM_SIZES[info.dtype])
                  for header in headers for info in header.tensors.values())
    tokens = min(cache_tokens, config.max_positions)
    cache = 2 * config.n_layers * config.n_kv_heads * config.head_dim * tokens * element_size
    if config.kind == "seq2seq":
        cache *= 2  # cross-attention K/V of a source as long as the target
    return {"weights": weights, "cache": cache, "total": weights + cache}


def check_memory(headers: list[SafetensorsHeader], config: ModelConfig, element_size: int, limits: Limits, where: str) -> None:
    estimate = estimate_memory(headers, config, element_size, limits.cache_tokens)
    if estimate["total"] > limits.memory_budget_bytes:
        raise CheckpointError(
            f"{where}: needs about {_mib(estimate['total'])} ({_mib(estimate['weights'])} of weights + "
            f"{_mib(estimate['cache'])} of KV cache for {min(limits.cache_tokens, config.max_positions)} tokens) "
            f"but the memory budget is {_mib(limits.memory_budget_bytes)}; choose a smaller model or dtype "
            "bfloat16/float16"
        )
