"""Benchmark: the captured decode step against our eager engine on the CPU, as a markdown table.

    python -m playground.tools.capture_bench [--model weights/SmolLM2-135M-Instruct] [--new-tokens 48]
                                             [--rounds 3] [--threads 1] [--json out.json]

Greedy, float32. One row: our engine (`generate_all`) against the same model loaded with compile=True
(`generation.captured`: every decode step one call of a torch.compile'd step, Inductor's C++), with the time
the first run spent compiling. Eight rows: our eager batched pass (what the app's scheduler runs for eight
visitors: `forward_rows` through the batch-invariant kernels) against the captured step of eight rows (one
graph for the bucket). Rates are decode tokens/s of all rows together after the prefill, the best of
`--rounds` rounds that take the engines in turn (a busy machine slows them alike), with their ratio in the
same run, and whether the captured tokens equal the eager ones. Timings are only meaningful on a quiet
machine: say when it was shared.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

DEFAULT_MODEL = "weights/SmolLM2-135M-Instruct"
PROMPT = "Write a short poem about the sea."


def run(model: str, new_tokens: int, rounds: int, rows: int) -> dict[str, Any]:
    import playground
    from playground.tools.gpu_bench import decode_rate, prompts
    from playground.tools.gpu_check import OursCaptured, OursEager

    started = time.perf_counter()
    eager = playground.load_model(model)
    captured = playground.load_model(model, compile=True)
    cfg = playground.GenerationConfig(max_new_tokens=new_tokens, top_candidates=0)
    ids = eager.tokenize(PROMPT, chat=eager.chat_template_available)
    cpu = torch.device("cpu")

    t0 = time.perf_counter()
    first = playground.generate_all(captured, ids, cfg)  # compiles the one-row graph
    first_run_s = time.perf_counter() - t0
    reference = playground.generate_all(eager, ids, cfg)
    one = {"eager": [], "captured": []}
    for _ in range(rounds):
        one["eager"].append(playground.generate_all(eager, ids, cfg).timing["tokens_per_s"])
        one["captured"].append(playground.generate_all(captured, ids, cfg).timing["tokens_per_s"])
    steady_s = len(first.token_ids) / max(one["captured"]) if first.token_ids else 0.0
    single = {"rows": 1, "eager": max(one["eager"]), "captured": max(one["captured"]),
              "equal": first.token_ids == reference.token_ids, "compile_s": round(first_run_s - steady_s, 1),
              "decoding": first.decoding}

    batch = prompts(eager.config.vocab_size, rows)
    ours = OursEager(eager, False)
    graph = OursCaptured(eager, "inductor", False, rows, len(batch[0]) + new_tokens)
    t0 = time.perf_counter()
    got = graph.run(batch, new_tokens)  # compiles the eight-row graph
    compile_rows_s = time.perf_counter() - t0
    want = ours.run(batch, new_tokens)
    many = {"eager": 0.0, "captured": 0.0}
    for _ in range(rounds):
        many["eager"] = max(many["eager"], decode_rate(lambda k: ours.run(batch, k), rows, new_tokens, 1, cpu))
        many["captured"] = max(many["captured"], decode_rate(lambda k: graph.run(batch, k), rows, new_tokens, 1, cpu))
    several = {"rows": rows, "eager": many["eager"], "captured": many["captured"],
               "equal": sum(g == w for g, w in zip(got, want)), "compile_s": round(compile_rows_s, 1)}
    return {
        "model": Path(model).name, "new_tokens": new_tokens, "rounds": rounds, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(), "torch": torch.__version__, "rows": [single, several],
        "seconds": round(time.perf_counter() - started, 1),
    }


def table(result: dict[str, Any]) -> str:
    lines = ["| rows | eager tokens/s | captured tokens/s | captured / eager | first compile (s) | tokens equal |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        equal = ("yes" if r["equal"] else "no") if r["rows"] == 1 else f"{r['equal']}/{r['rows']}"
        lines.append(f"| {r['rows']} | {r['eager']:.1f} | {r['captured']:.1f} | {r['captured'] / r['eager']:.2f}× | "
                     f"{r['compile_s']} | {equal} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.tools.capture_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="checkpoint folder")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds over both engines (best kept)")
    parser.add_argument("--rows", type=int, default=8, help="rows of the batched comparison")
    # One thread by default: on a shared 2-core machine two threads spin-wait whenever someone else runs.
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--json", help="write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run(args.model, args.new_tokens, args.rounds, args.rows)
    print(f"{result['model']} float32, greedy, {result['new_tokens']} new tokens, {result['threads']} threads, "
          f"best of {result['rounds']} rounds, {result['seconds']} s in all; torch {result['torch']}")
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
