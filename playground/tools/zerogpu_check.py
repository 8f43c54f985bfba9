"""`python -m playground.tools.zerogpu_check`: the app's ZeroGPU run function through the emulated `spaces.GPU`
(a forked worker, arguments and events pickled), timed cold and warm, checked against the engine alone.

    python -m playground.tools.zerogpu_check --model weights/SmolLM2-135M-Instruct --device cuda --json
    PLAYGROUND_COMPILE=cudagraph python -m playground.tools.zerogpu_check ...   # as `app.py --compile` on ZeroGPU

The page's own plan (chat, the live panel's attention layer, the residual stream, 8 candidates) is made on
the main process's CPU copy, as the app makes it; the worker loads the model on `--device` (a GPU where the
machine has one) from the same path. Each run says how it decoded in the worker and what that call captured (a
fresh worker captures the run's step shape once; a reused one replays it). Needs neither Gradio nor a GPU: on the
CPU it is the tests' path.
"""

from __future__ import annotations

import argparse
import json
import pickle
import threading
import time
from typing import Any

import torch

from playground.app import zerogpu
from playground.app.play import start_run
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.checkpoints.loader import load_model
from playground.generation import StepEvent, run_plan
from playground.tools.zerogpu_emulation import EmulatedGPU


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("--model", default="weights/tiny-lm", help="a checkpoint folder or file")
    parser.add_argument("--prompt", default="What is the capital of France?")
    parser.add_argument("--device", default=None, help="where the worker decodes (default: its GPU, else the CPU)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens a run asks for")
    parser.add_argument("--runs", type=int, default=3, help="runs in a row: the first starts the worker")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def check(args: argparse.Namespace) -> dict[str, Any]:
    lm = load_model(args.model)  # the server's CPU copy
    settings = UISettings(prompt=args.prompt, chat=lm.chat_template_available, max_new_tokens=args.tokens,
                          attention=True)
    reference = list(run_plan(start_run(Session(), lm, settings)[1]))  # the engine alone, on this CPU
    gpu = EmulatedGPU()
    mode = zerogpu.ZeroGPU(gpu, device=args.device)
    runs = []
    try:
        for _ in range(args.runs):
            p = start_run(Session(), lm, settings)[1]
            started, first, events = time.perf_counter(), None, []
            for event in mode.run_events(p, threading.Event(), report_waiting=True):
                first = first if first is not None else time.perf_counter() - started
                events.append(event)
            total = time.perf_counter() - started
            loaded = next(x for x in reversed(gpu.received) if isinstance(x, zerogpu.Loaded))
            decoded = next((x for x in reversed(gpu.received) if isinstance(x, zerogpu.Decoded)), None)
            steps = [e for e in events if isinstance(e, StepEvent)]
            sizes = [len(pickle.dumps(e)) for e in steps]
            runs.append({
                "worker": "reused" if loaded.cached else "new", "device": loaded.device, "load_s": round(loaded.seconds, 3),
                "first_token_s": round(first or 0.0, 3), "run_s": round(total, 3), "tokens": len(steps),
                "worker_tokens_per_s": steps[-1].timing.get("tokens_per_s") if steps else None,
                "decoding": "eager" if decoded is None or not decoded.decoding.get("captured")
                else f"captured ({decoded.decoding.get('backend')})",
                "captures": decoded.captures if decoded else 0, "capture_s": decoded.capture_seconds if decoded else 0.0,
                "asked_s": gpu.durations[-1], "event_kB_mean": round(sum(sizes) / max(1, len(sizes)) / 1e3, 1),
                "notices": [e.key for e in events if isinstance(e, zerogpu.Notice)],
                "same_tokens_as_cpu": [e.token_ids for e in steps] == [e.token_ids for e in reference],
                "max_prob_diff": max((abs(a.prob - b.prob) for a, b in zip(steps, reference)), default=None),
            })
    finally:
        gpu.close_worker()
    return {"model": str(args.model), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "text": reference[-1].text if reference else "", "runs": runs}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = check(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['model']} on {report['gpu'] or 'the CPU'}: {report['text']!r}")
    for run in report["runs"]:
        print("  " + ", ".join(f"{k} {v}" for k, v in run.items()))


if __name__ == "__main__":
    main()
