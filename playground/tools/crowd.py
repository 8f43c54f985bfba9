"""A class on one link: N visitors press Generate at once; what each of them sees.

    python -m playground.tools.crowd [--visitors 1,4,8,16] [--new-tokens 64] [-- APP_ARGS...]
    python -m playground.tools.crowd --device cuda [--dtype bfloat16] [--visitors 1,8,64]

With `--device cuda` the crowd runs in this process on the GPU (playground.tools.gpu_bench): the app's
server with N visitors at once, beside transformers static cache + torch.compile at N rows; the real
SmolLM2 when it is in the weights folder, else random weights of its shape.

Starts `python app.py` on 127.0.0.1 (a free port, the app's default settings plus APP_ARGS), and
measures the command-line generator's single-request rate on the same machine in the same run
(`python -m playground generate --json`, the server idle). Then every visitor is a Gradio session
speaking the page's protocol (`queue/join`, then the session's `queue/data` stream: what a browser
sends, no browser), with the real SmolLM2, greedy, chat on, `--new-tokens` tokens. First each prompt
runs alone (the solo references); then for each N, N visitors press at once. Printed per N: each
visitor's tokens/s (decode: tokens after the first over first frame → last frame) against the CLI's,
first token p50/p95/max (press → first frame), the aggregate (all tokens / first press → last frame)
and whether every visitor's tokens equal their solo run. A first press, not counted, loads the model.
The machine's other load moves every number: compare within one run. Bounded: one press per visitor and N, a
timeout per run; the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from playground.cpu import choose_threads
from playground.tools import gpu_bench

if TYPE_CHECKING:
    from playground.tools.loadtest_page import Page

REPO = Path(__file__).resolve().parents[2]
MODEL = "SmolLM2-135M-Instruct"
PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "Explain photosynthesis briefly.",
           "Give me three tips for learning Python.", "What is a transformer in machine learning?",
           "Describe a cat to someone who has never seen one.", "Why is the sky blue?", "Tell me a short joke."]


def app_threads(app_args: list[str]) -> int:
    """The torch threads the app runs with: its --threads, else OMP_NUM_THREADS, else its own default (here, not
    on a Space)."""
    asked = int(app_args[app_args.index("--threads") + 1]) if "--threads" in app_args else 0
    return choose_threads(asked, space=False)[0]


def cli_rate(weights: Path, new_tokens: int, threads: int, repeat: int = 3) -> float:
    """Median decode tokens/s of the single-request CLI over `repeat` runs (one process each), with
    the app's torch threads."""
    rates = []
    for i in range(repeat):
        out = subprocess.run(
            [sys.executable, "-m", "playground", "generate", "--model", str(weights / MODEL), "--prompt", PROMPTS[i],
             "--chat", "--max-new-tokens", str(new_tokens), "--json"],
            cwd=REPO, capture_output=True, text=True, timeout=300, check=True,
            env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        )
        rates.append(json.loads(out.stdout)["timing"]["tokens_per_s"])
    return statistics.median(rates)


class Press:
    """One visitor's Generate press and what came back."""

    def __init__(self, page: Page, index: int, new_tokens: int) -> None:
        from playground.tools.loadtest_page import Visitor

        self.visitor = Visitor(page, index, MODEL, MODEL, new_tokens)
        self.new_tokens = new_tokens
        self.ids: list[int] | None = None
        self.pressed = self.first = self.done = 0.0
        self.error: str | None = None

    def run(self, start: threading.Barrier) -> None:
        import httpx  # the page's protocol: not needed by the in-process GPU crowd

        v = self.visitor
        try:
            with httpx.Client() as client:
                v.open(client)
                data = [time.time() * 1000, *v.values(prompt=PROMPTS[v.index % len(PROMPTS)], chat=True, mode="greedy")]
                start.wait()
                self.pressed = time.perf_counter()
                out = v.follow(client, v.join(client, v.page.generate, data))
            self.first, self.done = out["first"] or 0.0, out["done"] or 0.0
            live = (out["output"] or [None])[0]
            state = (live or {}).get("status", {}).get("state") if isinstance(live, dict) else None
            if not out["success"] or state != "done":
                detail = live.get("status", {}).get("error") if isinstance(live, dict) else None
                self.error = f"visitor {v.index}: {out.get('error') or detail or state}"
                return
            self.ids = [int(p[1]) for p in out["path"]]
        except Exception as exc:  # noqa: BLE001 - counted and printed
            self.error = f"visitor {v.index}: {type(exc).__name__}: {exc}"

    @property
    def throughput(self) -> float:
        """All its tokens over press → last frame: what one visitor alone contributes to an aggregate."""
        n = len(self.ids or [])
        return n / (self.done - self.pressed) if n and self.done > self.pressed else 0.0

    @property
    def rate(self) -> float:
        """Decode tokens/s as the visitor sees them: tokens after the first over first → last frame."""
        n = len(self.ids or [])
        return (n - 1) / (self.done - self.first) if n > 1 and self.done > self.first else 0.0


