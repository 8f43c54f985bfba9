"""What every decode loop does once it has chosen a token, in one place: the run's token chain grows by one node,
the end rule is asked, the clock accounts the step, and the step's event is built.

    tail = EventTail(plan)
    event = tail.event(step, token_id, prob, started, kv=stats, candidates=..., attention=...)
    yield event; if event.finished: stop

The eager loop (`engine`), the captured step (`captured`) and speculative decoding (`speculative`) share it, so a run
ends, is timed and is described the same way whichever of them decoded it. Beam search describes a tree of
hypotheses and builds its own events, with the same `Clock`.
"""

from __future__ import annotations

import time
from typing import Any

from playground.generation.events import StepEvent, Timing
from playground.generation.tokens import Tokens, generated_start


class Clock:
    """prefill / per-step timings of engine work (time spent in the consumer is not counted)."""

    def __init__(self) -> None:
        self.prefill_ms = 0.0
        self.decode_ms = 0.0
        self.decode_steps = 0
        self.total_ms = 0.0

    def record(self, step: int, started: float) -> float:
        """Account one step that began at perf_counter() `started`; returns its milliseconds."""
        step_ms = (time.perf_counter() - started) * 1000
        self.total_ms += step_ms
        if step == 0:
            self.prefill_ms = step_ms
        else:
            self.decode_ms += step_ms
            self.decode_steps += 1
        return step_ms

    def timing(self, step_ms: float, tokens: int) -> Timing:
        """prefill_ms, step_ms, decode_ms_per_token, tokens_per_s, elapsed_ms (`Timing.KEYS`), milliseconds to 3
        places; the rate is the decode rate after the prefill, before any decode step the rate with the prefill."""
        per_token = self.decode_ms / self.decode_steps if self.decode_steps else 0.0
        rate = 1000.0 / per_token if per_token else tokens * 1000.0 / max(self.total_ms, 1e-9)
        # a tuple, not a generator: built for every row of every step (an array from a generator costs twice as much)
        return Timing((round(self.prefill_ms, 3), round(step_ms, 3), round(per_token, 3), round(rate, 3),
                       round(self.total_ms, 3)))


def finish_reason(p: Any, token_id: int, generated: int, tokens: Tokens) -> str | None:
    """Why the run of plan `p` ends after `token_id` (None: it goes on): "eos", "stop_string" or "length"."""
    if token_id in p.eos_ids:
        return "eos"
    if p.cfg.stop_strings and tokens.text_holds(p.cfg.stop_strings):  # a tail decoded, not the whole run
        return "stop_string"
    if generated >= p.cfg.max_new_tokens:
        return "length"
    return None


class EventTail:
    """The end of every decode step of one run of plan `p` (greedy, sampled or speculative)."""

    def __init__(self, p: Any) -> None:
        self.p = p
        self.clock = Clock()
        self.generated = generated_start(p.lm)  # the run's tokens so far: one node per token

    def event(self, step: int, token_id: int, prob: float, started: float, *, kv: Any, **fields: Any) -> StepEvent:
        """The event of the token `token_id` (probability `prob`) chosen at `step`, whose work began at
        perf_counter() `started`; `fields`: what else the loop knows of it (candidates, captures, speculation)."""
        self.generated = self.generated.extend(token_id)
        reason = finish_reason(self.p, token_id, len(self.generated), self.generated)
        step_ms = self.clock.record(step, started)
        return StepEvent(step=step, token_id=token_id, token_text=self.p.lm.token_text(token_id), prob=prob,
                         tokens=self.generated, beams=None, kv=kv, clock=self.clock.timing(step_ms, len(self.generated)),
                         finished=reason is not None, finish_reason=reason, **fields)
