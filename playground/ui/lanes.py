"""Every queued event's concurrency, declared once: which lane (Gradio concurrency id) it joins, and each lane's limit.

Gradio keeps, for the server's life, the LOWEST limit any event ever named for a concurrency id (the queue
creates an id's queue when its first event arrives and lowers the limit for each later event that names a
smaller one, "default" included). So one event bound with another limit, or none, silently throttles every
event of its id: a single click of "Run again without the cache" once left every generation on the server
running two at a time. Here each lane has one limit, every queued event names its lane through `lane()`, and
`check()` refuses a page where an event was bound any other way.

The page's server functions (the live screen's scripts calling Python: `live_state`, `attention_row`, ...) never
pass through Gradio's queue: `ServerLane` is their lane, one call at a time per tab, `Lanes.server` on the server.

Events bound with `queue=False` (outside Gradio's queue), by kind; issue 42 asks that every server function run in a
lane:
- the browser's own (`fn=None`, `js=` only: the locale, the link box, downloads, the projector): no server work;
- Stops (`stream.stop`, `experiments.stop_job`; the server function `stop_at`): each only marks where its run or
  job ends; in a lane it waits behind the very calls of the tab it should end (a Stop in the server lane came after
  its run's end and ended nothing);
- answers from state the tab already has, no model, tokenizer or whole-run work: the sampling/beam knobs shown
  (`mode_visibility`), the emptied file box, the fork lines and their keep box, a widget following another, the
  class game's clicks and ticks, the badge and history after a run (`runs.show`), the copied link;
- the rest, in the server functions' lane (`ServerLane.for_tab`), one at a time per tab: `page_load` (the link's
  settings, the tab opened), `switch_language`/`models.refresh`/`teacher.relabel` (labels, the model's texts),
  `stream.relabelled_value` (the run on screen's whole value after a language switch, kept per run version as
  `live_state`'s), `teacher.prompt_tokens` (the tokenizer, as the prompt is typed) and the export (a whole
  run's file).
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

# The lanes and what runs in them. Model work itself runs on the one torch thread in bounded slices (the
# shared batch, jobs); a lane bounds only the Gradio worker threads that wait for it.
GENERATE = "generate"  # runs that stream into the live screen: Generate, a link, a branch, a lab fork
API = "api"  # /generate_text: scripts' runs, in a lane of their own so that they never hold the page's workers
JOBS = "jobs"  # a tab's measurements and sweeps: the cache rerun, its timing, SDPA, the head sweep
FIGURES = "figures"  # the open view's redraw (one per tab, the newest selection wins)
LOAD = "load"  # loading a model (a file read, a conversion)
SERVER = "server"  # the page's server functions (outside Gradio's queue: `ServerLane`)


@dataclass(frozen=True)
class Lanes:
    """The limit of each lane for one app (`generate` from `app.py --concurrency`)."""

    generate: int = 4
    jobs: int = 2
    figures: int = 2
    load: int = 2
    api: int | None = None  # None: half the generate lane (at least 2), so scripts never hold all its workers
    server: int = 2

    def limits(self) -> dict[str, int]:
        api = self.api if self.api is not None else max(2, self.generate // 2)
        return {GENERATE: self.generate, JOBS: self.jobs, FIGURES: self.figures, LOAD: self.load, API: api,
                SERVER: self.server}

    def lane(self, name: str) -> dict[str, Any]:
        """The keyword arguments that put an event into lane `name` (its id and the lane's one limit)."""
        return {"concurrency_id": name, "concurrency_limit": self.limits()[name]}


def check(fns: Iterable[Any], limits: Mapping[str, int]) -> None:
    """Every queued event of the page joins a declared lane with that lane's limit; raises ValueError naming
    the first that does not (a developer bound an event without `Lanes.lane`)."""
    for fn in fns:
        if not getattr(fn, "queue", True) or getattr(fn, "fn", None) is None or _unload(fn):
            continue  # runs in the browser or outside the queue (a tab's unload is called directly): no lane
        name, limit = fn.concurrency_id, fn.concurrency_limit
        if name not in limits or limit != limits[name]:
            raise ValueError(f"event {fn.name!r} is in concurrency id {name!r} with limit {limit!r}: bind it with "
                             f"Lanes.lane(...) (lanes: {dict(limits)})")


def _unload(fn: Any) -> bool:
    return any(trigger == "unload" for _, trigger in getattr(fn, "targets", ()))


class ServerLane:
    """The lane of the page's server functions: each call waits for its tab's earlier calls (one at a time per
    tab), then runs on one of `limit` threads for the whole server.

    Gradio runs a server function at once on a thread of its own, outside the queue and its lanes: one tab calling
    `live_state` (a 1 MB run's whole value) from 16 threads held the GIL from every generation (others' 16-token
    requests took 3.3-9.2 s, 0.22-0.38 s alone). Here a waiting call holds no thread (an asyncio lock per tab on
    the server's event loop), so a flood of calls costs its own tab only. `tab_of(args)` names the tab a call
    belongs to (the owner of the run it names; "" for a call naming none, which then share one place)."""

    def __init__(self, limit: int, tab_of: Callable[[Any], str | None]) -> None:
        self.limit = limit
        self.tab_of = tab_of
        self._tabs: dict[str, asyncio.Lock] = {}
        self._calls: Counter[str] = Counter()  # calls holding or waiting for each tab's lock
        self._limiter: tuple[Any, anyio.CapacityLimiter] | None = None  # (event loop, its limiter)

    def wrap(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """`fn` (one argument: the page's list) as a server function of this lane, under `fn`'s name."""
        async def call(args: Any) -> Any:
            return await self.run(fn, args)

        call.__name__ = fn.__name__
        return call

    def for_tab(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, an event handler bound outside Gradio's queue whose last argument is its request, in this lane: one
        call at a time per tab, with that tab's server functions, on one of the lane's threads."""
        @functools.wraps(fn)  # Gradio reads the handler's parameters (and where its request goes) through the wrapper
        async def call(*args: Any) -> Any:
            tab = getattr(args[-1], "session_hash", None) if args else None
            return await self.run(lambda given: fn(*given), list(args), tab=tab)

        return call

    async def run(self, fn: Callable[[Any], Any], args: Any, tab: str | None = None) -> Any:
        """`fn(args)` once the tab's earlier calls are done; `tab`: the tab, else `tab_of(args)` names it."""
        tab = (tab if tab is not None else self.tab_of(args)) or ""
        lock = self._tabs.setdefault(tab, asyncio.Lock())
        self._calls[tab] += 1
        try:
            async with lock:
                return await anyio.to_thread.run_sync(fn, args, limiter=self._threads())
        finally:
            self._calls[tab] -= 1
            if not self._calls[tab]:  # the tab's last call: nothing kept for it
                del self._calls[tab], self._tabs[tab]

    def _threads(self) -> anyio.CapacityLimiter:
        loop = asyncio.get_running_loop()  # a limiter belongs to one loop (a test may launch the app twice)
        if self._limiter is None or self._limiter[0] is not loop:
            self._limiter = (loop, anyio.CapacityLimiter(self.limit))
        return self._limiter[1]
