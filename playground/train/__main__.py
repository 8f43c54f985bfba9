"""`python -m playground.train {lm,seq2seq} [options]`: train a default checkpoint and save it.

The checkpoint is our own single-file format (config + tokenizer + provenance in the safetensors
header); a JSON copy of the provenance is printed at the end. See weights/README.md for the exact
commands used for the shipped weights.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from playground.checkpoints.own_format import save_checkpoint
from playground.train.progress import Progress


def _parser() -> argparse.ArgumentParser:
    from playground.train import lm, seq2seq

    parser = argparse.ArgumentParser(prog="python -m playground.train", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="task", required=True)
    for name, module, help_text in (
        ("lm", lm, "LLaMA-style decoder on pydoc_data text -> weights/tiny-lm"),
        ("seq2seq", seq2seq, "original encoder-decoder Transformer on date normalisation -> weights/tiny-seq2seq"),
    ):
        p = sub.add_parser(name, help=help_text)
        module.add_arguments(p)
        p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
        p.add_argument("--log-every", type=int, default=10, help="steps between progress lines (no terminal)")
    return parser


def provenance(task: str, args: argparse.Namespace, data_source: str, metrics: dict[str, Any], result, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "task": task,
        "data_source": data_source,
        "command": "python -m playground.train " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "seed": args.seed,
        "steps": len(result.history),
        "recipe": result_recipe(args),
        "final_metrics": metrics,
        "train_seconds": round(result.seconds, 1),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        **extra,
    }


def result_recipe(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("steps", "batch_size", "lr", "warmup", "schedule", "weight_decay", "eval_every")
    return {
        **{k: getattr(args, k) for k in keys if hasattr(args, k)},
        "optimizer": "AdamW(betas=(0.9, 0.98), eps=1e-9)",
        "label_smoothing": 0.1,
        "grad_clip": 1.0,
        "teacher_forcing": True,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    progress = Progress(args.steps, every=args.log_every)
    started = time.perf_counter()
    if args.task == "lm":
        from playground.train import lm, text_data

        model, config, data, result, metrics = lm.run(args, progress)
        tokenizer, source = data.tokenizer, text_data.source_label()
        samples = {p: lm.sample(model, tokenizer, p, seed=args.seed) for p in lm.SAMPLE_PROMPTS}
        extra = {"samples": samples, "licence": "Python Software Foundation License (pydoc_data text)"}
    else:
        from playground.train import seq2seq

        model, config, tokenizer, result, metrics, extra = seq2seq.run(args, progress)
        source = seq2seq.SOURCE
    metrics["wall_seconds"] = round(time.perf_counter() - started, 1)
    record = provenance(args.task, args, source, metrics, result, extra)
    config.extra = {"provenance": {"task": args.task, "data_source": source, "command": record["command"]}}
    card = lm.CARD if args.task == "lm" else seq2seq.CARD
    out = save_checkpoint(Path(args.out), model, config, tokenizer=tokenizer, provenance=record, card=card)
    print(json.dumps(record, indent=2, ensure_ascii=False))
    print(f"saved {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
