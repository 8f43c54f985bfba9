"""Speed as the visitor sees it: tokens appearing in the page against the engine's own rate, in one run.

    python -m playground.tools.bench --browser [--model weights/SmolLM2-135M-Instruct] [--runs 3]

Starts the app on a free port and headless Chromium (Debian's, as the browser tests use), opens a
link with the model, prompt and settings, waits until the page has drawn (nothing pending, then
1 s), presses Generate and timestamps every change of the token count in `#token-stream` with a
MutationObserver. Between page runs, the same request runs
through `python -m playground generate --json` (the CLI) in a fresh process. It prints, per run and
as medians: the CLI's decode rate, the engine's rate inside the app (what the page's status
reports), the page's rate (tokens shown per second after the first), their ratio, and the time
from the press to the first visible token against the engine's prefill time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from playground.tools.server import REPO, start_server, stop_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
PROMPT = "What is the capital of France? Answer in a long paragraph about its history."
SETTLE_MS = 1000  # after the page reports the model loaded, before the press

OBSERVE = """() => {
  window.__marks = [];
  const stream = document.querySelector('#token-stream');
  new MutationObserver(() => window.__marks.push([performance.now(),
      stream.querySelectorAll('[data-step]').length])).observe(stream, {childList: true, subtree: true});
  return performance.now();
}"""


def cli_run(model: Path, args: argparse.Namespace) -> dict[str, float]:
    """One fresh `python -m playground generate --json` with the same request: its timing block."""
    command = [sys.executable, "-m", "playground", "generate", "--model", str(model), "--prompt", args.prompt,
               "--max-new-tokens", str(args.max_new_tokens), "--json"] + (["--chat"] if args.chat else [])
    out = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=True, timeout=600)
    result = json.loads(out.stdout)
    return {**result["timing"], "tokens": len(result["token_ids"])}


def page_run(page: Any, url: str) -> dict[str, float]:
    """One Generate press in the page: rates from the observed token counts, the engine's own numbers."""
    page.goto(url)
    page.wait_for_function("() => /Loaded/.test(document.querySelector('#model-status')?.innerText ?? '')",
                           timeout=300_000)
    # A visitor presses Generate after the page has drawn, not in the same millisecond as "Loaded":
    # let the deep views' first figures finish, so the press does not queue behind their drawing.
    page.wait_for_function("() => !document.querySelector('.pending')", timeout=300_000)
    page.wait_for_timeout(SETTLE_MS)
    started = page.evaluate(OBSERVE)
    page.click("#generate-btn")
    page.wait_for_function("() => ['done', 'stopped', 'error'].includes(document.querySelector('#gen-status')?.dataset.state)",
                           timeout=600_000)
    marks = [m for m in page.evaluate("window.__marks") if m[1] > 0]
    if not marks:
        raise RuntimeError(f"no token appeared: {page.inner_text('#gen-status')}")
    first, last = marks[0], marks[-1]
    rate_text = page.inner_text(".pg-rate")
    engine = _engine_numbers(rate_text)
    shown = (last[1] - first[1]) / max((last[0] - first[0]) / 1000.0, 1e-9)
    return {"tokens": last[1], "page_tokens_per_s": shown, "first_token_ms": first[0] - started,
            "frames": len({m[0] for m in marks}), "engine_tokens_per_s": engine["tps"],
            "engine_prefill_ms": engine["prefill"]}


def _engine_numbers(text: str) -> dict[str, float]:
    """The engine's rate and prefill time as the page's status line states them ("31.2 tokens/s · prefill 40.1 ms")."""
    numbers = [float(x) for x in re.findall(r"[0-9]+(?:\.[0-9]+)?", text)]
    return {"tps": numbers[0] if numbers else float("nan"), "prefill": numbers[1] if len(numbers) > 1 else float("nan")}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    model = Path(args.model).resolve()
    if not model.exists():
        raise SystemExit(f"error: no checkpoint at {args.model}; run `python -m playground import-smollm2` or pass --model")
    # the browser runs here too: without --server-threads the app leaves it a core, as a colocated app should
    threads = ["--threads", str(args.server_threads)] if args.server_threads else ["--browser-here"]
    server, url = start_server(str(model.parent), 4, *threads)
    try:
        query = dict(model=model.name, prompt=args.prompt, max_new_tokens=args.max_new_tokens,
                     chat="true" if args.chat else "false", mode="greedy")
        rows = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page_run(page, url + "?" + urlencode(query))  # warm-up: the model loads, threads wake
            for _ in range(args.runs):
                cli = cli_run(model, args)
                shown = page_run(page, url + "?" + urlencode(query))
                rows.append({"cli_tokens_per_s": cli["tokens_per_s"], "cli_prefill_ms": cli["prefill_ms"], **shown})
            browser.close()
    finally:
        stop_server(server)
    med = {k: statistics.median(r[k] for r in rows) for k in
           ("cli_tokens_per_s", "engine_tokens_per_s", "page_tokens_per_s", "first_token_ms", "engine_prefill_ms",
            "cli_prefill_ms")}
    med["page_vs_cli"] = statistics.median(r["page_tokens_per_s"] / r["cli_tokens_per_s"] for r in rows)
    med["first_token_after_prefill_ms"] = med["first_token_ms"] - med["engine_prefill_ms"]
    return {"model": model.name, "prompt": args.prompt, "chat": args.chat, "max_new_tokens": args.max_new_tokens,
            "server_threads": args.server_threads, "cpus": os.cpu_count(), "runs": rows, "median": med}


def format_report(results: dict[str, Any]) -> str:
    lines = ["run | CLI tokens/s | app engine tokens/s | page tokens/s | page / CLI | first token shown | prefill",
             "--- | --- | --- | --- | --- | --- | ---"]
    for i, r in enumerate(results["runs"], 1):
        lines.append(f"{i} | {r['cli_tokens_per_s']:.1f} | {r['engine_tokens_per_s']:.1f} | {r['page_tokens_per_s']:.1f} | "
                     f"{r['page_tokens_per_s'] / r['cli_tokens_per_s']:.2f}× | {r['first_token_ms']:.0f} ms | "
                     f"{r['engine_prefill_ms']:.0f} ms")
    m = results["median"]
    lines.append(f"median | {m['cli_tokens_per_s']:.1f} | {m['engine_tokens_per_s']:.1f} | {m['page_tokens_per_s']:.1f} | "
                 f"**{m['page_vs_cli']:.2f}×** | {m['first_token_ms']:.0f} ms | {m['engine_prefill_ms']:.0f} ms")
    lines.append("")
    lines.append(f"First token shown {m['first_token_after_prefill_ms']:.0f} ms after the engine's prefill ended "
                 f"({results['model']}, {results['max_new_tokens']} new tokens, greedy, chat {'on' if results['chat'] else 'off'}, "
                 f"every live panel on; app torch threads: {results.get('server_threads') or 'cores - 1 (--browser-here)'}, "
                 f"{results.get('cpus')} CPUs shared with the browser).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.tools.bench --browser", description=__doc__.split("\n")[0])
    parser.add_argument("--browser", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="weights/SmolLM2-135M-Instruct")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--no-chat", dest="chat", action="store_false", help="send the prompt as plain text")
    parser.add_argument("--max-new-tokens", type=int, default=88)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--server-threads", type=int, default=0,
                        help="the app's torch threads (app.py --threads; 0: app.py --browser-here, cores - 1)")
    parser.add_argument("--json", help="write the results to this JSON file")
    args = parser.parse_args(argv)
    results = run(args)
    print(format_report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
