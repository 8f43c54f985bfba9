"""The one place the app obtains the engine's event stream for a run.

Every run of the page and of the script API goes through `run_events`, so how runs are served can
change here without touching the rest of the app. On the CPU or a dedicated GPU: every visitor's run
decoded in one shared batch per model, stepped on the torch thread (`playground.app.serving`). On a
ZeroGPU Space (`playground.app.zerogpu`, installed at start): each run is one GPU call in a forked
worker, and a refused call falls back to that batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from playground.app import serving, zerogpu
from playground.generation import StepEvent
from playground.generation.plan import Plan


def run_events(
    plan: Plan, stop: threading.Event, owner: Any = None, *, report_waiting: bool = False, tag: Any = None,
    due: Callable[[], float] | None = None,
) -> Iterator[StepEvent | serving.Waiting | zerogpu.Notice]:
    """The engine's events for `plan`; `stop` ends it early. `owner` (a visitor's session) holds at most
    one running request at a time in the batch (a fair share per visitor). With `report_waiting`, a
    `serving.Waiting` while the request waits for a place in the batch, and on ZeroGPU a `zerogpu.Notice`
    when the GPU was refused and the run went to the CPU. `tag` labels the request in the batch's step history.
    `due()`: when the reader next wants events (a page's next frame): it is not woken by each step before then."""
    gpu = zerogpu.active()
    if gpu is not None:
        return gpu.run_events(plan, stop, owner, report_waiting=report_waiting, tag=tag, due=due)
    return serving.run_events(plan, stop, owner, report_waiting=report_waiting, tag=tag, due=due)
