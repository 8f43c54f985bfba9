"""SDPA against the explicit softmax: time, memory and agreement at the model's head sizes.

Both are our own `attend` (playground.models.attention): the fast path calls
`F.scaled_dot_product_attention` (a fused kernel that works block by block, never holding the
T × S score matrix: O(T) extra memory); the explicit path computes softmax(Q·Kᵀ·scale + mask)·V and
materialises the scores and weights (B, h, T, S): O(T²).

Both run on the model's device in the model's dtype (the inputs are drawn on the CPU from the seed,
so every device times the same numbers); on CUDA each timing waits for the GPU before and after
(kernels run asynchronously), and the peaks come from PyTorch's CUDA allocator instead.

Memory on the CPU, stated honestly: Python's tracemalloc does not see torch's allocations, so two numbers are
given. `score_bytes` is analytic: one (h, T, S) float32 tensor; at its peak the explicit path holds
two of them (the masked scores and the weights) plus the (T, S) boolean causal mask. The peaks are
also measured, in a fresh child process (`peak_memory`): its peak resident memory (Linux VmHWM,
reset through /proc/self/clear_refs before each call) minus its resident memory before the call.
The child runs with glibc's dynamic mmap threshold off (MALLOC_MMAP_THRESHOLD_=65536), so every
tensor above 64 KiB is mapped when allocated and returned when freed; otherwise freed memory is
reused and a second call would look free. Off Linux the measured numbers are None.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from playground.loaded import LoadedModel
from playground.models.attention import attend

DEFAULT_LENGTHS = (128, 256, 512, 1024)
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int | None:
    try:
        found = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def _reset_peak() -> bool:
    """Reset the peak-RSS counter (Linux: writing 5 to clear_refs); False where it cannot be."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_delta(fn) -> int | None:
    """Bytes the process's resident memory peaked above its level before `fn()`, or None (not Linux)."""
    if not _reset_peak():
        return None
    before = _status_kib("VmRSS")
    fn()
    peak = _status_kib("VmHWM")
    if before is None or peak is None:
        return None
    return max(0, peak - before) * 1024


def device_sync(device: torch.device) -> Callable[[], None]:
    """What makes a wall-clock reading cover the device's work: CUDA kernels run asynchronously."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _interleaved_ms(fns: tuple[Callable[[], Any], ...], repeats: int, sync: Callable[[], None],
                    ) -> list[tuple[float, float, float]]:
    """(median, min, max) ms of each of `fns`, timed `repeats` times each in alternating order (A B, B A, …) so a
    drift of the machine's speed hits both alike."""
    times: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        for i in range(len(fns)) if r % 2 == 0 else reversed(range(len(fns))):
            sync()
            t0 = time.perf_counter()
            fns[i]()
            sync()
            times[i].append((time.perf_counter() - t0) * 1000)
    return [(statistics.median(v), min(v), max(v)) for v in times]


