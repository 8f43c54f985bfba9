"""Benchmark: what each KV-cache policy holds, saves and changes on a real model.

    python -m playground.tools.kv_bench [--model weights/SmolLM2-135M-Instruct] [--new-tokens 128]
                                        [--threads 1] [--json out.json]

One greedy run per policy from the same chat prompt (plain; window 64; sink 4 + window 60; heavy hitters:
sink 4 + heavy 16 + window 44; int8 cache; int4 cache), each a real run of our model (nothing is
simulated: evicted positions are gone from memory, quantised ones are stored as codes and scales and
dequantised on read). Prints a markdown table: KV bytes held at the end, the saving against the plain
run, the first step whose token differs from the plain greedy run, and the decode tokens/s; then the
attention-sink mass (the weight on the first token) over a short run, per layer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import torch

import playground
from playground.analysis.divergence import first_difference
from playground.analysis.kv_policies import sink_mass
from playground.generation import GenerationConfig, generate_all

PROMPT = "Explain step by step how the printing press changed science, religion and the news in Europe."
POLICIES: dict[str, dict[str, Any]] = {
    "plain": {},
    "window 64": {"kv_window": 64},
    "sink 4 + window 60": {"kv_sink": 4, "kv_window": 60},
    "sink 4 + heavy 16 + window 44": {"kv_sink": 4, "kv_heavy": 16, "kv_window": 44},
    "int8 cache": {"kv_dtype": "int8"},
    "int4 cache": {"kv_dtype": "int4"},
}


def run(model: str, new_tokens: int, threads: int) -> dict[str, Any]:
    started = time.perf_counter()
    torch.set_num_threads(threads)
    lm = playground.load_model(model)
    base = GenerationConfig(max_new_tokens=new_tokens, top_candidates=0, chat=True)  # a chat answer runs long
    rows, plain_tokens = [], None
    for name, settings in POLICIES.items():
        began = time.perf_counter()
        result = generate_all(lm, PROMPT, base.replace(**settings))
        seconds = time.perf_counter() - began
        if plain_tokens is None:
            plain_tokens = result.token_ids
        cache = result.cache
        plain_bytes = cache.get("plain_bytes", cache["bytes"])
        rows.append({
            "policy": name, "tokens": len(result.token_ids), "positions": cache["tokens"],
            "kept_positions": cache.get("kept_positions", cache["tokens"]), "bytes": cache["bytes"],
            "plain_bytes": plain_bytes, "saved": 1 - cache["bytes"] / plain_bytes,
            "first_difference": first_difference(plain_tokens, result.token_ids),
            "tokens_per_s": result.timing["tokens_per_s"], "seconds": round(seconds, 2),
        })
    began = time.perf_counter()
    mass = sink_mass(lm, PROMPT, base.replace(max_new_tokens=16))
    return {"model": model, "prompt_tokens": len(lm.tokenize(PROMPT, chat=True)), "new_tokens": new_tokens, "threads": threads,
            "rows": rows, "sink_mass": mass.tolist(), "sink_seconds": round(time.perf_counter() - began, 2),
            "total_seconds": round(time.perf_counter() - started, 1)}


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def table(report: dict[str, Any]) -> str:
    lines = [
        f"KV policies on {report['model']} ({report['prompt_tokens']} prompt tokens, up to {report['new_tokens']} new, "
        f"greedy, {report['threads']} threads)",
        "",
        "| policy | positions held / written | KV bytes held | saved vs a plain cache of that length | "
        "first step differing from plain greedy | decode tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        diff = "same tokens" if r["first_difference"] is None else str(r["first_difference"])
        lines.append(f"| {r['policy']} | {r['kept_positions']} / {r['positions']} | {_mib(r['bytes'])} | "
                     f"{100 * r['saved']:.1f}% | {diff} | {r['tokens_per_s']:.1f} |")
    mass = np.array(report["sink_mass"])  # (layers, heads)
    lines += ["", f"Attention on the first token over 16 steps: median head {np.median(mass):.2f}, "
              f"{int((mass > 0.5).sum())} of {mass.size} heads above 0.5; per layer (mean over heads): "
              + " ".join(f"{m:.2f}" for m in mass.mean(axis=1)),
              "", f"Whole benchmark: {report['total_seconds']} s (model load included)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="weights/SmolLM2-135M-Instruct")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)  # a shared 2-core machine: 2 threads spin-wait
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    report = run(args.model, args.new_tokens, args.threads)
    print(table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
