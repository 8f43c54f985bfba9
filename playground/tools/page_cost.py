"""What the page costs the visitor's browser: its main thread's busy seconds for a page load and for a run.

    python -m playground.tools.bench --page-cost [--before ../main-checkout] [--runs 5]

Starts the app (and with `--before` the app of another checkout too: a worktree of the commit to compare with, on the
same weights and threads) and headless Chromium (Debian's, as the browser tests use). Each repeat opens a fresh page
of each app in turn (interleaved, so the machine's load falls on both alike) and reads Chromium's own account of its
main thread (`Performance.getMetrics`, TaskDuration): from the navigation until the model is loaded and 3 s more
(the page settles: the load's chained events), then for one Generate press of the shipped tiny-lm (24 tokens) and
2 s more (the redraws after the run). It prints the medians per app and, with `--before`, this app's against the
other's. A phone's CPU is several times slower than this machine's: these seconds are what it feels.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from playground.tools.bench_browser import CHROMIUM, CHROMIUM_ARGS
from playground.tools.server import REPO, start_server, stop_server

LOADED = "() => /Loaded|已加载/.test(document.querySelector('#model-status')?.innerText ?? '')"
SETTLE_S, AFTER_RUN_S = 3.0, 2.0


def busy(cdp: Any) -> float:
    """The page's main thread busy seconds so far."""
    return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "TaskDuration")


def one_page(browser: Any, url: str) -> tuple[float, float]:
    """(main-thread seconds of a page load and its settling, of one tiny-lm run) on a fresh page of `url`."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    try:
        page.goto(url + "?model=tiny-lm&max_new_tokens=24")
        page.wait_for_function(LOADED, timeout=120_000)
        time.sleep(SETTLE_S)
        loaded = busy(cdp)
        page.evaluate("() => { window.__before = document.querySelector('#token-stream').firstChild; }")
        page.click("#generate-btn")
        page.wait_for_function("() => document.querySelector('#token-stream').firstChild !== window.__before"
                               " && ['done', 'stopped', 'error'].includes("
                               "document.querySelector('#gen-status')?.dataset.state)", timeout=120_000)
        time.sleep(AFTER_RUN_S)
        return loaded, busy(cdp) - loaded
    finally:
        context.close()


def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    from playwright.sync_api import sync_playwright

    apps = {"this": REPO} | ({"before": Path(args.before).resolve()} if args.before else {})
    out: dict[str, dict[str, list[float]]] = {name: {"load": [], "run": []} for name in apps}
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp)
        (weights / "tiny-lm").symlink_to((REPO / "weights" / "tiny-lm").resolve(), target_is_directory=True)
        servers = {name: start_server(str(weights), 4, "--threads", "1", repo=repo) for name, repo in apps.items()}
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                for _, url in servers.values():  # warm-up: the model loads, the server's threads wake
                    one_page(browser, url)
                for repeat in range(args.runs):
                    for name in list(servers) if repeat % 2 == 0 else list(reversed(servers)):
                        load, run = one_page(browser, servers[name][1])
                        out[name]["load"].append(load)
                        out[name]["run"].append(run)
                        print(f"{name}: page load {load:.2f} s, a run {run:.2f} s", flush=True)
                browser.close()
        finally:
            for proc, _ in servers.values():
                stop_server(proc)
    return out


def report(results: dict[str, dict[str, list[float]]], apps: dict[str, str]) -> str:
    lines = ["| app | page load and settling (main thread, s) | one tiny-lm run of 24 tokens (s) |", "|---|---|---|"]
    med = {name: {k: statistics.median(v) for k, v in r.items()} for name, r in results.items()}
    for name, m in med.items():
        lines.append(f"| {name} ({apps[name]}) | {m['load']:.2f} | {m['run']:.2f} |")
    if "before" in med:
        lines.append(f"| this / before | {med['this']['load'] / med['before']['load']:.2f}× | "
                     f"{med['this']['run'] / med['before']['run']:.2f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.tools.bench --page-cost",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--page-cost", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--before", help="another checkout whose app is measured too, interleaved")
    parser.add_argument("--runs", type=int, default=5, help="fresh pages per app")
    args = parser.parse_args(argv)
    results = measure(args)
    apps = {"this": str(REPO)} | ({"before": str(Path(args.before).resolve())} if args.before else {})
    print(f"\nMedians of {args.runs} fresh pages per app, 1440×900, headless Chromium:\n")
    print(report(results, apps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
