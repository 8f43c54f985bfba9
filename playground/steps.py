"""How steps are counted, everywhere a person reads one (live screen, inspector, lessons, beam tree, KV
chart, lab, links).

The engine counts a run's steps from 0 (`StepEvent.step`, the index into `Run.path`): index 0 is the
prefill pass, which reads the whole prompt and chooses the first new token; index t ≥ 1 feeds token t
and chooses token t + 1. People read **step 1 for the first generated token**: step n is the step that
chose the n-th new token, and the prompt is read inside step 1. `step_number` is the one conversion;
`playground.app.run.Run.step_number` applies it to a run, counting a branch's inherited and forced tokens first
(a branch from step 6 continues at step 7), and the live screen reads that run's number (`first_step`); nothing
else adds 1. Code that numbers a run's steps without the run at hand (the lessons' figures and captions, which
read the run as a `GenerationResult`) runs inside `counting_after(run's earlier tokens)`, as figures run inside
their visitor's language.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

FIRST_STEP = 1  # the number shown for the first generated token

_BEFORE: ContextVar[int] = ContextVar("steps_before", default=0)  # tokens a branch continues after


def step_number(index: int) -> int:
    """The step a person reads for the engine's 0-based step `index`: 0 → 1 (the first new token), counted
    after the tokens `counting_after` names (none outside it)."""
    return int(index) + FIRST_STEP + _BEFORE.get()


@contextmanager
def counting_after(tokens: int) -> Iterator[None]:
    """Within the block, `step_number` counts after `tokens` earlier tokens (a branch's inherited and forced
    ones): a branch from step 6 reads its first token as step 7 in every figure and caption drawn inside."""
    mark = _BEFORE.set(int(tokens))
    try:
        yield
    finally:
        _BEFORE.reset(mark)


def step_index(number: int) -> int:
    """The engine's 0-based index of the step a person calls `number` (1 → 0)."""
    return int(number) - FIRST_STEP
