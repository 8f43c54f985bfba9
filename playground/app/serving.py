"""Serving generations for a whole class at once: one batch per model, stepped on the torch thread.

    for event in run_events(plan, stop):   # the same StepEvents as the engine's own stream
        ...

Every request of the process joins its model's `Scheduler` (generation/batch.py): all running
generations of one model advance in one forward pass per step, a newcomer's prompt is fed in chunks
beside them (its first token comes after a step or two, not after the others' whole runs), and each
visitor's tokens, probabilities and captures are exactly those of the same request alone. A driver
thread steps the busy schedulers one after another (different models take turns), each step one call
on the torch thread, so the page's other model work (panels, lessons) slips in between steps.

Admission: `MAX_ROWS` rows decode at once (a beam search takes its beams), one running request per
owner (a visitor: the caller's key; without one, each request is its own), four prompts being fed at
once (a class pressing together is admitted in a few steps), and the running requests' memory peaks
within the budget. The rest wait in order; `run_events(..., report_waiting=True)` tells a waiting
request its place in line and the longest it may wait (the page shows both).

Jobs: every other piece of model work a click asks for (the cache-less rerun, a head sweep, a
measurement) is a `jobs.Job` whose slices the same driver runs between the batch's steps: after each
round of steps, one slice of the oldest job of each visitor who has one. So a visitor decoding waits at
most a step plus one slice of each other visitor's work, and a visitor's second job waits for their first.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import threading
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

from playground.app import torch_thread
from playground.app.jobs import Job
from playground.generation.batch import CaughtUp, Scheduler, Ticket, prefix_store
from playground.generation.batch_history import StepHistory
from playground.generation.engine import drain
from playground.generation.events import StepEvent
from playground.generation.plan import Plan
from playground.generation.prefix_cache import PrefixStore

T = TypeVar("T")

WAIT_REPORT_SECONDS = 0.5  # a request admitted within this is never reported as waiting


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A request waiting for a place in its model's batch: its place in line (1 = next) and the seconds
    until it may start at most (None before the scheduler has timed a step)."""

    position: int
    seconds: int | None


MAX_ROWS = 16  # a step for 16 rows costs about twice a step for one on 2 cores (playground.tools.kernels)


