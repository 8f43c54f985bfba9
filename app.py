"""Transformer Playground: `python app.py [--share] [--port N] [--host ADDR] [--weights DIR] [--threads N]`.

Also the Hugging Face Space's app_file (a Space runs it without arguments).
"""

from __future__ import annotations

import argparse
import os

import torch

from playground.ui import build_app, enable_queue, launch_kwargs


def default_threads() -> int:
    """One torch thread per core but one. Measured on 2 cores with Chromium on the same machine: the
    page showed SmolLM2-135M at 17 tokens/s with one torch thread and 8 with two, whose spinning
    workers kept losing their core to the browser and the server's event loop."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(1, cores - 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the Transformer Playground web app.")
    parser.add_argument("--share", action="store_true", help="also print a public gradio.live share link")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)),
                        help="port (default: $GRADIO_SERVER_PORT or 7860)")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to listen on (0.0.0.0 for every interface)")
    parser.add_argument("--weights", default=None, help="folder of checkpoints to offer (default: ./weights)")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="generations running at once (decoded together in one batch per model)")
    parser.add_argument("--queue-size", type=int, default=64, help="requests waiting before new ones are refused")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads for the models (default: one per core but one, which stays free for "
                             "the web server and a browser on the same machine)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads or default_threads())
    demo = build_app(args.weights, generate_concurrency=args.concurrency)
    enable_queue(demo, max_size=args.queue_size, default_concurrency_limit=2)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, show_error=True,
                max_file_size="2gb", **launch_kwargs())


if __name__ == "__main__":
    main()
