"""The app's one torch thread: every model computation of the server runs on it.

PyTorch's CPU wheels parallelise ops with libgomp, which keeps a pool of worker threads for every
thread that ever ran a parallel op. Once the pools hold more threads than there are CPUs, libgomp
stops spinning between ops and every op waits for a futex wake-up instead. Gradio calls handlers
(and each step of a streaming handler) on a changing set of worker threads, so each became a pool
owner: measured on 2 cores, SmolLM2-135M decoded at ~18 tokens/s in a thread after the main thread
had run it, ~35 tokens/s in the first thread. Running torch work here keeps one pool. Concurrent
runs interleave step by step (each `next()` is one call), which on a few cores is what sharing them
would cost anyway.

Work sent here must not wait for anything a thread waiting on it may hold: resolve models (the
registry's per-model load lock) before the call, and pass them in.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

NAME = "playground-torch"

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=NAME)


def on_torch_thread() -> bool:
    return threading.current_thread().name.startswith(NAME)


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) on the torch thread (directly when already there); its result or error.
    It runs in a copy of the caller's context (the figure language is a context variable)."""
    if on_torch_thread():
        return fn(*args, **kwargs)
    return _executor.submit(contextvars.copy_context().run, fn, *args, **kwargs).result()


def iterate(items: Iterator[T]) -> Iterator[T]:
    """Each `next()` of `items` (a generator doing torch work per item) on the torch thread."""
    try:
        while True:
            try:
                item = call(next, items)
            except StopIteration:
                return
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            call(close)


def runs_on_torch_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: `fn` runs on the torch thread; a generator function is stepped there item by item."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stepped(*args: Any, **kwargs: Any) -> Any:
            return iterate(fn(*args, **kwargs))
        return stepped

    @functools.wraps(fn)
    def called(*args: Any, **kwargs: Any) -> T:
        return call(fn, *args, **kwargs)
    return called