def crowd(page: Page, n: int, new_tokens: int) -> list[Press]:
    presses = [Press(page, i, new_tokens) for i in range(n)]
    start = threading.Barrier(n)
    threads = [threading.Thread(target=p.run, args=(start,), daemon=True) for p in presses]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return presses


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visitors", default="1,4,8,16")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--weights", default=str(REPO / "weights"))
    parser.add_argument("--readme", default=None, help="rewrite the crowd table (and its chart) in this README")
    parser.add_argument("--svg", default=None, help="write a chart of the run to this SVG file")
    parser.add_argument("--device", default="cpu", help="cuda: the crowd in this process on the GPU (gpu_bench)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                        help="with --device cuda: the model's dtype")
    parser.add_argument("app_args", nargs="*", help="more arguments for app.py (after --)")
    args = parser.parse_args(argv)
    if args.device != "cpu":
        missing = gpu_bench.fail_without_cuda(args.device)
        if missing is not None:
            return missing
        folder = Path(args.weights) / MODEL
        gpu_bench.crowd_rows(str(folder) if folder.is_dir() else None, args.device, args.dtype,
                             [int(n) for n in args.visitors.split(",")], args.new_tokens)
        return 0
    from playground.tools.loadtest import start_server, stop_server
    from playground.tools.loadtest_page import Page

    weights = (Path(args.weights) / MODEL).resolve().parent  # the app serves only folders inside its weights folder
    if not (weights / MODEL).is_dir():
        print(f"error: {MODEL} is not in the weights folder; import it first (python -m playground import-smollm2)",
              file=sys.stderr)
        return 2
    counts = [int(n) for n in args.visitors.split(",")]
    proc, url = start_server(str(weights), max(counts), *args.app_args)
    try:
        page = Page.read(url)
        threads = app_threads(args.app_args)
        cli = cli_rate(weights, args.new_tokens, threads)
        _alone(page, 0, 4)  # the first press loads the model and packs its weights: not part of any number
        solo: dict[int, list[int] | None] = {}
        solo_rate: list[float] = []
        solo_throughput: list[float] = []
        for i in range(min(len(PROMPTS), max(counts))):
            press = _alone(page, i, args.new_tokens)
            solo[i] = press.ids
            solo_rate.append(press.rate)
            solo_throughput.append(press.throughput)
        one, one_total = statistics.median(solo_rate), statistics.median(solo_throughput)
        lines = [f"torch threads: {threads} (app and CLI); {MODEL}, greedy, chat on, {args.new_tokens} new tokens"]
        print(lines[0])
        lines.append(f"CLI (single request, same machine, same run): {cli:.1f} tokens/s; one visitor alone: {one:.1f} "
              f"tokens/s = {one / cli:.2f}x the CLI; one visitor's tokens over press to last frame: {one_total:.1f} "
              f"tokens/s (the aggregate's unit)")
        lines += ["", "| visitors | each visitor: median tokens/s (x CLI), min | first token p50 / p95 / max | "
                  "aggregate tokens/s (x one visitor) | equal to solo | errors |", "|---|---|---|---|---|---|"]
        print("\n".join(lines[1:]), flush=True)
        rows: list[tuple[int, float, float, float]] = []
        for n in counts:
            presses = crowd(page, n, args.new_tokens)
            ok = [p for p in presses if p.ids is not None]
            rates = [p.rate for p in ok]
            firsts = [p.first - p.pressed for p in ok if p.first]
            span = max((p.done for p in ok), default=0.0) - min((p.pressed for p in presses), default=0.0)
            total = sum(len(p.ids) for p in ok)
            aggregate = total / span if span > 0 else 0.0
            equal = sum(p.ids == solo.get(p.visitor.index % len(PROMPTS)) for p in ok)
            med = statistics.median(rates) if rates else 0.0
            lines.append(f"| {n} | {med:.1f} ({med / cli:.2f}x), min {min(rates, default=0):.1f} | "
                         f"{_pct(firsts, 0.5):.2f} / {_pct(firsts, 0.95):.2f} / {max(firsts, default=float('nan')):.2f} s | "
                         f"{aggregate:.1f} ({aggregate / one_total:.1f}x) | {equal}/{n} | {len(presses) - len(ok)} |")
            print(lines[-1], flush=True)
            rows.append((n, med, aggregate, max(firsts, default=0.0)))
            for p in presses:
                if p.error:
                    print(f"  {p.error}", flush=True)
    finally:
        stop_server(proc)
    if args.svg:
        Path(args.svg).write_text(chart(rows, cli))
    if args.readme:
        _rewrite_readme(Path(args.readme), lines, args.svg)
    return 0


def chart(rows: list[tuple[int, float, float, float]], cli: float) -> str:
    """A small SVG: aggregate tokens/s (bars) and each visitor's median (dots) per crowd size, the CLI as a line."""
    w, h, left, bottom = 520, 300, 50, 40
    top = max([r[2] for r in rows] + [cli, 1.0]) * 1.15
    band = (w - left - 10) / max(1, len(rows))

    def y(v: float) -> float:
        return h - bottom - (h - bottom - 20) * v / top

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{left}" y1="{y(cli):.1f}" x2="{w - 10}" y2="{y(cli):.1f}" stroke="#888" stroke-dasharray="4 3"/>']
    for i, (n, med, aggregate, _) in enumerate(rows):
        x = left + band * i + band / 2
        parts += [f'<rect x="{x - band * 0.3:.1f}" y="{y(aggregate):.1f}" width="{band * 0.6:.1f}" '
                  f'height="{y(0) - y(aggregate):.1f}" fill="#4c78a8"/>',
                  f'<circle cx="{x:.1f}" cy="{y(med):.1f}" r="5" fill="#f58518"/>',
                  f'<text x="{x:.1f}" y="{h - bottom + 16}" text-anchor="middle">{n}</text>',
                  f'<text x="{x:.1f}" y="{y(aggregate) - 4:.1f}" text-anchor="middle">{aggregate:.0f}</text>']
    parts += [f'<text x="{w / 2}" y="{h - 6}" text-anchor="middle">visitors pressing Generate at once</text>',
              f'<text x="12" y="{h / 2}" transform="rotate(-90 12 {h / 2})" text-anchor="middle">tokens/s</text>',
              '<rect x="60" y="8" width="10" height="10" fill="#4c78a8"/><text x="74" y="17">all visitors together</text>',
              '<circle cx="215" cy="13" r="5" fill="#f58518"/><text x="224" y="17">each visitor (median)</text>',
              '<line x1="370" y1="13" x2="392" y2="13" stroke="#888" stroke-dasharray="4 3"/>'
              '<text x="397" y="17">the CLI, one request</text>',
              "</svg>"]
    return "\n".join(parts) + "\n"


def _rewrite_readme(readme: Path, lines: list[str], svg: str | None) -> None:
    text = readme.read_text()
    start, end = "<!-- crowd-table -->", "<!-- /crowd-table -->"
    if start not in text or end not in text:
        raise SystemExit(f"{readme.name} has no {start} block")
    body = "\n".join(lines[2:] + ["", lines[0] + ". " + lines[1]])
    if svg:
        body += f"\n\n![Tokens per second with 1 to 16 visitors at once]({Path(svg).resolve().relative_to(readme.resolve().parent)})"
    head, rest = text.split(start, 1)
    readme.write_text(head + start + "\n" + body + "\n" + end + rest.split(end, 1)[1])


def _alone(page: Page, index: int, new_tokens: int) -> Press:
    press = Press(page, index, new_tokens)
    press.run(threading.Barrier(1))
    return press


if __name__ == "__main__":
    raise SystemExit(main())
