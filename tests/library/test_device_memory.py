"""Admission's memory budget on the model's device: host memory on the CPU, free GPU memory on CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import playground
from playground.generation.device_memory import MIN_MARGIN_BYTES, admission_budget, cuda_budget, cuda_margin

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3


@pytest.mark.parametrize("name", ["tiny-lm", "tiny-seq2seq"])
def test_on_the_cpu_the_budget_is_the_limit_less_the_model_and_its_prepacked_copy(name):
    lm = playground.load_model(REPO / "weights" / name)
    assert lm.resident_bytes > 0
    assert admission_budget(lm, 3 * GIB) == 3 * GIB - 2 * lm.resident_bytes
    assert admission_budget(lm, lm.limits.memory_budget_bytes) == lm.limits.memory_budget_bytes - 2 * lm.resident_bytes
    assert admission_budget(lm, lm.resident_bytes) == -lm.resident_bytes  # today's value, even when it is negative


def test_on_cuda_free_and_cached_memory_count_less_a_margin_and_the_limit_caps_it():
    assert cuda_margin(80 * GIB) == 4 * GIB and cuda_margin(4 * GIB) == MIN_MARGIN_BYTES
    # An H100 with 70 GiB free and 2 GiB held by PyTorch's allocator; the limit far above it.
    assert cuda_budget(70 * GIB, 80 * GIB, 2 * GIB, GIB, 500 * GIB) == 68 * GIB
    # A smaller configured budget wins, less the weights once (no prepacked copy on a GPU).
    assert cuda_budget(70 * GIB, 80 * GIB, 0, GIB, 9 * GIB) == 8 * GIB
    # A full GPU admits nothing, never a negative budget.
    assert cuda_budget(100 * 1024**2, 16 * GIB, 0, GIB, 500 * GIB) == 0


@pytest.mark.gpu
def test_on_a_gpu_the_budget_follows_free_memory():
    lm = playground.load_model(REPO / "weights" / "tiny-lm", device="cuda")
    huge = 10**15
    free, total = torch.cuda.mem_get_info(lm.device)
    before = admission_budget(lm, huge)
    cached = torch.cuda.memory_reserved(lm.device) - torch.cuda.memory_allocated(lm.device)
    assert before == free + cached - cuda_margin(total) > 0
    block = torch.empty(GIB, dtype=torch.uint8, device=lm.device)  # one GiB taken
    after = admission_budget(lm, huge)
    assert abs((before - after) - GIB) < 64 * 1024**2
    del block
    # The configured budget caps it, less the weights once: not twice as on the CPU.
    assert admission_budget(lm, 2 * GIB) == min(admission_budget(lm, huge), 2 * GIB - lm.resident_bytes)
