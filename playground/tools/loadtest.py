"""Load test: many concurrent gradio_client clients, each running seeded generations against one server.

    python -m playground.tools.loadtest --clients 8 --runs 20            # starts app.py on a free port
    python -m playground.tools.loadtest --url http://127.0.0.1:7860/     # an already running server
    python -m playground.tools.loadtest --page --clients 16 --seconds 150 # the page's own path, mixed (loadtest_page)
    python -m playground.tools.loadtest --core --visitors 1,8             # the app's core, no Gradio (loadtest_core)

Each client first records what it gets alone (its own prompt and seed, one request at a time, before
the crowd starts); then all clients run concurrently. Checks: zero errors and every concurrent output
equal to the client's solo output (no cross-talk between sessions). Reports the server's resident
memory before, at the peak and after (only when this script started the server), and prints a
Markdown table for the README.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

from playground.tools.server import AS_BEHIND_A_PROXY, PROMPTS, client_headers, rss_bytes, start_server, stop_server


def client_settings(i: int, args: argparse.Namespace) -> tuple[str, str]:
    """Client i's prompt and settings (sampling with its own seed, so outputs differ between clients)."""
    query = "?" + urlencode({"mode": "sample", "temperature": 0.9, "top_k": 40, "top_p": 0.95,
                             "max_new_tokens": args.max_new_tokens, "seed": 1000 + i})
    return PROMPTS[i % len(PROMPTS)], query


def run_client(url: str, i: int, args: argparse.Namespace, expected: list[int] | None, latencies: list[float],
               errors: list[str], lock: threading.Lock) -> list[list[int]]:
    from gradio_client import Client

    client = Client(url, verbose=False, headers=client_headers(i))  # each client its own address (a visitor)
    prompt, query = client_settings(i, args)
    outputs = []
    for r in range(args.runs):
        t0 = time.perf_counter()
        try:
            out = client.predict(args.model, prompt, query, api_name="/generate_text")
            ids = [int(t) for t in out["token_ids"]]
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            with lock:
                errors.append(f"client {i} run {r}: {type(exc).__name__}: {exc}")
            continue
        with lock:
            latencies.append(time.perf_counter() - t0)
            if expected is not None and ids != expected:
                errors.append(f"client {i} run {r}: output differs from its solo run (cross-talk?)")
        outputs.append(ids)
    return outputs


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if "--core" in given:  # the app's core without Gradio: loadtest_core
        from playground.tools import loadtest_core

        return loadtest_core.main(given)
    if "--class" in given:  # a class's day on the page's own path: loadtest_class
        from playground.tools import loadtest_class

        return loadtest_class.main(given)
    if "--page" in given:  # the page's own path: loadtest_page
        from playground.tools import loadtest_page

        return loadtest_page.main(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--runs", type=int, default=20, help="generations per client")
    parser.add_argument("--url", default=None, help="target a running server instead of starting one")
    parser.add_argument("--model", default="tiny-lm", help="catalog name of the model to use")
    parser.add_argument("--weights", default=None, help="weights folder for the started server")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4, help="server-side generation concurrency")
    args = parser.parse_args(argv)

    proc = None
    if args.url:
        url = args.url
    else:
        proc, url = start_server(args.weights, args.concurrency, env=AS_BEHIND_A_PROXY)
    try:
        lock = threading.Lock()
        errors: list[str] = []
        solo_latency: list[float] = []
        # Solo reference: each client's output with nobody else on the server.
        solo = []
        for i in range(args.clients):
            ref = run_client(url, i, argparse.Namespace(**{**vars(args), "runs": 1}), None, solo_latency, errors,
                             lock)
            solo.append(ref[0] if ref else None)
        if errors:
            print("\n".join(errors), file=sys.stderr)
            return 1
        time.sleep(1.0)
        mem_before = rss_bytes(proc.pid) if proc else 0
        peak = [mem_before]
        done = threading.Event()

        def sample_memory() -> None:
            while not done.wait(0.2):
                peak[0] = max(peak[0], rss_bytes(proc.pid) if proc else 0)

        sampler = threading.Thread(target=sample_memory, daemon=True)
        sampler.start()
        latencies: list[float] = []
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            futures = [pool.submit(run_client, url, i, args, solo[i], latencies, errors, lock)
                       for i in range(args.clients)]
            for f in futures:
                f.result()
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        time.sleep(2.0)
        mem_after = rss_bytes(proc.pid) if proc else 0
    finally:
        if proc is not None:
            stop_server(proc)

    total = args.clients * args.runs
    mib = lambda b: f"{b / 2**20:,.0f} MiB" if b else "n/a (external server)"  # noqa: E731
    lat = sorted(latencies)
    p50 = lat[len(lat) // 2] if lat else float("nan")
    p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else float("nan")
    print("| clients | runs each | requests | errors | cross-talk | wall | requests/s | p50 | p95 | "
          "server RSS before | peak | after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    crosstalk = sum("differs" in e for e in errors)
    print(f"| {args.clients} | {args.runs} | {total} | {len(errors) - crosstalk} | {crosstalk} | {wall:.1f} s | "
          f"{total / wall:.1f} | {p50:.2f} s | {p95:.2f} s | {mib(mem_before)} | {mib(peak[0])} | {mib(mem_after)} |")
    if errors:
        print("\n".join(errors[:20]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
