"""The lesson on the shared batch: the steps the visitor's run took in its model's batch, read from the server's
step history (`generation.batch_history`, kept per model by `app.serving`). No model work, no Gradio.

The run is found by its token (the page labels its request with it); the selected token is the one made by
the run's n-th pass that made a token (a prompt's last chunk, then each decoding step). While the run streams,
its newest step is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playground.app import serving
from playground.generation.batch import CHUNK
from playground.generation.batch_history import CAPACITY, StepHistory
from playground.viz import shared_batch as v_batch

MAX_TIMES = 24  # row counts listed in the step-time figure's data (the most common kept)


def compute(run: Any, step: int | None, find: Callable[[Any], StepHistory | None] = serving.batch_history,
            ) -> dict[str, Any]:
    """The lesson's numbers for `run` at the token `step` (None: its newest), from the history `find` gives."""
    sizes = {"chunk_size": CHUNK, "capacity": CAPACITY}
    if run is None or not run.events:
        return {"state": "no_run", **sizes}
    history = find(run.token)
    records = history.records() if history is not None else []  # one reading: the server records steps meanwhile
    seats = history.seats(run.token, records) if history is not None else []
    if not seats:
        return {"state": "not_kept", **sizes}
    making = [s for s in seats if s.entry.emits]
    newest = len(run.events) - 1
    if step is None or not making:
        seat, index = seats[-1], newest
    else:
        index = min(max(step, 0), len(making) - 1)
        seat = making[index]
    times = history.step_times()
    common = sorted(times.items(), key=lambda kv: -kv[1][1])[:MAX_TIMES]
    shares = [s.weight_bytes / s.produced for s in making if s.produced]
    return {
        # the server counts its passes for everyone since it started; the run counts its own tokens
        "state": "ok", **sizes, "step": seat.step, "run_step": run.step_number(min(index, newest)),
        "run_steps": run.step_number(newest), "row": seat.row, "rows": seat.rows, "kind": seat.entry.kind,
        "chunk": seat.entry.tokens // max(1, seat.entry.rows), "ms": seat.ms, "tokens": seat.tokens,
        "produced": seat.produced, "weight_bytes": seat.weight_bytes,
        "avg_bytes": sum(shares) / len(shares) if shares else float(seat.weight_bytes),
        "steps_in": len(seats), "most_rows": max(s.rows for s in seats), "kept": len(history),
        "times": [[rows, ms, n] for rows, (ms, n) in sorted(common)],
        "mine": [[s.tokens, s.ms] for s in seats], "timeline": history.timeline(run.token, records=records),
        "prefix": history.prefix_hits(), "prefix_mine": history.prefix_hits(run.token),
    }


def figures(d: dict[str, Any], lang: str = "en") -> list[Any]:
    if d.get("state") != "ok":
        return []
    return [v_batch.batch_timeline_figure(d["timeline"], d["step"], lang=lang),
            v_batch.step_time_figure(d["times"], d["mine"], (d["tokens"], d["ms"]), lang=lang)]


def caption(d: dict[str, Any], lang: str = "en") -> str:
    return v_batch.shared_batch_caption(d, lang=lang)
