"""Transformer Playground: `python app.py [--share] [--port N] [--host ADDR] [--weights DIR] [--threads N]
[--browser-here] [--max-rows N] [--device cpu|cuda] [--dtype float32|bfloat16|float16] [--default-model NAME]
[--compile] [--allocator bounded|glibc]`.

Also the Hugging Face Space's app_file (a Space runs it without arguments).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import torch

from playground.app import heap, serving, zerogpu
from playground.app.holdings import holdings, report_on_signal
from playground.app.serving import MAX_ROWS
from playground.cpu import choose_threads
from playground.errors import PlaygroundError
from playground.hosting import on_space, zero_gpu
from playground.ui import build_app, enable_queue, launch_kwargs
from playground.ui.gradio_state import tab_states

log = logging.getLogger("playground.app")
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_MODEL_VARIABLE = "PLAYGROUND_DEFAULT_MODEL"  # a Space variable does what --default-model does


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the Transformer Playground web app.")
    parser.add_argument("--share", action="store_true", help="also print a public gradio.live share link")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)),
                        help="port (default: $GRADIO_SERVER_PORT or 7860)")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to listen on (0.0.0.0 for every interface)")
    parser.add_argument("--weights", action="append", default=[], metavar="DIR",
                        help="a folder of checkpoints to offer besides the shipped ones (repeatable); "
                             "each is checked at start and only those that load are listed")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="generations running at once (decoded together in one batch per model)")
    parser.add_argument("--max-rows", type=int, default=MAX_ROWS,
                        help=f"sequences decoded together in one batch per model (default {MAX_ROWS}; a beam search "
                             "takes one per beam); more visitors wait in line and are told their place")
    parser.add_argument("--queue-size", type=int, default=64, help="requests waiting before new ones are refused")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads for the models (default: $OMP_NUM_THREADS if set, else every core the "
                             "CPU quota allows on a Space, and one fewer elsewhere, left to a browser on the same "
                             "machine; a server without one passes its core count)")
    parser.add_argument("--browser-here", action="store_true",
                        help="leave a browser one core even on a Space (elsewhere the default)")
    parser.add_argument("--device", default=None,
                        help="where the models run: cpu or cuda (default: cuda on a Space with a GPU of its own, "
                             "else cpu; on ZeroGPU each run borrows the GPU by itself)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES, help="the dtype pages start with (default float32)")
    parser.add_argument("--compile", action="store_true",
                        help="load every model with its captured decode step (playground.load_model(compile=True))")
    parser.add_argument("--allocator", default="bounded", choices=("bounded", "glibc"),
                        help="bounded (default): glibc keeps 2 arenas and gives blocks of 128 KiB and more back when "
                             "they are freed, so a long day's memory stays flat; glibc: its own defaults")
    parser.add_argument("--default-model", default=os.environ.get(DEFAULT_MODEL_VARIABLE, "").strip() or None,
                        metavar="NAME", help=f"the model every new page opens on, a name of the model list (e.g. "
                                             f"SmolLM2-135M-Instruct; default: ${DEFAULT_MODEL_VARIABLE}, else tiny-lm, "
                                             "or a Space's preloaded model)")
    args = parser.parse_args(argv)
    if args.compile:  # read by load_model wherever the app loads: on ZeroGPU CUDA graphs by hand, never torch.compile
        os.environ["PLAYGROUND_COMPILE"] = "cudagraph" if zero_gpu() else "1"  # 1: the device's own way
    args.device = args.device or default_device()
    return args


def default_device() -> str:
    """cuda on a Space with a GPU of its own (T4, L4: the hardware its owner picked), so that `python app.py`
    uses it without a flag; cpu elsewhere, and on ZeroGPU, whose GPU is lent per run (and whose `spaces`
    package makes torch report a GPU in this process that is not there)."""
    if on_space() and not zero_gpu() and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def check_device(device: str) -> str:
    """The device as torch names it, or one line saying what to use instead (no CUDA here, say)."""
    from playground.checkpoints.loader import usable_device

    if zero_gpu() and device != "cpu":
        raise PlaygroundError("on ZeroGPU the app borrows the GPU for each run by itself, while the models the page "
                              "keeps stay on the CPU; leave --device out")
    return str(usable_device(device))


def use_zero_gpu() -> zerogpu.ZeroGPU | None:
    """On a ZeroGPU Space: every run becomes one GPU call (made now, before launch, where ZeroGPU looks for
    its GPU functions); lessons, the lab and attention rows stay on the CPU copy. Elsewhere: nothing."""
    if not zero_gpu():
        return None
    mode = zerogpu.for_space()
    zerogpu.install(mode)
    if mode is not None:
        log.warning("ZeroGPU: each run decodes on the lent GPU; lessons and the lab run on the CPU")
    return mode


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.allocator == "bounded":
        heap.bound_allocator()  # first: before the server's threads make arenas of their own
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("playground").setLevel(logging.INFO)  # what is offered and why not goes to the log
    try:
        device = check_device(args.device)
    except PlaygroundError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    use_zero_gpu()
    if args.max_rows < 1:
        print(f"error: --max-rows must be at least 1, not {args.max_rows}", file=sys.stderr)
        raise SystemExit(2)
    serving.configure(max_rows=args.max_rows)
    threads, why = choose_threads(args.threads, space=on_space() and not args.browser_here)
    torch.set_num_threads(threads)
    log.info("%d torch thread%s (%s%s), models on %s, pages start in %s", threads, "" if threads == 1 else "s", why,
             "" if why == "--threads" else "; --threads N to change", device, args.dtype)
    demo = build_app(extra_weights=args.weights, generate_concurrency=args.concurrency, device=device, dtype=args.dtype,
                     default_model=args.default_model)
    catalog = demo.playground_handlers.catalog
    offered = list(catalog.shared_paths()) + list(catalog.preloaded_paths())  # checked now; problems are logged
    if not catalog.default_offered():
        log.warning("--default-model %s is not a model offered here (%s); pages open on %s", args.default_model,
                    ", ".join(offered) or "none", catalog.default_name())
    log.info("offering %s; pages open on %s", ", ".join(offered) or "no checkpoint", catalog.default_name())
    handlers = demo.playground_handlers
    kept = lambda: holdings(handlers.registry, handlers.sessions, lambda: tab_states(demo),  # noqa: E731
                            live_values=handlers.stream.live_values)  # live_state's whole values, per run version
    report_on_signal(kept)  # kill -USR1: what it keeps, logged
    enable_queue(demo, max_size=args.queue_size, default_concurrency_limit=2)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, show_error=True,
                **launch_kwargs(demo))


if __name__ == "__main__":
    main()