def cuda_peak_bytes(fn, device: torch.device) -> int:
    """Bytes the CUDA allocator's peak rose above what was allocated before `fn()`."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return max(0, torch.cuda.max_memory_allocated(device) - before)


@torch.inference_mode()
def sdpa_vs_explicit(
    lm: LoadedModel, lengths: tuple[int, ...] = DEFAULT_LENGTHS, *, repeats: int = 3, seed: int = 0,
    memory: bool = True,
) -> dict[str, Any]:
    """Causal self-attention over T random tokens at the model's head sizes, both code paths.

    Returns n_heads, n_kv_heads, head_dim, dtype, device, repeats, memory_method, and rows [{length,
    sdpa_ms / explicit_ms (median), sdpa_ms_min/max, explicit_ms_min/max, max_abs_diff (outputs),
    score_bytes (one (h, T, T) float32 tensor), explicit_bytes_analytic (2 such + the T × T mask),
    output_bytes, sdpa_peak_bytes / explicit_peak_bytes (measured with `memory`, else None)}];
    memory_method "measured" (CPU, a child process), "measured_cuda" (the CUDA allocator) or "analytic".
    """
    c = lm.config
    h, h_kv, d = c.n_heads, c.n_kv_heads, c.head_dim
    weight = lm.model.embed.weight
    dtype, device = weight.dtype, weight.device
    sync = device_sync(device)
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def draw(heads: int, T: int) -> torch.Tensor:
        return torch.randn(1, heads, T, d, generator=gen, device="cpu").to(device=device, dtype=dtype)

    rows, cuda_peaks = [], {}
    for T in sorted({int(t) for t in lengths}):
        if T < 1:
            raise ValueError(f"lengths must be positive, got {T}")
        q, k, v = draw(h, T), draw(h_kv, T), draw(h_kv, T)

        def fast(q=q, k=k, v=v):
            return attend(q, k, v, scale=c.scale, is_causal=True)[0]

        def explicit(q=q, k=k, v=v):
            return attend(q, k, v, scale=c.scale, is_causal=True, need_weights=True)[0]

        diff = float((fast().float() - explicit().float()).abs().max())  # also the warm-up of both
        (s_med, s_min, s_max), (e_med, e_min, e_max) = _interleaved_ms((fast, explicit), repeats, sync)
        if memory and device.type == "cuda":
            cuda_peaks[T] = {"sdpa": cuda_peak_bytes(fast, device), "explicit": cuda_peak_bytes(explicit, device)}
        score_bytes = h * T * T * 4
        rows.append({
            "length": T, "sdpa_ms": s_med, "sdpa_ms_min": s_min, "sdpa_ms_max": s_max,
            "explicit_ms": e_med, "explicit_ms_min": e_min, "explicit_ms_max": e_max, "max_abs_diff": diff,
            "score_bytes": score_bytes, "explicit_bytes_analytic": 2 * score_bytes + T * T,
            "output_bytes": h * T * d * q.element_size(),
        })
    name = str(dtype).removeprefix("torch.")
    if device.type == "cuda":
        measured, method = cuda_peaks or None, "measured_cuda"
    elif device.type == "cpu" and memory:  # the child measures the process's resident memory: the CPU's
        measured, method = peak_memory(h, h_kv, d, [r["length"] for r in rows], dtype=name), "measured"
    else:
        measured, method = None, "analytic"
    for row in rows:
        peaks = (measured or {}).get(row["length"], {})
        row["sdpa_peak_bytes"], row["explicit_peak_bytes"] = peaks.get("sdpa"), peaks.get("explicit")
    return {"n_heads": h, "n_kv_heads": h_kv, "head_dim": d, "dtype": name, "device": str(device),
            "repeats": repeats, "memory_method": method if measured else "analytic", "rows": rows}


def peak_memory(h: int, h_kv: int, d: int, lengths: list[int], *, dtype: str = "float32",
                timeout: float = 120.0) -> dict[int, dict[str, int]] | None:
    """Measured peak bytes of each path per length, from a child process (see the module docstring);
    None where it cannot be measured (not Linux, or the child failed)."""
    if not _STATUS.exists():
        return None
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    args = [sys.executable, "-m", "playground.analysis.sdpa", str(h), str(h_kv), str(d), dtype,
            ",".join(str(t) for t in lengths)]
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, check=True)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return {int(t): v for t, v in found.items()} if found else None


@torch.inference_mode()
def _child(h: int, h_kv: int, d: int, dtype: str, lengths: list[int]) -> dict[int, dict[str, int]] | None:
    torch.set_num_threads(1)
    out = {}
    for T in lengths:
        q = torch.randn(1, h, T, d).to(getattr(torch, dtype))
        k = torch.randn(1, h_kv, T, d).to(q.dtype)
        v = torch.randn(1, h_kv, T, d).to(q.dtype)
        fast = lambda q=q, k=k, v=v: attend(q, k, v, scale=d**-0.5, is_causal=True)  # noqa: E731
        explicit = lambda q=q, k=k, v=v: attend(q, k, v, scale=d**-0.5, is_causal=True, need_weights=True)  # noqa: E731
        fast(), explicit()  # warm-up: kernels and thread pools set up outside the measurement
        sdpa, full = peak_rss_delta(fast), peak_rss_delta(explicit)
        if sdpa is None or full is None:
            return None
        out[T] = {"sdpa": sdpa, "explicit": full}
    return out


if __name__ == "__main__":  # the measuring child: h h_kv d dtype T1,T2,...
    h_, h_kv_, d_, dtype_, lengths_ = sys.argv[1:6]
    print(json.dumps(_child(int(h_), int(h_kv_), int(d_), dtype_, [int(t) for t in lengths_.split(",")])))
