"""Model work a click asks for, done in bounded slices between the shared batch's decode steps.

    for item in serving.run_job(work, stop, owner):   # items as the slices produce them
        ...

A job's `work` is a generator: each `next()` is one slice of bounded work (a chunk of a pass, one head
of a sweep), run on the torch thread by the server's driver between the batch's steps, one slice per
visitor per round, so a long measurement never holds the others' turn for more than one slice. What it
yields comes back to the caller in order (progress, then its result). Setting `stop` (the page's Stop,
a closed tab, an expired session) or closing the caller's iterator ends the job before its next slice.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

_END = object()


@dataclasses.dataclass(frozen=True)
class Progress:
    """How far a job is: `done` of `total` units (steps, heads, passes) of the stage `stage`, and the
    seconds of compute it has had so far."""

    stage: str
    done: int
    total: int
    seconds: float = 0.0


class Job:
    """One click's model work in a server: its slices, what they yield, and its end."""

    def __init__(self, work: Iterator[Any], stop: threading.Event, owner: Any) -> None:
        self.work, self.outer_stop, self.owner = work, stop, owner
        self.stop = threading.Event()  # set by the caller's Event or by `cancel`
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.done = False
        self.compute_seconds = 0.0  # the torch thread's time spent on this job's slices

    @property
    def stopped(self) -> bool:
        return self.stop.is_set() or self.outer_stop.is_set()

    def run_slice(self) -> None:
        """One slice of the work, on the torch thread; the job ends when its work does, fails or stops."""
        if self.done:
            return
        if self.stopped:
            self._end()
            return
        began = time.perf_counter()
        try:
            item = next(self.work)
        except StopIteration:
            self._end()
        except Exception as error:  # noqa: BLE001 - the job's own error goes to its caller, not to the server
            self._end(error)
        else:
            self.items.put(item)
        finally:
            self.compute_seconds += time.perf_counter() - began

    def cancel(self) -> None:
        """End the job before its next slice (its caller went away)."""
        self.stop.set()

    def _end(self, error: BaseException | None = None) -> None:
        self.done = True
        close = getattr(self.work, "close", None)
        try:
            if close is not None:
                close()  # runs the work's own `finally` on the torch thread
        except Exception as failed:  # noqa: BLE001 - a work that fails to close fails its caller, never the driver
            error = error or failed
        self.items.put(error if error is not None else _END)

    def stream(self) -> Iterator[Any]:
        """What the slices yield, as they come (blocking); raises the work's error, if any."""
        while True:
            item = self.items.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
