"""The precision what-if in the app: fork a run with its weights at another precision (bfloat16, float16, int8,
int4 weight-only) and compare it with the float32 run, aligned token by token.

A precision run is a run of the same prompt and settings whose `weight_precision` setting names the precision:
it streams like any run, sits beside the float32 run in the live screen's branches, and its link replays the
float32 run first (`lab.link_runs`). The numbers come from `playground.analysis.precision` (teacher-forced on the
float32 run's tokens: per-step KL, top-1 agreement, the residual stream's error per layer, weight bytes per
token, measured tokens/s). No Gradio, no threads: callers run the model work on the torch thread.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from playground.analysis.precision import iter_compare_precisions
from playground.app.run import Run
from playground.app.settings import UISettings, has_precision, plain_variant
from playground.app.words import t
from playground.errors import PlaygroundError
from playground.generation.engine import drain
from playground.models.quantize import PRECISIONS

if TYPE_CHECKING:
    from playground.app.session import Session

_MEASURED: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()  # (run, float32 run) -> its numbers
_KEEP = 16


class PrecisionLabError(PlaygroundError):
    """A fork the page cannot run; the message (in the visitor's language) says what to do."""


def fork_settings(session: Session, run: Run, precision: str, lang: str) -> UISettings:
    """The settings of `run` (its seed, no branches) with its weights at `precision`; refused for float32."""
    if precision not in PRECISIONS or precision == "float32":
        raise PrecisionLabError(t("precision_choose", lang))
    base = session.run_settings(run)
    return dataclasses.replace(base, branches="", lang=lang, weight_precision=precision)


def reference_among(runs: Sequence[Run], run: Run) -> Run | None:
    """The newest finished run of the same request with the weights as loaded that the precision run `run` is
    compared with (a sampled run: the same seed), among a session's runs, oldest first."""
    want = dataclasses.replace(plain_variant(run.settings), branches="", lang="en", pace_ms=0, seed=None)
    for other in reversed(runs):
        if other is run or other.running or not other.path or other.branch_of is not None:
            continue
        if has_precision(other.settings) or other.settings.weight_precision or other.prompt_ids != run.prompt_ids:
            continue
        if run.mode == "sample" and other.cfg.seed != run.cfg.seed:
            continue
        if dataclasses.replace(other.settings, branches="", lang="en", pace_ms=0, seed=None) == want:
            return other
    return None


def measure(lm: Any, run: Run) -> dict[str, Any]:
    """float32 and the run's precision compared on the run's prompt and settings (`compare_precisions`: each
    branch's own tokens and measured speed, teacher-forced KL and top-1 per step, the residual error per layer);
    remembered per run (a finished run never changes)."""
    return drain(measure_slices(lm, run))


def measure_slices(lm: Any, run: Run) -> Generator[None, None, dict[str, Any]]:
    """`measure` one decoding step or forward pass per `next()`: a job's slices, so that other visitors run in
    between."""
    key = (run.token, run.settings.weight_precision)
    if key in _MEASURED:
        _MEASURED.move_to_end(key)
        return _MEASURED[key]
    cfg = run.cfg.replace(capture_attention=False, attention_layers=None, capture_residual=False, top_candidates=0,
                          weight_precision=None)
    report = yield from iter_compare_precisions(lm, list(run.prompt_ids), cfg, ["float32", run.settings.weight_precision])
    out = report.to_dict()
    out["texts"] = lm.token_texts(report.reference_ids)
    out["branch_texts"] = [lm.token_texts(b["token_ids"]) for b in out["branches"]]
    _MEASURED[key] = out
    while len(_MEASURED) > _KEEP:
        _MEASURED.popitem(last=False)
    return out
