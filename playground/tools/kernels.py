"""Which matrix product pays for a few rows: time every candidate kernel on SmolLM2's shapes.

    python -m playground.tools.kernels [--rows 1,2,4,8,16] [--repeat 15] [--threads N]

Candidates: the library's (`playground.models.kernels`: layouts, oneDNN prepacked, per-row, column
blocks) and `split_cores`, the weight split by output columns across two threads of one core each.
Decoding streams every weight once per step, so a step for 8 sequences should cost about what a
step for one costs. On some CPU builds of torch, `x @ W` with a few rows falls off the fast
matrix-vector path onto a general matrix product that repacks the weight on every call. This prints,
per weight shape and row count, the median milliseconds of each candidate (same run, interleaved, so
the machine's noise hits all of them alike) and the ratio to one row of today's path.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import threading
import time
from collections.abc import Callable

import torch

from playground.models.kernels import CANDIDATES as LIBRARY_CANDIDATES
from playground.models.kernels import prepare as library_prepare

# SmolLM2-135M: the tied head, the fused gate/up, down, fused qkv, attention out.
SHAPES = {"head": (576, 49152), "gate_up": (576, 3072), "down": (1536, 576), "qkv": (576, 960), "out": (576, 576)}


class _TwoCores:
    """Two worker threads with one OpenMP thread each: the weight split in two by output columns, each
    core multiplying by its own half at the same time (the handoff to the threads is part of the cost)."""

    def __init__(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        ready = threading.Barrier(2)

        def one_thread() -> None:
            torch.set_num_threads(1)  # this thread's own OpenMP team: one core each
            ready.wait()

        for f in [self.pool.submit(one_thread) for _ in range(2)]:
            f.result()

    def __call__(self, x: torch.Tensor, halves: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        parts = [self.pool.submit(torch.matmul, x, half) for half in halves]
        return torch.cat([p.result() for p in parts], dim=-1)


_two_cores: _TwoCores | None = None


def _split_cores(x: torch.Tensor, halves: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    global _two_cores
    if _two_cores is None:
        _two_cores = _TwoCores()
    return _two_cores(x, halves)


CANDIDATES = {**LIBRARY_CANDIDATES, "split_cores": _split_cores}


def prepare(name: str, weight: torch.Tensor) -> object:
    if name == "split_cores":  # the two halves by output columns, each contiguous (in, out / 2)
        half = weight.shape[1] // 2
        return weight[:, :half].contiguous(), weight[:, half:].contiguous()
    return library_prepare(name, weight)


def _median_ms(fn: Callable[[], torch.Tensor], repeat: int) -> float:
    fn()  # warm: first calls pack weights and allocate
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


COLD_BYTES = 192 << 20  # more weights than any cache holds: each call streams its copy from memory, as decoding does


def measure(shape: tuple[int, int], rows: list[int], repeat: int, names: list[str]) -> dict[tuple[str, int], float]:
    """{(kernel, rows): median ms} for a weight of `shape` (in, out), read from memory (not cache):
    calls cycle through enough copies of the weight, as a forward pass walks through its layers."""
    torch.manual_seed(0)
    copies = max(2, COLD_BYTES // (shape[0] * shape[1] * 4))
    weights = [torch.randn(shape) * 0.02 for _ in range(copies)]
    out: dict[tuple[str, int], float] = {}
    with torch.inference_mode():
        for name in names:
            prepared = [prepare(name, w) for w in weights]
            for m in rows:
                x = torch.randn(m, shape[0])
                turn = iter(range(1 << 30))
                out[(name, m)] = _median_ms(
                    lambda n=name, p=prepared, t=turn, x=x: CANDIDATES[n](x, p[next(t) % len(p)]), repeat * 3
                )
            del prepared
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,4,8,16")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--kernels", default=",".join(CANDIDATES))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    names = args.kernels.split(",")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median ms of {args.repeat} calls")
    for shape_name in args.shapes.split(","):
        shape = SHAPES[shape_name]
        table = measure(shape, rows, args.repeat, names)
        base = table[("matmul", 1)] if ("matmul", 1) in table else None
        print(f"\n{shape_name} (in {shape[0]}, out {shape[1]})  " + "".join(f"{m:>9} rows" for m in rows))
        for name in names:
            cells = "".join(f"{table[(name, m)]:>14.2f}" for m in rows)
            print(f"  {name:<12}{cells}")
        if base:
            print("  ratio to matmul at 1 row, best kernel per row count: " + ", ".join(
                f"{m}: {min(table[(n, m)] for n in names) / base:.2f}× ({min(names, key=lambda n: table[(n, m)])})"
                for m in rows))


if __name__ == "__main__":
    main()