class Server:
    """The schedulers of one process and the driver thread that steps them."""

    def __init__(
        self, *, max_rows: int = MAX_ROWS, per_owner: int = 1, max_prefills: int = 4,
        call: Callable[[Callable[[], Any]], Any] = torch_thread.call, prefix_caching: bool = True,
    ) -> None:
        self.max_rows, self.per_owner, self.max_prefills = max_rows, per_owner, max_prefills
        # an owner's visitor (`Scheduler.visitor_of`): the app names it (`Tabs.owner_visitor`) once it has its tabs
        self.visitor_of: Callable[[Any], Any] = lambda owner: owner
        self._call = call
        self._schedulers: dict[int, Scheduler] = {}
        self._jobs: list[Job] = []  # in order of submission
        self._wake = threading.Condition()
        self._driver: threading.Thread | None = None
        # each model's last steps (outliving its scheduler, which goes when idle; gone with the model)
        self._histories: weakref.WeakKeyDictionary[Any, StepHistory] = weakref.WeakKeyDictionary()
        # each model's prefix store (the K/V of prompt beginnings its runs share), gone with the model: one per
        # model object, so a dtype, a precision copy or a visitor's upload (their own objects) never share one
        self._prefixes: weakref.WeakKeyDictionary[Any, PrefixStore] = weakref.WeakKeyDictionary()
        self.prefix_caching = prefix_caching

    def submit(self, p: Plan, stop: threading.Event | None = None, owner: Any = None, tag: Any = None) -> Ticket:
        with self._wake:
            scheduler = self._schedulers.get(id(p.lm.model))
            if scheduler is None or scheduler.lm.model is not p.lm.model:
                history = self._histories.setdefault(p.lm.model, StepHistory())
                scheduler = Scheduler(p.lm, max_rows=self.max_rows, per_owner=self.per_owner,
                                      max_prefills=self.max_prefills, history=history, prefix=self._prefix(p),
                                      visitor_of=lambda owner: self.visitor_of(owner))
                self._schedulers[id(p.lm.model)] = scheduler
            ticket = scheduler.submit(p, stop, owner, tag)
            self._start_driver()
        return ticket

    def _prefix(self, p: Plan) -> PrefixStore | None:  # with self._wake held
        if not self.prefix_caching:
            return None
        store = self._prefixes.get(p.lm.model)
        if store is None:
            store = self._prefixes[p.lm.model] = prefix_store(p.lm)
        return store

    def prefix_held(self) -> tuple[int, int]:
        """(blocks, bytes) the models' prefix stores hold now (the holdings line counts them)."""
        with self._wake:
            stores = list(self._prefixes.values())
        held = [s.held() for s in stores]
        return sum(b for b, _ in held), sum(n for _, n in held)

    def pools_held(self) -> tuple[int, int]:
        """(pools, bytes) of the running requests' KV caches, rows of the schedulers' pools (the holdings line
        counts them: a pool is as wide as its longest cache and as tall as the most caches it held at once, until
        its last cache leaves)."""
        with self._wake:
            schedulers = list(self._schedulers.values())
        pools = [pool for sch in schedulers for pool in list(sch.pools.values())]
        return len(pools), sum(pool.nbytes for pool in pools)

    def submit_job(self, work: Iterator[Any], stop: threading.Event | None = None, owner: Any = None) -> Job:
        """`work` (a generator, one bounded slice per `next()`) as a job between the batch's steps."""
        job = Job(work, stop if stop is not None else threading.Event(), owner if owner is not None else object())
        with self._wake:
            self._jobs.append(job)
            self._start_driver()
        return job

    def jobs(self, work: Iterator[Any], stop: threading.Event, owner: Any = None) -> Iterator[Any]:
        """What `work` yields, slice by slice, as the driver runs it; closing this iterator stops the job."""
        job = self.submit_job(work, stop, owner)
        try:
            yield from job.stream()
        finally:
            job.cancel()
            with self._wake:
                self._wake.notify()  # a stopped job is ended (its work closed) by the driver, on the torch thread

    def _start_driver(self) -> None:  # with self._wake held
        if self._driver is None or not self._driver.is_alive():
            self._driver = threading.Thread(target=self._drive, name="playground-batches", daemon=True)
            self._driver.start()
        self._wake.notify()

    def active(self) -> int:
        """Requests running or waiting, over every model, and jobs not yet ended."""
        with self._wake:
            schedulers = list(self._schedulers.values())
            jobs = sum(not j.done for j in self._jobs)
        return sum(s.active() for s in schedulers) + jobs

    def history_of(self, tag: Any) -> StepHistory | None:
        """The history of the model whose batch ran the request `tag` (None: no step of it is kept)."""
        with self._wake:
            histories = list(self._histories.values())
        return next((h for h in histories if h.holds(tag)), None)

    def queue_position(self, ticket: Ticket) -> int:
        """0 once the request decodes; otherwise its place among those waiting for its model."""
        return ticket.scheduler.queue_position(ticket)

    def events(
        self, p: Plan, stop: threading.Event, owner: Any = None, *, report_waiting: bool = False, tag: Any = None,
        due: Callable[[], float] | None = None,
    ) -> Iterator[StepEvent | Waiting | CaughtUp]:
        """The run's StepEvents as they come. With `report_waiting`, while the request waits for a place in
        the batch (rows or memory taken), a `Waiting` first and whenever its place or wait changes. `tag` labels
        the request in its model's step history (`history_of`). `due()`: when the reader next wants events (its
        next frame, `time.monotonic()`); until then it is not woken by each step, and it gets `CaughtUp` when it
        holds every event computed so far (`Ticket.stream`)."""
        ticket = self.submit(p, stop, owner, tag)
        try:
            shown = None
            while report_waiting and not ticket.arrived.wait(WAIT_REPORT_SECONDS):
                if stop.is_set():  # stopped while waiting for a place: nothing to wait for
                    return
                position = self.queue_position(ticket)
                expected = ticket.scheduler.expected_wait(ticket)
                waiting = Waiting(position, None if expected is None else math.ceil(expected))
                if position and waiting != shown:
                    shown = waiting
                    yield waiting
            for event in ticket.stream(due=due):
                if stop.is_set():  # events computed ahead of a slow reader (slow motion) are not shown after Stop
                    return
                yield event
        finally:
            ticket.cancel()

    def _drive(self) -> None:
        while True:
            with self._wake:
                self._jobs = [j for j in self._jobs if not j.done]
                busy = [s for s in self._schedulers.values() if s.busy()]
                # An idle scheduler goes at once, and the model it holds with it: before, they went only when every
                # scheduler was idle at the same moment, which a class never is, so the scheduler of every dtype,
                # precision copy and upload ever served stayed, each holding its model. A new request makes a new one;
                # what outlives a scheduler is kept per model, weakly (its step history, its prefix store).
                for key in [k for k, sch in self._schedulers.items() if not sch.busy()]:
                    del self._schedulers[key]
                owners: dict[int, Job] = {}
                for job in self._jobs:  # each visitor's oldest job gets this round's slice
                    owners.setdefault(id(job.owner), job)
                turns = list(owners.values())
                if not busy and not turns:
                    self._wake.wait()
                    continue
            for scheduler in busy:  # different models take turns, one step each
                try:
                    self._call(scheduler.step)
                except Exception as error:  # noqa: BLE001 - a broken step fails its requests, not the server
                    scheduler.fail_all(error)
            for job in turns:  # then one slice of each visitor's job
                try:
                    self._call(job.run_slice)
                except Exception as error:  # noqa: BLE001 - the driver serves everyone: it never stops here
                    job._end(error)


