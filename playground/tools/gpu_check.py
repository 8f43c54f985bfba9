"""The GPU check: one prepared script for a lent GPU, a few minutes, one summary table.

    python -m playground.tools.gpu_check [--model weights/SmolLM2-135M-Instruct] [--budget-s 280] [--json out.json]
    python -m playground.tools.gpu_check --device cpu --quick      # small sizes: CI runs it so it never rots

1. Parity, every decoder family (tiny random checkpoints written by transformers), float32 and bfloat16:
   greedy runs through the captured decode step (`generation.captured`, every backend that runs here:
   torch.compile with mode reduce-overhead, and a CUDA graph captured by hand) against our eager loop:
   tokens equal, probabilities within the dtype's rounding. On the GPU, each captured step also runs
   under `torch.cuda.set_sync_debug_mode("error")`: a host sync inside the step fails the check.
2. Speed, SmolLM2-135M's shape (random weights unless --model), greedy, 1, 8 and 64 streams decoding
   together, in one process on one card: our eager batched pass, our captured step (reduce-overhead; CUDA
   graph by hand), transformers eager and transformers static cache + torch.compile; ours with nothing
   recorded and with the page's live capture (the last layer's attention row, the residual stream, 8
   candidates). Decode tokens/s of all streams together, after the prefill (`gpu_bench.decode_rate`).

New measurements stop starting after --budget-s (what was skipped is said). Needs torch and transformers
only: no Gradio, plotly or greenlet (the scheduler is not used: our streams step as one batch here).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from playground.tools import gpu_bench

DTYPES = ("float32", "bfloat16")
STREAMS = (1, 64, 8)  # the two targets first (one stream; 64 together), then the middle
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 5e-3}  # probabilities, captured against eager
COMPILED_FAMILIES = ("llama-gqa", "gemma3-sliding-local-rope")  # parity through torch.compile (each compiles)
ENGINES = ("ours eager", "ours compiled", "ours CUDA graph", "ours captured, uncompiled", "transformers eager",
           "transformers compiled")
OURS_CAPTURED = {"inductor": "ours compiled", "cudagraph": "ours CUDA graph", "eager": "ours captured, uncompiled"}


def families() -> dict[str, tuple[str, dict[str, Any]]]:
    """The decoder families, tiny (as tests/library/test_batch_families.py has them)."""
    from tests.hf_tiny import gemma3_like, gpt2_like, llama_like, neo_like, neox_like, opt_like

    gqa = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, vocab_size=97)
    return {
        "llama-gqa": ("llama", llama_like(**gqa)),
        "gpt2": ("gpt2", gpt2_like(n_embd=64)),
        "mistral-window": ("mistral", llama_like(**gqa, sliding_window=5)),
        "qwen2-bias": ("qwen2", llama_like(**gqa)),
        "qwen3-qk-norm": ("qwen3", llama_like(**gqa, head_dim=16)),
        "gemma3-sliding-local-rope": ("gemma3_text", gemma3_like(
            hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            vocab_size=97)),
        "phi3-partial-rotary": ("phi3", llama_like(**gqa, partial_rotary_factor=0.5)),
        "gpt_neox-parallel": ("gpt_neox", neox_like(hidden_size=64, rotary_pct=0.25)),
        "gpt_neo-local-global": ("gpt_neo", neo_like(hidden_size=64, num_heads=4)),
        "olmo2-output-norm": ("olmo2", llama_like(**gqa)),
        "opt-post-ln-projected": ("opt", opt_like(hidden_size=64, ffn_dim=96, do_layer_norm_before=False,
                                                  word_embed_proj_dim=32)),
        "smollm3-nope": ("smollm3", llama_like(**gqa, num_hidden_layers=4)),
    }


def backends(device: torch.device, quick: bool, asked: list[str] | None = None) -> list[str]:
    """The captured backends that run on `device` (on the CPU with --quick: the step uncompiled), or those of
    `asked` among them."""
    # on CUDA the hand-captured graph first: it compiles nothing, so a budget cut leaves the compiles out
    here = ["cudagraph", "inductor"] if device.type == "cuda" else (["eager"] if quick else ["inductor"])
    return here if asked is None else [b for b in here if b in asked]


@dataclass
class Parity:
    dtype: str
    backend: str
    families: int = 0
    equal: int = 0
    worst: float = 0.0  # largest probability difference among the families with equal tokens
    failed: list[str] = field(default_factory=list)  # tokens differ where eager's top two were not a near tie
    errors: list[str] = field(default_factory=list)  # a family whose captured run raised (the exception's line)
    skipped: list[str] = field(default_factory=list)  # families not checked: the parity budget was spent
    ties: list[str] = field(default_factory=list)  # tokens differ first at a near tie (top two within tolerance)
    syncs: float | None = None  # CUDA: host syncs per decoding step, the most of any family (1: the output's)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.errors and self.worst <= TOLERANCE[self.dtype]

    def cell(self) -> str:
        ties = f", {len(self.ties)} part at a near tie" if self.ties else ""
        syncs = "" if self.syncs is None else f", {self.syncs:.0f} sync/step"
        errors = f", {len(self.errors)} raised" if self.errors else ""
        skipped = f", {len(self.skipped)} skipped (budget)" if self.skipped else ""
        return (f"{self.backend}: {self.equal}/{self.families} equal{ties}{errors}{skipped}, Δp {self.worst:.1e}{syncs} "
                f"{'ok' if self.ok else 'FAIL'}")


def parity(workdir: Path, device: str, dtypes: tuple[str, ...], quick: bool, log: Callable[[str], None],
           asked: list[str] | None = None, deadline: float = float("inf")) -> list[Parity]:
    import playground
    from playground.generation import GenerationConfig, generate_all
    from tests.hf_tiny import save_decoder

    dev = torch.device(device)
    out = []
    for backend in backends(dev, quick, asked):
        for dtype in dtypes:
            result = Parity(dtype, backend)
            for name, (family, kwargs) in families().items():
                if backend == "inductor" and not quick and name not in COMPILED_FAMILIES:
                    continue  # a compile per family would take the whole budget: the CUDA graph covers them all
                if time.perf_counter() > deadline:
                    result.skipped.append(name)
                    continue
                folder = workdir / name
                if not folder.exists():
                    save_decoder(folder, family, kwargs, init_std=0.1)
                eager = playground.load_model(folder, device=device, dtype=dtype)
                cfg = GenerationConfig(max_new_tokens=8 if quick else 16, top_candidates=2)
                prompt = [(7 * i) % 90 + 3 for i in range(9)]
                want = generate_all(eager, prompt, cfg)
                try:
                    captured = playground.load_model(folder, device=device, dtype=dtype, compile=backend)
                    got, syncs = _run_counting_syncs(captured, prompt, cfg, dev)
                except Exception as error:  # noqa: BLE001 - one family's failure is a finding, not the check's end
                    result.families += 1
                    result.errors.append(f"{name}: {_line(error)}")
                    log(f"parity {dtype} {backend} {name} raised: {_line(error)}\n{_where(error)}")
                    continue
                if syncs is not None:
                    result.syncs = max(result.syncs or 0.0, syncs)
                result.families += 1
                same = next((k for k, (a, b) in enumerate(zip(got.token_ids, want.token_ids)) if a != b), len(got.token_ids))
                probs = [(a.prob, b.prob) for a, b in zip(got.steps[: same + 1], want.steps[: same + 1])]
                result.worst = max(result.worst, max(abs(a - b) for a, b in probs))
                if not got.decoding["captured"]:
                    result.failed.append(f"{name} (eager: {got.decoding['reason']})")
                elif same == len(got.token_ids):
                    result.equal += 1
                else:  # a legitimate divergence starts where eager's two best were within the dtype's rounding
                    top = want.steps[same].candidates
                    near = top[0].prob_final - top[1].prob_final <= 2 * TOLERANCE[dtype]
                    (result.ties if near else result.failed).append(f"{name} at step {same}")
            differ = result.failed + result.ties + result.errors
            log(f"parity {dtype} {result.cell()}" + (f" (differ: {', '.join(differ)})" if differ else ""))
            out.append(result)
    return out


def _line(error: BaseException) -> str:
    """An exception as one line (its type and the first line of its message), for the log and the table."""
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"[:300]


def _where(error: BaseException) -> str:
    """The last frames of `error`'s traceback (where a compiler's bare assertion came from)."""
    import traceback

    return "".join(traceback.format_exception(error)[-6:])[-2000:]


def _run_counting_syncs(lm: Any, prompt: list[int], cfg: Any, device: torch.device) -> tuple[Any, float | None]:
    """A run through `lm`, and on CUDA the host syncs per decoding step (after the prefill): each step's one
    output transfer is one; anything inside the step would add to it (torch's sync debug mode counts them)."""
    from playground.generation import generate_all

    if device.type != "cuda":
        return generate_all(lm, prompt, cfg), None
    import warnings

    from playground.generation import generate

    counts, events = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for event in generate(lm, prompt, cfg):
                counts.append(sum("synchroniz" in str(w.message) for w in caught))
                caught.clear()
                events.append(event)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    result = generate_all(lm, prompt, cfg)  # the result object (decoding, steps) as every caller sees it
    return result, float(np.mean(counts[1:])) if len(counts) > 1 else None


class OursEager:
    """Our model's batched pass (what the app's scheduler runs for N streams) driven directly: each stream a
    segment with its cache in one pool, greedy, nothing recorded or the live capture's recorders."""

    def __init__(self, lm: Any, live: bool) -> None:
        self.lm, self.live = lm, live

    @torch.inference_mode()
    def run(self, batch: list[list[int]], n: int) -> list[list[int]]:
        from playground.models.kv_pool import KVPool, bucket
        from playground.models.recorder import Recorder
        from playground.models.rows import Segment

        model, dev = self.lm.model, self.lm.device
        pool = KVPool(bucket(len(batch[0]) + n))
        caches = [model.new_cache(1, len(ids) + n, pool=pool) for ids in batch]
        last = [model(torch.tensor([ids], device=dev), c, last_only=True)[:, -1].argmax(-1) for ids, c in zip(batch, caches)]
        tokens = [torch.cat(last).tolist()]
        layer = self.lm.config.n_layers - 1
        for _ in range(n - 1):
            ids = torch.tensor(tokens[-1], device=dev)
            segments = [Segment(ids[i].view(1, 1), c, Recorder([layer], residual=True) if self.live else None, c.length,
                                "last") for i, c in enumerate(caches)]
            logits = model.forward_rows(segments) if len(segments) > 1 else [model(ids.view(1, 1), caches[0],
                                                                                    segments[0].recorder, last_only=True)]
            tokens.append(torch.cat([x[:, -1].argmax(-1) for x in logits]).tolist())
        return [list(t) for t in zip(*tokens)]


class OursCaptured:
    """Our captured step for `streams` rows (one graph of that bucket), greedy, each row prefilled eagerly;
    every step's output read by the host once, as the engine reads it."""

    def __init__(self, lm: Any, backend: str, live: bool, streams: int, length: int) -> None:
        from playground.generation.captured import CapturedDecoder, StepShape, row_bucket
        from playground.models.kv_pool import bucket
        from playground.models.static import Capture

        mode = "reduce-overhead" if lm.device.type == "cuda" and backend == "inductor" else None
        decoder = CapturedDecoder(lm.model, backend=backend, mode=mode)
        L = lm.config.n_layers
        shape = StepShape(rows=row_bucket(streams), length=bucket(length), sampling=False, candidates=8 if live else 0,
                          capture=Capture((L - 1,), True) if live else Capture())
        self.lm, (self.step, self.fn) = lm, decoder.build(shape)

    @torch.inference_mode()
    def run(self, batch: list[list[int]], n: int) -> list[list[int]]:
        from playground.generation.sampler import RowKnobs

        step, dev, model = self.step, self.lm.device, self.lm.model
        rows = []
        tokens = [[] for _ in batch]
        for ids in batch:
            row, cache = step.start(ids, len(ids) + n, RowKnobs())
            told = step.first(row, model(torch.tensor([ids], device=dev), cache, last_only=True)[:, -1].float(), None)
            tokens[len(rows)].append(int(told.cpu()[0, 0]))
            rows.append(row)
        for _ in range(n - 1):
            told = self.fn(None).cpu()
            for i, row in enumerate(rows):
                tokens[i].append(int(told[row, 0]))
        for row in rows:
            step.release(row)
        return tokens


def speed(folder: Path, device: str, dtypes: tuple[str, ...], streams: tuple[int, ...], new_tokens: int,
          engines: tuple[str, ...], backends_here: list[str], deadline: float, log: Callable[[str], None]) -> list[dict]:
    import playground

    dev, rows = torch.device(device), []
    for dtype in dtypes:
        lm = playground.load_model(folder, device=device, dtype=dtype, tokenizer=False)
        theirs = {name: gpu_bench.Theirs(folder, device, dtype, compiled=name == "transformers compiled")
                  for name in ("transformers eager", "transformers compiled") if name in engines}
        for s in streams:
            batch = gpu_bench.prompts(lm.config.vocab_size, s)
            length = len(batch[0]) + new_tokens
            reference = OursEager(lm, False).run(batch, new_tokens)
            for live in (False, True):
                row = {"dtype": dtype, "streams": s, "live": live, "rates": {}, "skipped": [], "equal": {},
                       "errors": {}}
                ours: dict[str, Any] = {}
                for backend in backends_here:  # the CUDA graph (no compile) before torch.compile
                    name = OURS_CAPTURED[backend]
                    if name in engines:
                        ours[name] = (backend, live, s, length)
                compiled = {k: v for k, v in theirs.items() if k == "transformers compiled"}
                rest = {k: v for k, v in theirs.items() if k != "transformers compiled"}
                # the targets first (ours captured against transformers compiled), so a budget cut drops the rest
                engines_now = {**ours, **({} if live else compiled), "ours eager": OursEager(lm, live),
                               **({} if live else rest)}
                for name, engine in engines_now.items():
                    if time.perf_counter() > deadline:
                        row["skipped"].append(name)
                        continue
                    try:
                        if isinstance(engine, tuple):
                            engine = OursCaptured(lm, *engine)
                        got = engine.run(batch, new_tokens)  # warm-up (compiles), and the tokens to compare
                        engine.run(batch, 1)
                        rate = gpu_bench.decode_rate(lambda k, e=engine, b=batch: e.run(b, k), s, new_tokens, 2, dev)
                    except Exception as error:  # noqa: BLE001 - one engine's failure is a finding, not the check's end
                        row["errors"][name] = _line(error)
                        log(f"{dtype} {s} streams {name} raised: {_line(error)}\n{_where(error)}")
                        continue
                    if name.startswith("ours"):
                        row["equal"][name] = sum(g == r for g, r in zip(got, reference))
                    row["rates"][name] = rate if rate < 1e8 else float("nan")  # t(n) <= t(1): too few tokens to time
                rows.append(row)
                log(format_row(row, rows))
        if dev.type == "cuda":
            del lm, theirs
            torch.cuda.empty_cache()
    return rows


def _base(row: dict, rows: list[dict]) -> dict:
    return next((r for r in rows if r["dtype"] == row["dtype"] and r["streams"] == row["streams"] and not r["live"]), row)


def format_row(row: dict, rows: list[dict]) -> str:
    rates = {**{k: v for k, v in _base(row, rows)["rates"].items() if k.startswith("transformers")}, **row["rates"]}
    cells = [row["dtype"], f"{row['streams']} streams", "live capture" if row["live"] else "nothing kept"]
    cells += [f"{name} {rates[name]:.0f}" for name in ENGINES if name in rates]
    if row["skipped"]:
        cells.append(f"skipped (budget): {', '.join(row['skipped'])}")
    if row.get("errors"):
        cells.append(f"raised: {', '.join(row['errors'])}")
    return " | ".join(cells)


def table(rows: list[dict], checks: list[Parity], what: str, card: str) -> str:
    """The one summary table: tokens/s of all streams together per engine, our best against transformers
    compiled, each of ours' tokens against our eager pass, and the dtype's parity over the families."""
    head = ["dtype", "streams", "recorded", *ENGINES, "best ours / transformers compiled", "ours equal to eager",
            "parity (every family)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    for row in sorted(rows, key=lambda r: (dtypes.index(r["dtype"]), r["streams"], r["live"])):
        rates = {**{k: v for k, v in _base(row, rows)["rates"].items() if k.startswith("transformers")}, **row["rates"]}
        cells = [row["dtype"], str(row["streams"]), "live capture" if row["live"] else "nothing"]
        cells += [f"{rates[e]:.0f}" if e in rates else ("skipped" if e in row["skipped"] else
                                                        "raised" if e in row.get("errors", {}) else "–") for e in ENGINES]
        best = max((v for k, v in row["rates"].items() if k.startswith("ours")), default=None)
        compiled = rates.get("transformers compiled")
        cells.append(f"{best / compiled:.2f}×" if best and compiled else "–")
        cells.append(", ".join(f"{k.removeprefix('ours ')} {v}/{row['streams']}" for k, v in row["equal"].items()) or "–")
        cells.append("; ".join(c.cell() for c in checks if c.dtype == row["dtype"]) or "–")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"<sub>{what}; {card}, torch {torch.__version__}; greedy, {gpu_bench.PROMPT_TOKENS}-token prompts; "
                  "decode tokens/s of all streams together after the prefill, best of 2</sub>"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.tools.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="a checkpoint folder of the speed test (default: random "
                        "weights of SmolLM2-135M's shape)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(TOLERANCE))
    parser.add_argument("--streams", nargs="+", type=int, default=list(STREAMS))
    parser.add_argument("--new-tokens", type=int, default=gpu_bench.NEW_TOKENS)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--backends", nargs="+", choices=["inductor", "cudagraph", "eager"], default=None,
                        help="the captured backends to check (default: every one that runs on the device)")
    parser.add_argument("--parity-budget-s", type=float, default=120.0, help="start no new parity check after this "
                        "long (the families left are said)")
    parser.add_argument("--budget-s", type=float, default=280.0, help="start no new measurement after this long")
    parser.add_argument("--quick", action="store_true", help="small sizes (a tiny model; on the CPU, the captured "
                        "step uncompiled): checks that the script runs")
    parser.add_argument("--json", help="write the rows and parity results to this JSON file")
    args = parser.parse_args(argv)
    missing = gpu_bench.fail_without_cuda(args.device)
    if missing is not None:
        return missing
    started = time.perf_counter()
    deadline = started + args.budget_s
    log = lambda line: print(line, flush=True)  # noqa: E731
    dev = torch.device(args.device)
    card = gpu_bench.device_name(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        checks = parity(work / "families", args.device, tuple(args.dtypes), args.quick, log, args.backends,
                        started + args.parity_budget_s)
        shape = None
        if args.quick:
            shape = {**gpu_bench.SMOLLM2_SHAPE, "vocab_size": 256, "hidden_size": 48, "intermediate_size": 96,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
        folder, what = gpu_bench.checkpoint(args.model, work, shape)
        if shape is not None:
            what = "random weights, a 2-layer llama (--quick)"
        rows = speed(folder, args.device, tuple(args.dtypes), tuple(args.streams), args.new_tokens, tuple(args.engines),
                     backends(dev, args.quick, args.backends), deadline, log)
    summary = table(rows, checks, what, card)
    print(f"\n{summary}\n\n{time.perf_counter() - started:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps({"card": card, "what": what, "rows": rows,
                                               "parity": [c.__dict__ for c in checks], "table": summary}, indent=1))
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
