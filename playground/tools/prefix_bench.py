"""Prefix caching, measured: a class sends one long prompt at once, with and without the server's prefix store.

    python -m playground.tools.prefix_bench [--model weights/SmolLM2-135M-Instruct] [--visitors 30]
        [--prompt-tokens 500] [--new-tokens 4] [--threads 1] [--solo-repeats 3]

`--visitors` requests of the same `--prompt-tokens`-token prompt (greedy, `--new-tokens` tokens each) are
submitted together to one scheduler with the server's admission (16 rows, 4 prompts fed at once), stepped on
this thread as the server's torch thread steps it: once with a prefix store, once without, in the same process
(after a short warm-up that prepacks the batch kernels' weights).
Prints the prefill work (prompt token rows that went through the model, and the passes that fed them), each
visitor's first-token time (from the submission of all), their tokens compared with the run without the
store, and a visitor alone with a prompt nobody sent before (no hit: what the store costs a run it cannot help),
timed with and without the store, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import playground
from playground.generation import GenerationConfig
from playground.generation.batch import Scheduler, prefix_store
from playground.generation.batch_history import PREFILL, StepHistory
from playground.generation.plan import plan

TEXT = ("A class of thirty students opened the same page and pasted the same long instructions about "
        "photosynthesis, the water cycle and the carbon cycle, asking for a summary. ")


def crowd(lm, prompt: list[int], visitors: int, new_tokens: int, cached: bool) -> dict:
    """All visitors at once through one scheduler; returns the prefill work, first-token times and tokens."""
    history = StepHistory(capacity=100_000)
    store = prefix_store(lm) if cached else None
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4, history=history, prefix=store)
    cfg = GenerationConfig(max_new_tokens=new_tokens)
    started = time.perf_counter()
    tickets = [scheduler.submit(plan(lm, prompt, cfg), owner=f"visitor {i}") for i in range(visitors)]
    first: dict[int, float] = {}
    while scheduler.busy():
        scheduler.step()
        now = time.perf_counter() - started
        for i, t in enumerate(tickets):
            if t.first_event and i not in first:
                first[i] = now
    total = time.perf_counter() - started
    entries = [e for s in history.records() for p in s.passes for e in p.entries if e.kind == PREFILL]
    return {"seconds": total, "first": [first[i] for i in range(visitors)], "prefill_rows": sum(e.tokens for e in entries),
            "prefill_passes": len(entries), "cached": [t.cached_tokens for t in tickets],
            "tokens": [t.drain()[-1].token_ids for t in tickets]}


def solo_seconds(lm, prompt: list[int], new_tokens: int, cached: bool) -> tuple[float, float]:
    """(first-token seconds, whole-run seconds) of one request alone, its prompt new to the store."""
    scheduler = Scheduler(lm, prefix=prefix_store(lm) if cached else None)
    started = time.perf_counter()
    ticket = scheduler.submit(plan(lm, prompt, GenerationConfig(max_new_tokens=new_tokens)))
    first = None
    while scheduler.busy():
        scheduler.step()
        if first is None and ticket.first_event:
            first = time.perf_counter() - started
    return first or 0.0, time.perf_counter() - started


def _summary(seconds: list[float]) -> str:
    return (f"median {statistics.median(seconds):.2f} s, first {min(seconds):.2f} s, last {max(seconds):.2f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="weights/SmolLM2-135M-Instruct")
    parser.add_argument("--visitors", type=int, default=30, help="0: only the visitor alone, with and without")
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--solo-repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = playground.load_model(args.model)
    ids = lm.tokenize(TEXT * (1 + args.prompt_tokens // 20))
    prompt = ids[: args.prompt_tokens]
    print(f"{args.visitors} visitors, one {len(prompt)}-token prompt, {args.new_tokens} new tokens each, "
          f"{torch.get_num_threads()} threads")
    crowd(lm, prompt[:40], 2, 1, cached=False)  # warm-up: the batch kernels' prepacked weights, first passes
    runs = {}
    for cached in (True, False) if args.visitors else ():  # with the store first: if time runs out, its numbers are already out
        r = runs[cached] = crowd(lm, prompt, args.visitors, args.new_tokens, cached)
        name = "with the prefix store   " if cached else "without the prefix store"
        print(f"{name}: prefill {r['prefill_rows']:,} prompt token rows in {r['prefill_passes']} chunk passes; "
              f"all done in {r['seconds']:.1f} s; first token {_summary(r['first'])}")
        print("  first-token seconds per visitor: " + " ".join(f"{s:.2f}" for s in r["first"]), flush=True)
        if cached:
            reused = sum(r["cached"])
            print(f"  prompt tokens restored: {reused:,} of {len(prompt) * args.visitors:,} "
                  f"(hit rate {100 * reused / (len(prompt) * args.visitors):.1f} %); per visitor: "
                  + " ".join(str(c) for c in r["cached"]))
    if runs:
        same = runs[True]["tokens"] == runs[False]["tokens"]
        print(f"every visitor's tokens equal to the run without the store: {same}")
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for repeat in range(args.solo_repeats):  # alternating, each prompt new to its store
        for cached in (False, True):
            fresh = lm.tokenize(f"Visit {repeat} of {int(cached)}. " + TEXT * (1 + args.prompt_tokens // 20))
            times[cached].append(solo_seconds(lm, fresh[: args.prompt_tokens], args.new_tokens, cached))
    for cached in (False, True):
        first = statistics.median(t[0] for t in times[cached])
        whole = statistics.median(t[1] for t in times[cached])
        print(f"alone, no hit, {'with' if cached else 'without'} the store: first token {first:.3f} s, "
              f"whole run {whole:.3f} s (median of {args.solo_repeats})")


if __name__ == "__main__":
    main()
