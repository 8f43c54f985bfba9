"""How many bytes the running requests may take together, on the device the model lives on.

The scheduler admits a request when its memory peak (playground.generation.budget) fits in what is left.
Where that memory is depends on the device:

- CPU: the requests share host memory with the model twice over, its weights and the prepacked float32
  copy the batched kernels keep (playground.models.kernels): `budget - 2 · resident`.
- CUDA: the requests' KV caches and activations live on the GPU, so what counts is the memory the GPU
  has free now (`torch.cuda.mem_get_info`; the weights already sit there, so they are already taken),
  plus what PyTorch's caching allocator holds reserved but unused (free to PyTorch, not to the driver),
  less a margin for fragmentation, CUDA graph pools and library workspaces. No prepacked copy exists on
  a GPU. The configured budget (less the weights) still caps it: an operator sharing the GPU, or a test
  that forces a queue, sets a smaller one.
"""

from __future__ import annotations

from typing import Any

import torch

MARGIN_FRACTION = 0.05  # of the GPU's total memory, kept free
MIN_MARGIN_BYTES = 512 * 1024 * 1024


def cuda_margin(total: int) -> int:
    """Bytes kept free on a GPU of `total` bytes."""
    return max(MIN_MARGIN_BYTES, int(total * MARGIN_FRACTION))


def cuda_budget(free: int, total: int, cached: int, resident: int, limits_budget: int) -> int:
    """The CUDA rule as arithmetic: the lesser of (free + cached − margin) and (limits_budget − resident),
    never negative. free / total: `torch.cuda.mem_get_info`; cached: reserved but unallocated bytes."""
    return max(0, min(free + cached - cuda_margin(total), limits_budget - resident))


def admission_budget(lm: Any, limits_budget: int) -> int:
    """Bytes the running requests' memory peaks may take together for model `lm` (a LoadedModel:
    `device`, `resident_bytes`); `limits_budget`: `Limits.memory_budget_bytes` or the scheduler's own
    budget. On the CPU (and any device but CUDA) exactly `limits_budget - 2 * lm.resident_bytes`."""
    device = torch.device(lm.device)
    if device.type != "cuda":
        return limits_budget - 2 * lm.resident_bytes
    free, total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return cuda_budget(free, total, cached, lm.resident_bytes, limits_budget)
