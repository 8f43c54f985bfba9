"""The decoding knobs in one table: type, the engine's range, default, off-value and the range a page offers.

Four consumers read it, so a range is written once: `GenerationConfig.validate` (strict: one line
saying what to change), the app's lenient clamp (`playground.app.limits.clamp_settings`), the link
round trip (`playground.app.settings`) and the page's sliders (`playground.app.limits.RANGES`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_BEAMS = 16  # the engine's hard limit (the app offers fewer)
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed accepts up to this


@dataclass(frozen=True)
class Knob:
    """One numeric decoding knob. `low`/`high` are the engine's bounds (None: unbounded); `offer` is
    what a page offers on its slider and accepts from a link; a `capped` knob also has the offered
    maximum enforced on every run of the app (it bounds the server's work)."""

    name: str
    kind: type  # int or float
    default: Any  # GenerationConfig's default
    off: Any  # the value that switches the knob off (None: it has none)
    low: float | None
    high: float | None
    hint: str  # what to do, for the strict message
    offer: tuple[float, float] | None = None
    capped: bool = False
    low_open: bool = False  # `low` itself is excluded (top_p > 0, repetition_penalty > 0)
    optional: bool = False  # None is allowed (seed: a fresh one)

    def typed(self, value: Any) -> bool:
        """Whether `value` has the knob's type (a whole number for int knobs, a finite number for floats)."""
        if isinstance(value, bool):
            return False
        if self.kind is int:
            return isinstance(value, int)
        return isinstance(value, (int, float)) and math.isfinite(value)

    def in_range(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or value <= self.high

    def bounds(self) -> str:
        """The engine's range in words: ">= 1", "in (0, 1]", "between 1 and 16", "positive"."""
        if self.low is None and self.high is None:
            return "any number"
        if self.high is None:
            return "positive" if self.low_open and self.low == 0 else f">= {self.low:g}"
        if self.low_open:
            return f"in ({self.low:g}, {self.high:g}]"
        return f"between {self.low:g} and {self.high:g}" if self.kind is int else f"in [{self.low:g}, {self.high:g}]"

    def fallback(self, value: float) -> Any:
        """What a lenient consumer uses for an out-of-range value: the off-value, else the nearest bound."""
        if self.off is not None:
            return self.off
        if self.low is not None and value < self.low:
            return self.kind(self.low)
        return self.kind(self.high)


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("max_new_tokens", int, 32, None, 1, None, "ask for at least 1 new token", offer=(1, 1024), capped=True),
    Knob("temperature", float, 0.0, 0.0, 0.0, None, "use 0 for greedy decoding or a positive value", offer=(0.0, 5.0)),
    Knob("top_k", int, 0, 0, 0, None, "use 0 to switch top-k off", offer=(0, 500)),
    Knob("top_p", float, 1.0, 1.0, 0.0, 1.0, "1 switches top-p off", offer=(0.01, 1.0), low_open=True),
    Knob("min_p", float, 0.0, 0.0, 0.0, 1.0, "0 switches min-p off"),
    Knob("repetition_penalty", float, 1.0, 1.0, 0.0, None, "1 switches it off", offer=(0.5, 3.0), low_open=True),
    Knob("num_beams", int, 1, 1, 1, MAX_BEAMS, f"use 1 (no beam search) up to {MAX_BEAMS} beams", offer=(1, 8),
         capped=True),
    Knob("length_penalty", float, 1.0, None, None, None, "use a finite number (1 is neutral)", offer=(-3.0, 3.0)),
    Knob("top_candidates", int, 5, 0, 0, 1000, "use 0 to skip the candidate list, or a small number like 5",
         offer=(1, 20), capped=True),
    # A link offers 31-bit seeds (they survive every JavaScript number); the engine takes any torch seed.
    Knob("seed", int, None, None, 0, MAX_SEED, "use a non-negative integer seed, or none", offer=(0, 2**31 - 1),
         optional=True),
)}

EARLY_STOPPING = (True, False, "never")  # as in transformers; the one non-numeric decoding knob


def offered_ranges() -> dict[str, tuple[float, float]]:
    """(low, high) of every knob a page offers: the sliders' bounds and what a link may ask for."""
    return {k.name: k.offer for k in KNOBS.values() if k.offer is not None}
