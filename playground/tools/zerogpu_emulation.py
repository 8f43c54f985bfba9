"""`spaces.GPU` for generator functions, emulated as the `spaces` package (0.51.3, zero/wrappers.py) does it, for
the tests and `zerogpu_check` (no GPU scheduler, no quota: the worker gets whatever device the machine has).

- the call's `duration` is computed from the call's own arguments (`static_duration`);
- a refused GPU raises before anything runs, with the exception type the package raises: `gr.Error` titled
  "ZeroGPU quota exceeded" (zero/client.py builds it with `error(title, message)`);
- the task runs in a process forked from the caller ('fork' context), kept and reused for the next call
  once a call has ended; arguments go in and every yielded value comes back through multiprocessing
  queues, so both are pickled, and nothing the worker changes in its own memory returns;
- closing the caller's generator sets the worker's stop event; the worker closes the task after its
  current item and reports the end, which the caller waits for.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

RESULT_TIMEOUT = 120.0


def quota_exceeded() -> Exception:
    """What `spaces` raises when a visitor's daily GPU time is spent (zero/client.py, `schedule`)."""
    import gradio as gr

    return gr.Error("You have exceeded your free ZeroGPU quota (60s requested vs. 12s left). Try again in 0:03:00.",
                    title="ZeroGPU quota exceeded", print_exception=False)


@dataclass
class _Worker:
    process: Any
    args: Any
    results: Any
    stop: Any


def _serve(task: Callable[..., Iterator[Any]], args_q, results_q, stop) -> None:
    """The worker's loop (zero/wrappers.py's thread_wrapper for generators)."""
    while True:
        item = args_q.get()
        if item is None:
            return
        args, kwargs = item
        stop.clear()
        gen = task(*args, **kwargs)
        try:
            for value in gen:
                if stop.is_set():
                    gen.close()
                    break
                results_q.put(("ok", value))
        except Exception as exc:  # noqa: BLE001 - the wrapper keeps only the class name
            results_q.put(("error", type(exc).__name__))
        results_q.put(("end", None))


class EmulatedGPU:
    """Use as `spaces.GPU`: `EmulatedGPU()(task, duration=fn)` returns the GPU-lent generator function."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("fork")
        self.refuse: Exception | None = None  # set to make the next calls refused
        self.durations: list[int] = []  # what each call asked for
        self.argument_bytes: list[int] = []  # each call's arguments, pickled (what crosses into the worker)
        self.received: list[Any] = []  # every value that came back, as the caller unpickled it
        self.closed = 0  # calls the caller closed before their end (the worker was told to stop)
        self.workers_started = 0
        self._worker: _Worker | None = None

    def __call__(self, task: Callable[..., Iterator[Any]], *, duration: Any = None) -> Callable[..., Iterator[Any]]:
        @functools.wraps(task)
        def handler(*args: Any, **kwargs: Any) -> Iterator[Any]:
            self.durations.append(duration(*args, **kwargs) if callable(duration) else duration)
            self.argument_bytes.append(len(pickle.dumps((args, kwargs))))
            if self.refuse is not None:
                raise self.refuse
            worker = self._take(task)
            worker.args.put((args, kwargs))
            while True:
                kind, value = worker.results.get(timeout=RESULT_TIMEOUT)
                if kind == "end":
                    self._worker = worker  # idle again: the next call reuses it
                    return
                if kind == "error":
                    self.close_worker(worker)
                    raise RuntimeError(f"ZeroGPU worker error: {value}")
                self.received.append(value)
                try:
                    yield value
                except GeneratorExit:
                    self.closed += 1
                    worker.stop.set()
                    while worker.results.get(timeout=RESULT_TIMEOUT)[0] != "end":
                        pass
                    self._worker = worker
                    raise

        return handler

    def _take(self, task: Callable[..., Iterator[Any]]) -> _Worker:
        worker, self._worker = self._worker, None
        if worker is not None and worker.process.is_alive():
            return worker
        args_q, results_q, stop = self.ctx.Queue(), self.ctx.Queue(), self.ctx.Event()
        process = self.ctx.Process(target=_serve, args=(task, args_q, results_q, stop), daemon=True)
        process.start()
        self.workers_started += 1
        return _Worker(process, args_q, results_q, stop)

    def close_worker(self, worker: _Worker | None = None) -> None:
        worker = worker or self._worker
        if worker is None:
            return
        if worker is self._worker:
            self._worker = None
        try:
            worker.args.put(None)
        except (OSError, ValueError, queue.Full):
            pass
        worker.process.join(timeout=30)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(timeout=10)