_server: Server | None = None
_server_lock = threading.Lock()


def configure(*, max_rows: int = MAX_ROWS) -> None:
    """The process's serving policy, set once at start (`python app.py --max-rows N`)."""
    global _server
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, not {max_rows}")
    with _server_lock:
        _server = Server(max_rows=max_rows)


def default_server() -> Server:
    """The process's server, made on first use."""
    global _server
    with _server_lock:
        if _server is None:
            _server = Server()
        return _server


def active_requests() -> int:
    """Requests the process is running or holding: the crowd whose frames share the server's time."""
    server = _server
    return 0 if server is None else server.active()


def run_events(
    plan: Plan, stop: threading.Event, owner: Any = None, *, report_waiting: bool = False, tag: Any = None,
    due: Callable[[], float] | None = None,
) -> Iterator[StepEvent | Waiting]:
    """The run's StepEvents as they come, computed in the process's shared batch (with `report_waiting`,
    `Waiting` while it waits for a place; `tag`: its label in the step history; `due`: when the reader next wants
    events, `Server.events`). Setting `stop` (or closing this iterator) ends the run before its next step, as with
    the engine's own stream."""
    return default_server().events(plan, stop, owner, report_waiting=report_waiting, tag=tag, due=due)


def prefix_held() -> tuple[int, int]:
    """(blocks, bytes) of prompt-prefix K/V the process's server keeps for reuse (0, 0 before any run)."""
    server = _server
    return (0, 0) if server is None else server.prefix_held()


def pools_held() -> tuple[int, int]:
    """(pools, bytes) of the KV pools of the process's server's running requests (0, 0 before any run)."""
    server = _server
    return (0, 0) if server is None else server.pools_held()


def batch_history(tag: Any) -> StepHistory | None:
    """The step history holding the request `tag` (the page tags a run with its token), or None."""
    server = _server
    return None if server is None else server.history_of(tag)


def run_job(work: Iterator[Any], stop: threading.Event, owner: Any = None) -> Iterator[Any]:
    """What `work` (a generator doing one bounded slice of model work per `next()`) yields, run as a job
    of the process's server between the shared batch's steps; `stop` (or closing this iterator) ends it."""
    return default_server().jobs(work, stop, owner)


class Stopped(RuntimeError):
    """`call_sliced`'s work was stopped (its `stop` set, or the server stopping) before it finished."""


def call_sliced(work: Generator[Any, None, T], owner: Any = None, stop: threading.Event | None = None) -> T:
    """The return value of `work`, a generator doing one bounded slice of model work per `next()` (a View's
    `slices`, `iter_generate_all`): each slice takes its own turn between the batch's steps, in a copy of the
    caller's context; on the torch thread itself, all at once. Setting `stop` ends it before its next slice
    (`Stopped`)."""
    if torch_thread.on_torch_thread():
        return drain(work)
    context = contextvars.copy_context()
    result: list[T] = []

    def job() -> Iterator[None]:
        while True:
            try:
                context.run(next, work)
            except StopIteration as done:
                result.append(done.value)
                return
            yield None

    for _ in run_job(job(), stop if stop is not None else threading.Event(), owner):
        pass
    if not result:  # the job was ended before its last slice (stopped, or the server stopping)
        raise Stopped("the work was stopped before it finished")
    return result[0]


def call_job(fn: Callable[..., Any], *args: Any, owner: Any = None, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) as a one-slice job (for work bounded by its own caps, such as a lesson's numbers or
    a panel's attention maps): it takes its turn with the other visitors' jobs between the batch's steps
    instead of jumping the torch thread's queue. It runs in a copy of the caller's context (the figure
    language is a context variable); on the torch thread itself, directly."""
    if torch_thread.on_torch_thread():
        return fn(*args, **kwargs)
    context = contextvars.copy_context()

    def work() -> Iterator[Any]:
        yield context.run(fn, *args, **kwargs)

    (result,) = run_job(work(), threading.Event(), owner)
    return result
