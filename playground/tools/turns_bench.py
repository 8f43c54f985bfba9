"""How long another visitor's request waits beside runs that take their own turns (round 5, rows 3 and 8).

    python -m playground.tools.turns_bench [--model weights/SmolLM2-135M-Instruct] [--tokens 32]

A plain greedy request of `--tokens` tokens, timed alone, then beside each of: a run drafted by the model's
first 6 layers with 16 draft tokens (row 3: a model drafter that disagrees often), a run with an ablation over a long prompt and one with a KV
window over it (row 8). Everything runs through one scheduler on this thread, as the server's torch thread
runs it. Prints the plain request's seconds and its ratio to alone: run it from another checkout (PYTHONPATH)
to compare before and after.
"""

from __future__ import annotations

import argparse
import time

import torch

import playground
from playground.generation import GenerationConfig
from playground.generation.batch import Scheduler
from playground.generation.plan import plan
from playground.interventions import Ablate


def plain_seconds(lm, tokens: int, beside: tuple[list[int], GenerationConfig] | None) -> tuple[float, float]:
    """Seconds until the plain request's last token, and its longest wait for one token, with the `beside`
    run submitted first (it outlives the plain request)."""
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4)
    if beside is not None:
        scheduler.submit(plan(lm, *beside))
    started = last = time.perf_counter()
    ticket = scheduler.submit(plan(lm, lm.tokenize("The capital of France is"), GenerationConfig(max_new_tokens=tokens)))
    produced, longest = 0, 0.0
    while not ticket.done:
        scheduler.step()
        if ticket.produced > produced:
            now = time.perf_counter()
            produced, longest, last = ticket.produced, max(longest, now - last), now
    return time.perf_counter() - started, longest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="weights/SmolLM2-135M-Instruct")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = playground.load_model(args.model)
    long = (lm.tokenize("The history of the city is long and full of stories. ") * args.prompt_tokens)[: args.prompt_tokens]
    short = lm.tokenize("Once upon a time")
    besides = {
        "alone": None,
        # the model's first 6 layers draft: a model drafter that disagrees often, as another upload does
        "beside a run drafted by a model, 16 draft tokens": (short, GenerationConfig(max_new_tokens=400, draft="layer:6",
                                                                                      draft_tokens=16)),
        f"beside an ablation over a {len(long)}-token prompt": (long, GenerationConfig(
            max_new_tokens=400, interventions=(Ablate(1, head=0),))),
        f"beside a KV window over a {len(long)}-token prompt": (long, GenerationConfig(max_new_tokens=400,
                                                                                        kv_window=64)),
    }
    plain_seconds(lm, 4, None)  # warm-up
    alone = None
    print(f"| the plain {args.tokens}-token request | seconds | × alone | longest wait for a token |\n|---|---:|---:|---:|")
    for name, beside in besides.items():
        seconds, longest = plain_seconds(lm, args.tokens, beside)
        alone = alone or seconds
        print(f"| {name} | {seconds:.2f} | {seconds / alone:.1f} | {longest:.2f} s |")


if __name__ == "__main__":
    main()
