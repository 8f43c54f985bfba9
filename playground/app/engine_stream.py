"""The one place the app obtains the engine's event stream for a run.

Every run of the page goes through `run_events`, so how runs are served (today: one run at a time
per call, each step on the torch thread) can change here without touching the rest of the app.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from playground.app import torch_thread
from playground.generation import StepEvent, run_plan
from playground.generation.plan import Plan


def run_events(plan: Plan, stop: threading.Event) -> Iterator[StepEvent]:
    """The engine's events for `plan`, each step computed on the torch thread; `stop` ends it early."""
    return torch_thread.iterate(run_plan(plan, stop))
