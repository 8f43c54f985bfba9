"""What the shared batch did, step by step: a small ring of the last steps of one model's scheduler.

    history = scheduler.history
    history.seats(tag)            # each step the request `tag` took part in: its row r of n, what it fed
    history.step_times()          # {token rows in a step: (median ms, steps)} measured on this server
    history.timeline(tag)         # the steps around that request, row by row, for a figure

Each step records its wall time and, per forward pass, the weights it read once and each request's share:
its opaque tag (the caller's label for the request, never shown), its sequences (a beam search has one per
beam), the tokens it fed (a prompt chunk, or one per sequence while decoding), whether it wanted logits (a
token comes out), and whether it joined or left at that step. No tensors are kept: O(rows) small tuples per
step, at most `capacity` steps (the oldest dropped).
"""

from __future__ import annotations

import collections
import statistics
import threading
from typing import Any, NamedTuple

CAPACITY = 512  # steps kept per model
PREFILLS = 64  # requests whose prompt's prefix-cache hits are kept per model

PREFILL, DECODE, OWN = "prefill", "decode", "own"  # a prompt chunk; one new token per sequence; a pass alone


class Entry(NamedTuple):
    """One request's share of a forward pass."""

    tag: Any  # opaque: the caller's label for the request
    rows: int  # its sequences in the pass (a beam search: its beams)
    tokens: int  # token rows it fed (a prompt chunk: rows · chunk length; decoding: rows); 0 for OWN
    kind: str  # PREFILL, DECODE or OWN
    emits: bool  # logits wanted: `rows` tokens came out of this pass for it
    joined: bool = False  # its first pass
    left: bool = False  # it ended at this step


class Pass(NamedTuple):
    """One forward pass: every entry's rows multiplied by the same weights, read once."""

    weight_bytes: int
    entries: tuple[Entry, ...]

    @property
    def rows(self) -> int:
        return sum(e.rows for e in self.entries)

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.entries)

    @property
    def produced(self) -> int:
        """Tokens this pass made (one per sequence that wanted logits)."""
        return sum(e.rows for e in self.entries if e.emits)


class StepRecord(NamedTuple):
    number: int  # the scheduler's step count (1 = its first)
    seconds: float  # wall time of the whole step
    passes: tuple[Pass, ...]

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.passes)


class Seat(NamedTuple):
    """Where a request sat in one step: row `row` (1-based, its first sequence) of `rows` in its pass."""

    step: int
    row: int
    rows: int
    entry: Entry
    tokens: int  # token rows of the whole step
    produced: int  # tokens its pass made
    weight_bytes: int  # its pass's weights, read once
    ms: float  # the step's wall time


class StepHistory:
    """The last `capacity` steps of one model's shared batch. `record` runs on the torch thread; the queries
    may run anywhere (a lock guards the ring)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._steps: collections.deque[StepRecord] = collections.deque(maxlen=capacity)
        self._count = 0
        self._lock = threading.Lock()
        # the last requests' prompts: tag -> (prompt tokens, of them restored from the prefix store)
        self._prefills: collections.OrderedDict[Any, tuple[int, int]] = collections.OrderedDict()

    def record(self, seconds: float, passes: tuple[Pass, ...]) -> None:
        """One step's record (a step with no pass leaves none)."""
        if not passes:
            return
        with self._lock:
            self._count += 1
            self._steps.append(StepRecord(self._count, seconds, passes))

    def note_prefill(self, tag: Any, prompt_tokens: int, reused: int) -> None:
        """A request's prompt is in: `reused` of its `prompt_tokens` came from the prefix store."""
        with self._lock:
            self._prefills[tag] = (prompt_tokens, reused)
            while len(self._prefills) > PREFILLS:
                self._prefills.popitem(last=False)

    def prefix_hits(self, tag: Any = None) -> tuple[int, int, int]:
        """(prompt tokens, of them reused, requests) over the kept requests' prompts; with `tag`, that one's."""
        with self._lock:
            rows = [self._prefills[tag]] if tag in self._prefills else [] if tag is not None else \
                list(self._prefills.values())
        return sum(p for p, _ in rows), sum(r for _, r in rows), len(rows)

    def __len__(self) -> int:
        return len(self._steps)

    def records(self) -> list[StepRecord]:
        with self._lock:
            return list(self._steps)

    def holds(self, tag: Any) -> bool:
        return any(e.tag == tag for s in self.records() for p in s.passes for e in p.entries)

    def seats(self, tag: Any, records: list[StepRecord] | None = None) -> list[Seat]:
        """Every step (still kept, or of `records`: one reading of `records()`) that the request `tag` took part
        in, in order."""
        seats = []
        for s in self.records() if records is None else records:
            for p in s.passes:
                row = 1
                for e in p.entries:
                    if e.tag == tag:
                        seats.append(Seat(s.number, row, p.rows, e, s.tokens, p.produced, p.weight_bytes,
                                          1000.0 * s.seconds))
                    row += e.rows
        return seats

    def step_times(self) -> dict[int, tuple[float, int]]:
        """{token rows fed in a step: (median wall ms of those steps, how many steps)}, over the kept steps
        whose passes all shared the batch (a pass alone in its turn costs what its own work costs)."""
        by_rows: dict[int, list[float]] = {}
        for s in self.records():
            if all(e.kind != OWN for p in s.passes for e in p.entries):
                by_rows.setdefault(s.tokens, []).append(1000.0 * s.seconds)
        return {n: (statistics.median(ms), len(ms)) for n, ms in sorted(by_rows.items())}

    def timeline(self, tag: Any, margin: int = 4, records: list[StepRecord] | None = None) -> dict[str, Any]:
        """The kept steps (or `records`) from `margin` before the request's first to `margin` after its last, as
        plain data: per step its number, wall ms, and each row's (kind, mine, joined, left, tokens) top to bottom."""
        records = self.records() if records is None else records
        numbers = [s.number for s in records if any(e.tag == tag for p in s.passes for e in p.entries)]
        if not numbers:
            return {"steps": [], "ms": [], "cells": []}
        lo, hi = numbers[0] - margin, numbers[-1] + margin
        steps, ms, cells = [], [], []
        for s in records:
            if lo <= s.number <= hi:
                steps.append(s.number)
                ms.append(1000.0 * s.seconds)
                cells.append([(e.kind, e.tag == tag, e.joined, e.left, e.tokens // max(1, e.rows))
                              for p in s.passes for e in p.entries for _ in range(e.rows)])
        return {"steps": steps, "ms": ms, "cells": cells}
