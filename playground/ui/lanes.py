"""Every queued event's concurrency, declared once: which lane (Gradio concurrency id) it joins, and each lane's limit.

Gradio keeps, for the server's life, the LOWEST limit any event ever named for a concurrency id (the queue
creates an id's queue when its first event arrives and lowers the limit for each later event that names a
smaller one, "default" included). So one event bound with another limit, or none, silently throttles every
event of its id: a single click of "Run again without the cache" once left every generation on the server
running two at a time. Here each lane has one limit, every queued event names its lane through `lane()`, and
`check()` refuses a page where an event was bound any other way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The lanes and what runs in them. Model work itself runs on the one torch thread in bounded slices (the
# shared batch, jobs); a lane bounds only the Gradio worker threads that wait for it.
GENERATE = "generate"  # runs that stream into the live screen: Generate, a link, a branch, a lab fork
API = "api"  # /generate_text: scripts' runs, in a lane of their own so that they never hold the page's workers
JOBS = "jobs"  # a tab's measurements and sweeps: the cache rerun, its timing, SDPA, the head sweep
FIGURES = "figures"  # the open view's redraw (one per tab, the newest selection wins)
LOAD = "load"  # loading a model (a file read, a conversion)


@dataclass(frozen=True)
class Lanes:
    """The limit of each lane for one app (`generate` from `app.py --concurrency`)."""

    generate: int = 4
    jobs: int = 2
    figures: int = 2
    load: int = 2
    api: int | None = None  # None: half the generate lane (at least 2), so scripts never hold all its workers

    def limits(self) -> dict[str, int]:
        api = self.api if self.api is not None else max(2, self.generate // 2)
        return {GENERATE: self.generate, JOBS: self.jobs, FIGURES: self.figures, LOAD: self.load, API: api}

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
