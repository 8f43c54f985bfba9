"""Benchmark: speculative decoding against plain greedy decoding of the same model, in the same run.

    python -m playground.tools.bench --speculative [--model weights/SmolLM2-135M-Instruct] [--new-tokens 48]
        [--drafts ngram,layer:24,layer:28] [--draft-tokens 4] [--draft-model PATH] [--repeats 3] [--threads 2]
        [--json out.json]

For each prompt, plain greedy decoding and each drafter run in turn, `--repeats` times; every row reports
tokens per pass of the model, the acceptance rate, the decode rate (tokens after the first over the time
after the prefill, the best of the repeats) and the speed-up against the plain run of the same prompt in this
run, and checks that the tokens are the plain run's (greedy speculative decoding must not change them).
Prints a markdown table.
A `--draft-model` must share the model's vocabulary. Timings only mean something on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

import playground
from playground.errors import PlaygroundError
from playground.generation import GenerationConfig, generate_all

DEFAULT_MODEL = "weights/SmolLM2-135M-Instruct"
PROMPTS = {
    # Answers that repeat their input are where prompt lookup finds its drafts (editing, quoting, code).
    "copy": "Copy this sentence exactly, then copy it once more: 'The quick brown fox jumps over the lazy dog, "
            "and the lazy dog sleeps under the old oak tree by the river.'",
    "free": "Explain in a few sentences why the sky is blue.",
}


def decode_rate(result: Any) -> float:
    """Tokens per second after the prefill: (n − 1) tokens over the engine time after the first token."""
    t = result.timing
    after = t["elapsed_ms"] - t["prefill_ms"]
    return (len(result.token_ids) - 1) * 1000.0 / after if after > 0 else 0.0


def run(lm: Any, drafts: list[Any], new_tokens: int, draft_tokens: int, repeats: int) -> list[dict[str, Any]]:
    """Per prompt: plain greedy decoding and each drafter, interleaved `repeats` times (a burst of load on a
    shared machine hits every configuration alike); each keeps its best decode rate."""
    base = GenerationConfig(max_new_tokens=new_tokens, chat=lm.chat_template_available, top_candidates=0)
    configs = [("plain", base)] + [(d, base.replace(draft=d, draft_tokens=draft_tokens)) for d in drafts]
    rows = []
    for name, prompt in PROMPTS.items():
        best = [0.0] * len(configs)
        results: list[Any] = [None] * len(configs)
        for _ in range(repeats):
            for i, (_, cfg) in enumerate(configs):
                results[i] = generate_all(lm, prompt, cfg)
                best[i] = max(best[i], decode_rate(results[i]))
        plain = results[0]
        rows.append({"prompt": name, "drafter": "plain", "tokens": len(plain.token_ids), "tokens_per_pass": 1.0,
                     "acceptance": None, "tokens_per_s": best[0], "speedup": 1.0, "same_tokens": True})
        for result, rate in zip(results[1:], best[1:]):
            s = result.speculation
            rows.append({
                "prompt": name, "drafter": s["drafter"], "tokens": len(result.token_ids),
                "tokens_per_pass": s["tokens_per_pass"], "acceptance": s["acceptance_rate"], "tokens_per_s": rate,
                "speedup": rate / best[0] if best[0] else 0.0, "same_tokens": result.token_ids == plain.token_ids,
                "proposed": s["proposed"], "accepted": s["accepted"], "target_passes": s["target_passes"],
            })
    return rows


def markdown(rows: list[dict[str, Any]], draft_tokens: int) -> str:
    lines = [
        f"| prompt | drafter (K = {draft_tokens}) | tokens / pass | acceptance | tokens/s | vs plain | same tokens |",
        "|---|---|---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        acceptance = "–" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
        lines.append(
            f"| {r['prompt']} | {r['drafter']} | {r['tokens_per_pass']:.2f} | {acceptance} | {r['tokens_per_s']:.1f} | "
            f"{r['speedup']:.2f}× | {'yes' if r['same_tokens'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.tools.bench --speculative",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--speculative", action="store_true", help="(selects this benchmark)")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--drafts", default="ngram,layer:24,layer:28", help="comma-separated: ngram, layer:K")
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--draft-model", help="a second checkpoint with the same vocabulary")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per configuration; the best counts")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--json", help="write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not Path(args.model).is_dir():
        print(f"error: no checkpoint folder at {args.model}; run `python -m playground import-smollm2` first "
              "or pass --model", file=sys.stderr)
        return 2
    try:
        lm = playground.load_model(args.model)
        drafts: list[Any] = [d.strip() for d in args.drafts.split(",") if d.strip()]
        if args.draft_model:
            drafts.append(playground.load_model(args.draft_model))
        rows = run(lm, drafts, args.new_tokens, args.draft_tokens, args.repeats)
    except PlaygroundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(markdown(rows, args.draft_tokens))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
