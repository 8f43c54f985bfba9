"""How steps are counted, everywhere a person reads one (live screen, inspector, lessons, beam tree, KV
chart, lab, links).

The engine counts a run's steps from 0 (`StepEvent.step`, the index into `Run.path`): index 0 is the
prefill pass, which reads the whole prompt and chooses the first new token; index t ≥ 1 feeds token t
and chooses token t + 1. People read **step 1 for the first generated token**: step n is the step that
chose the n-th new token, and the prompt is read inside step 1. `step_number` is the one conversion;
`playground.app.run.Run.step_number` applies it to a run, counting a branch's inherited and forced tokens first
(a branch from step 6 continues at step 7), and the live screen reads that run's number (`first_step`); nothing
else adds 1. A figure or caption that numbers a run's steps without the run at hand (the lessons', which read
the run as a `GenerationResult`) takes those earlier tokens as its `before` argument, as it takes its language.
"""

from __future__ import annotations

FIRST_STEP = 1  # the number shown for the first generated token


def step_number(index: int, before: int = 0) -> int:
    """The step a person reads for the engine's 0-based step `index`: 0 → 1 (the first new token), counted after
    `before` earlier tokens (a branch's inherited and forced ones: a branch from step 6 reads its first token as
    step 7)."""
    return int(index) + FIRST_STEP + int(before)


def step_index(number: int) -> int:
    """The engine's 0-based index of the step a person calls `number` (1 → 0)."""
    return int(number) - FIRST_STEP
