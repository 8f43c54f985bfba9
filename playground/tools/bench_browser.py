"""Speed as the visitor sees it: tokens appearing in the page against the engine's own rate, in one run.

    python -m playground.tools.bench --browser [--model weights/SmolLM2-135M-Instruct] [--runs 3]
    python -m playground.tools.bench --browser --stream [--before ../main-checkout] [--lengths 100,200,400]

Starts the app on a free port and headless Chromium (Debian's, as the browser tests use), opens a
link with the model, prompt and settings, waits until the page has drawn (nothing pending, then
1 s), presses Generate and timestamps every change of the token count in `#token-stream` with a
MutationObserver. Between page runs, the same request runs
through `python -m playground generate --json` (the CLI) in a fresh process. It prints, per run and
as medians: the CLI's decode rate, the engine's rate inside the app (what the page's status
reports), the page's rate (tokens shown per second after the first), their ratio, and the time
from the press to the first visible token against the engine's prefill time.

`--stream` measures whether the page keeps up with a long run, for each model and length: how late a
100 ms timer on the page fires while the tokens stream, from the first token shown to the run's end
(the main thread's lateness, p50 / p95 / max; a run of well under a second gives only a few samples),
the page's tokens/s against the engine's, the kilobytes the page received, and in a second run a real
mouse click on Stop once the page shows half the tokens: how many tokens came after the click ("the run
had ended": the engine was done before Stop reached it) and how long the click waited for the main thread. `--before DIR` starts the app of another checkout too (a
worktree of the commit to compare with) and measures it the same way, interleaved with this one, with
the same threads and checkpoints: the machine's load falls on both alike. tiny-lm has 128 positions;
for longer runs the benchmark writes a copy whose config allows 512 (its weights, RoPE unchanged),
"tiny-lm-512", which streams far faster than any real model: the page's worst case.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from playground.cpu import usable_cores
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
    # the browser runs here too: without --server-threads the app leaves it a core (its default off a Space)
    threads = ["--threads", str(args.server_threads)] if args.server_threads else []
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
                 f"every live panel on; app torch threads: {results.get('server_threads') or 'cores - 1 (the default)'}, "
                 f"{results.get('cpus')} CPUs shared with the browser).")
    return "\n".join(lines)



# --- the stream at length ---------------------------------------------------------------------------------

STREAM_PROMPT = "Once upon a time, in a small village by the sea,"  # plain text (chat off): no early end of turn
STREAM_MODELS = "tiny-lm-512,SmolLM2-135M-Instruct"
TIMER_MS = 100
# Set before the press: a 100 ms timer and its lateness, the generated-token count at each change (the stream's
# last child is the newest token), when the run settled, and what a click on Stop saw: the count on screen
# when its handler ran and how long after the click that was (the event's own time stamp).
STREAM_PROBE = """() => {
  const w = window.__bench = {late: [], marks: [], end: null, stop: null};
  const stream = document.querySelector('#token-stream'), status = document.querySelector('#gen-status');
  const count = () => { const last = stream.lastElementChild;
    return last && last.dataset.step !== undefined ? +last.dataset.step + 1 : 0; };
  window.__count = count;
  let prev = performance.now();
  w.timer = setInterval(() => { const now = performance.now(); w.late.push([now, now - prev - TIMER_MS]); prev = now; }, TIMER_MS);
  new MutationObserver(() => { const n = count();
    if (!w.marks.length || w.marks[w.marks.length - 1][1] !== n) w.marks.push([performance.now(), n]);
  }).observe(stream, {childList: true});
  new MutationObserver(() => {
    if (w.end === null && w.marks.length && ['done', 'stopped', 'error'].includes(status.dataset.state)) {
      w.end = performance.now(); w.state = status.dataset.state; }
  }).observe(status, {attributes: true, attributeFilter: ['data-state'], childList: true});
  document.querySelector('#stop-btn').addEventListener('click', (e) => {
    if (!w.stop) w.stop = {count: count(), waited: performance.now() - e.timeStamp, after_end: w.end !== null}; }, true);
}""".replace("TIMER_MS", str(TIMER_MS))


def stretched_tiny_lm(folder: Path, positions: int = 512) -> Path:
    """A copy of the shipped tiny-lm whose config allows `positions` (its 128 cut runs at ~110 new tokens)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    source = REPO / "weights" / "tiny-lm" / "model.safetensors"
    with safe_open(str(source), "pt") as f:
        metadata, tensors = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    config = json.loads(metadata["config"])
    config["max_positions"] = positions
    metadata["config"] = json.dumps(config)
    target = folder / f"tiny-lm-{positions}"
    target.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(target / "model.safetensors"), metadata=metadata)
    return target


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def stream_run(browser: Any, url: str, model: str, tokens: int, stop_at: int | None = None) -> dict[str, Any]:
    """One press in a fresh tab: the timer's lateness while the tokens stream, the rates, the bytes received;
    with `stop_at`, a mouse click on Stop once the page shows that many tokens."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(900_000)
    try:
        query = dict(model=model, max_new_tokens=tokens, chat="false", mode="greedy")
        page.goto(url + "?" + urlencode(query))
        page.wait_for_function("() => /Loaded/.test(document.querySelector('#model-status')?.innerText ?? '')")
        page.fill("#prompt textarea", STREAM_PROMPT)
        page.wait_for_function("() => !document.querySelector('.pending')")
        page.wait_for_timeout(SETTLE_MS)
        cdp = page.context.new_cdp_session(page)
        streams: set[str] = set()
        received = [0]
        cdp.on("Network.responseReceived",
               lambda e: streams.add(e["requestId"]) if "queue/data" in e["response"]["url"] else None)
        cdp.on("Network.dataReceived",
               lambda e: received.__setitem__(0, received[0] + e["dataLength"]) if e["requestId"] in streams else None)
        cdp.send("Network.enable")
        stop_box = page.locator("#stop-btn").bounding_box()
        page.evaluate(STREAM_PROBE)
        page.click("#generate-btn")
        if stop_at is not None:
            page.wait_for_function("(n) => window.__count() >= n", arg=stop_at, polling=20)
            page.mouse.click(stop_box["x"] + stop_box["width"] / 2, stop_box["y"] + stop_box["height"] / 2)
        page.wait_for_function("() => window.__bench.end !== null", polling=100)
        page.wait_for_timeout(300)  # a frame still on its way after the end (a second "done") would show here
        w = page.evaluate("() => { clearInterval(window.__bench.timer); return window.__bench; }")
        rate_text = page.inner_text(".pg-rate")
    finally:
        page.close()
    marks = [m for m in w["marks"] if m[1] > 0]
    first, last = marks[0], marks[-1]
    late = [x for t, x in w["late"] if first[0] <= t <= w["end"]]  # while the tokens stream: first shown → the end
    shown = (last[1] - first[1]) / max((last[0] - first[0]) / 1000.0, 1e-9)
    out = {"tokens": last[1], "late_p50": _pct(late, 0.5), "late_p95": _pct(late, 0.95), "late_max": max(late, default=float("nan")),
           "engine_tokens_per_s": _engine_numbers(rate_text)["tps"], "page_tokens_per_s": shown,
           "kb": received[0] / 1024}
    if stop_at is not None:  # a click the page handled after showing the run's end measures nothing
        stop = w["stop"] if w["stop"] and not w["stop"]["after_end"] else {"count": float("nan"), "waited": float("nan")}
        out.update(stop_seen=stop["count"], stop_after=last[1] - stop["count"], stop_waited_ms=stop["waited"],
                   stop_missed=float(w["state"] != "stopped"))  # the run ended before Stop reached the server
    return out


def stream_bench(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    threads = str(args.server_threads or max(1, usable_cores() - 1))  # both apps alike, whatever their defaults
    apps = {"this": REPO} | ({"before": Path(args.before).resolve()} if args.before else {})
    rows: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp)
        stretched_tiny_lm(weights)
        smollm2 = (REPO / "weights" / "SmolLM2-135M-Instruct").resolve()
        if smollm2.exists():
            (weights / smollm2.name).symlink_to(smollm2, target_is_directory=True)
        servers = {name: start_server(str(weights), 4, "--threads", threads, repo=repo) for name, repo in apps.items()}
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                models = [m for m in args.models.split(",") if m]
                for model in models:
                    for _, url in servers.values():  # warm-up: the model loads, threads wake
                        stream_run(browser, url, model, 8)
                for model in models:
                    for tokens in args.lengths:
                        for repeat in range(args.runs):
                            order = list(servers) if repeat % 2 == 0 else list(reversed(servers))
                            for name in order:
                                url = servers[name][1]
                                full = stream_run(browser, url, model, tokens)
                                stopped = stream_run(browser, url, model, tokens, stop_at=tokens // 2)
                                rows.append({"model": model, "length": tokens, "app": name, "repeat": repeat,
                                             **full, **{k: v for k, v in stopped.items() if k.startswith("stop")}})
                                print(_stream_line(rows[-1]), flush=True)
                browser.close()
        finally:
            for proc, _ in servers.values():
                stop_server(proc)
    load.append(os.getloadavg()[0])
    return {"threads": int(threads), "cpus": os.cpu_count(), "load": load, "rows": rows, "runs": args.runs,
            "apps": {k: str(v) for k, v in apps.items()}}


def _median(values: list[float]) -> float:
    """The median of the values measured (a Stop that came after the run's end measured nothing: NaN)."""
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def _stream_line(r: dict[str, Any]) -> str:
    missed = " (the run had ended)" if r.get("stop_missed", 0) >= 0.5 else ""
    stop = ("after the page showed the end | – | –" if r["stop_seen"] != r["stop_seen"] else
            f"{r['stop_seen']:.0f} | +{r['stop_after']:.0f}{missed} | {r['stop_waited_ms']:.0f} ms")
    return (f"{r['model']} | {r['length']} | {r['app']} | {r['late_p50']:.0f} / {r['late_p95']:.0f} / "
            f"{r['late_max']:.0f} ms | {stop} | {r['engine_tokens_per_s']:.1f} | {r['page_tokens_per_s']:.1f} | "
            f"{r['page_tokens_per_s'] / r['engine_tokens_per_s']:.2f}× | {r['kb']:.0f} KB")


def format_stream(results: dict[str, Any]) -> str:
    """The medians per model, length and app, each app's rows side by side."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in results["rows"]:
        groups.setdefault((r["model"], r["length"], r["app"]), []).append(r)
    lines = ["model | new tokens | app | main thread late p50 / p95 / max | Stop pressed at | tokens after Stop | "
             "Stop click waited | engine tokens/s | page tokens/s | page / engine | received",
             "--- | --- | --- | --- | --- | --- | --- | --- | --- | --- | ---"]
    for (model, length, app), rows in groups.items():
        med = {k: _median([r[k] for r in rows]) for k in rows[0] if isinstance(rows[0][k], (int, float))}
        med.update(model=model, length=length, app=app)
        lines.append(_stream_line(med))
    load = results["load"]
    lines.append("")
    lines.append(f"Medians of {results['runs']} run(s) each; every app with {results['threads']} torch thread(s), "
                 f"Chromium on the same {results['cpus']} CPUs; load average {load[0]:.1f} before, {load[1]:.1f} after "
                 f"(a machine shared with other work: the rows of one length ran interleaved, so its load fell on each "
                 f"app alike). Apps: " + ", ".join(f"{k} = {v}" for k, v in results["apps"].items()) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.tools.bench --browser", description=__doc__.split("\n")[0])
    parser.add_argument("--browser", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="weights/SmolLM2-135M-Instruct")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--no-chat", dest="chat", action="store_false", help="send the prompt as plain text")
    parser.add_argument("--max-new-tokens", type=int, default=88)
    parser.add_argument("--runs", type=int, default=None, help="runs per row (default 3; --stream: 1)")
    parser.add_argument("--server-threads", type=int, default=0,
                        help="the app's torch threads (app.py --threads; 0: its default, cores - 1)")
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--stream", action="store_true",
                        help="the stream at length: the page's main thread, Stop and rates per model and length")
    parser.add_argument("--models", default=STREAM_MODELS, help="--stream: catalog names, comma-separated")
    parser.add_argument("--lengths", default="100,200,400", type=lambda t: [int(x) for x in t.split(",") if x],
                        help="--stream: new tokens per run, comma-separated")
    parser.add_argument("--before", help="--stream: another checkout whose app is measured too, interleaved")
    args = parser.parse_args(argv)
    args.runs = args.runs or (1 if args.stream else 3)
    results = stream_bench(args) if args.stream else run(args)
    print(format_stream(results) if args.stream else format_report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
