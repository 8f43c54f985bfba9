"""glibc's defaults against the server's bounded allocator (`heap.bound_allocator`), in the same run.

    python -m playground.tools.allocator_bench [--model weights/SmolLM2-135M-Instruct] [--rounds 3]
        [--tokens 128] [--churn 6] [--threads 1]

Each round starts one fresh process per setting, in alternation (default, bounded, default, …), so both see the same
machine. A process loads the model, then:
- **decode speed**: a greedy run of `--tokens` tokens, timed three times after one warm-up (its median);
- **churn**, as a class's hour does it: `--churn` times, a precision copy (int8, simulated: float32-sized) is built,
  runs once and is dropped, and four threads run 64 tokens each at once; then the memory that is left.
Prints a markdown table: decode tokens/s per setting (the median of the rounds) and the ratio, RSS after the
warm-up and after the churn, and glibc's own account after the churn (allocated, freed but kept).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from playground.tools.server import rss_bytes

SETTINGS = ("default", "bounded")
PROMPT = "Write a long story about a dragon who learns to cook."


def child(setting: str, model: str, tokens: int, churn: int, threads: int) -> dict:
    """One process's measures (printed as JSON by `--child`)."""
    from playground.app import heap

    bounded = heap.bound_allocator() if setting == "bounded" else False
    import torch

    import playground
    from playground import variants
    from playground.generation import GenerationConfig

    torch.set_num_threads(threads)
    lm = playground.load_model(model)
    ids = lm.tokenizer.encode(PROMPT)

    def decode(model_lm, n: int) -> int:
        return sum(1 for _ in playground.generate(model_lm, ids, GenerationConfig(max_new_tokens=n)))

    decode(lm, 16)  # warm-up: first-call costs
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        made = decode(lm, tokens)
        times.append(made / (time.perf_counter() - t0))
    heap.release(force=True)
    rss_warm = rss_bytes(os.getpid())
    for _ in range(churn):
        copy = variants.variant(lm, "int8", real=False)
        decode(copy.lm, 16)
        del copy
        variants.VARIANTS.clear()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: decode(lm, 64), range(4)))
    heap.release(force=True)
    malloc = heap.allocator()
    return {"setting": setting, "took": bounded, "tokens_per_s": statistics.median(times), "rss_warm": rss_warm,
            "rss_after": rss_bytes(os.getpid()), "in_use": malloc.in_use if malloc else 0,
            "free_kept": malloc.free_kept if malloc else 0}


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.tools.allocator_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="weights/SmolLM2-135M-Instruct")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--churn", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.child:
        print(json.dumps(child(args.child, args.model, args.tokens, args.churn, args.threads)))
        return 0
    results: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    for r in range(args.rounds):
        for setting in SETTINGS if r % 2 == 0 else reversed(SETTINGS):
            out = subprocess.run([sys.executable, "-m", "playground.tools.allocator_bench", "--child", setting,
                                  "--model", args.model, "--tokens", str(args.tokens), "--churn", str(args.churn),
                                  "--threads", str(args.threads)], capture_output=True, text=True, check=True)
            results[setting].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {setting}: {results[setting][-1]}", file=sys.stderr)
    med = {s: {k: statistics.median(x[k] for x in rs) for k in ("tokens_per_s", "rss_warm", "rss_after", "in_use",
                                                                 "free_kept")} for s, rs in results.items()}
    print("| allocator | decode tokens/s | ratio to glibc's defaults | RSS after warm-up | after churn | growth "
          "| malloc: allocated / freed but kept |")
    print("|---|---|---|---|---|---|---|")
    base = med["default"]["tokens_per_s"]
    for s in SETTINGS:
        m = med[s]
        print(f"| {s} | {m['tokens_per_s']:.1f} | {m['tokens_per_s'] / base:.3f} | {mib(m['rss_warm'])} | "
              f"{mib(m['rss_after'])} | {mib(m['rss_after'] - m['rss_warm'])} | {mib(m['in_use'])} / "
              f"{mib(m['free_kept'])} |")
    print(f"\nMedians of {args.rounds} rounds, one fresh process per setting per round, alternating; "
          f"{args.tokens}-token greedy decode, {args.churn} churn rounds, {args.threads} torch thread(s).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
