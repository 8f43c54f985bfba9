"""The precision what-if: fork a run with its weights at another precision (bfloat16, float16, int8, int4 weight-only)
and compare it with float32, aligned token by token (`playground.analysis.precision`, teacher-forced on the float32
run's tokens): per-step KL and top-1 agreement, the first token that differs, the residual stream's relative error
per layer at that step, weight bytes per token and whether the precision is simulated; the speeds are measured
again over the run's first tokens, `noise.REPEATS` runs of each precision interleaved, with their ranges."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Generator
from typing import Any

from playground.analysis.precision import iter_compare_precisions
from playground.app import noise
from playground.app.describe import format_bytes, inert
from playground.app.experiments.base import (
    Action,
    Experiment,
    Fork,
    ForkError,
    ForkRequest,
    Out,
    Widget,
    Words,
    compared_with,
)
from playground.app.fields import Field
from playground.app.notes import note
from playground.app.run import Run
from playground.app.view import HIDDEN, Context, Drawn, Selection, View, shown
from playground.app.words import t
from playground.generation.config import GenerationConfig
from playground.generation.engine import drain
from playground.models.quantize import PRECISIONS
from playground.notes import Note
from playground.steps import step_number
from playground.variants import variant
from playground.viz import precision as figures

_MEASURED: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()  # (run, precision) -> its numbers
_KEEP = 16
SPEED_TOKENS = 32  # the speeds are measured again over the run's first tokens (each precision, every repeat)


def lowered(settings: Any) -> bool:
    """Whether the settings run the weights at another precision than float32."""
    return settings.weight_precision not in ("", "float32")


def config(settings: Any) -> dict[str, Any]:
    return {"weight_precision": settings.weight_precision} if settings.weight_precision else {}


def lenient(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    if c.weight_precision is not None and c.weight_precision not in PRECISIONS:
        notes.append(note("precision_bad", value=repr(c.weight_precision)))
        c.weight_precision = None


def badge(settings: Any) -> list[Note]:
    return [note("precision_words", precision=settings.weight_precision)] if lowered(settings) else []


def fork(req: ForkRequest) -> Fork:
    """The run again with its weights at the chosen precision; refused for float32."""
    precision = str(req.values.get("weight_precision") or "")
    if precision not in PRECISIONS or precision == "float32":
        raise ForkError(note("precision_choose"))
    return Fork({"weight_precision": precision})


def precision_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("precision_asloaded", lang), ""), *((p, p) for p in PRECISIONS)]


# --- its numbers ----------------------------------------------------------------------------------------


def measure_slices(lm: Any, run: Run) -> Generator[None, None, dict[str, Any]]:
    """float32 and the run's precision compared on the run's prompt and settings (`compare_precisions`: each
    branch's own tokens and measured speed, teacher-forced KL and top-1 per step, the residual error per layer),
    one decoding step or forward pass per `next()`; remembered per run (a finished run never changes)."""
    key = (run.token, run.settings.weight_precision)
    if key in _MEASURED:
        _MEASURED.move_to_end(key)
        return _MEASURED[key]
    # The precisions compared, nothing else: the teacher-forced pass reads the whole cache, so the free runs do too
    # (a cache policy kept from the KV lab made them part where the forced pass agreed: two texts that disagreed).
    cfg = run.cfg.replace(capture_attention=False, attention_layers=None, capture_residual=False, top_candidates=0,
                          weight_precision=None, draft=None, kv_window=None, kv_sink=0, kv_heavy=0, kv_dtype=None,
                          rope_scaling=None)
    report = yield from iter_compare_precisions(lm, list(run.prompt_ids), cfg, ["float32", run.settings.weight_precision])
    out = report.to_dict()
    out["texts"] = lm.token_texts(report.reference_ids)
    out["branch_texts"] = [lm.token_texts(b["token_ids"]) for b in out["branches"]]
    timed = cfg.replace(max_new_tokens=max(2, min(SPEED_TOKENS, len(run.path))))
    out["speeds"] = yield from noise.decode_rates(list(run.prompt_ids), {
        "float32": (variant(lm, "float32").lm, timed), "low": (lm, timed.replace(weight_precision=run.settings.weight_precision))})
    out["speed_tokens"], out["load"] = timed.max_new_tokens, noise.machine_load()
    _MEASURED[key] = out
    while len(_MEASURED) > _KEEP:
        _MEASURED.popitem(last=False)
    return out


def measure(lm: Any, run: Run) -> dict[str, Any]:
    """`measure_slices` all at once."""
    return drain(measure_slices(lm, run))


# --- its view ---------------------------------------------------------------------------------------------


def compute(ctx: Context, sel: Selection) -> Generator[None, None, dict[str, Any]]:
    """In slices (one decoding step or pass each): the comparison reruns both precisions."""
    run = ctx.run
    if not lowered(run.settings):
        return {"number": run.number, "precision": None}
    reference = compared_with(run, ctx.runs)
    numbers = yield from measure_slices(ctx.lm, run)
    first = numbers["branches"][1]["first_difference"]
    residual = numbers["branches"][1]["residual_step"]
    return {"number": run.number, "precision": run.settings.weight_precision,
            "reference": None if reference is None or lowered(reference.settings) else reference.number,
            # the comparison reruns the request from its start: its steps are counted from there
            "first_no": None if first is None else step_number(first),
            "residual_no": None if residual is None else step_number(residual),
            "cache_policy": bool(run.cfg.kv_policy), **numbers}


def draw(d: dict[str, Any], lang: str) -> Drawn:
    if d["precision"] is None or not d["reference_ids"]:
        return {"precision_steps": HIDDEN, "precision_layers": HIDDEN}
    b = d["branches"][1]
    out: Drawn = {"precision_steps": shown(figures.steps_figure(b["kl"], b["top1"], d["texts"], b["precision"],
                                                                lang=lang)),
                  "precision_layers": HIDDEN}
    if b["residual_error"]:
        out["precision_layers"] = shown(figures.layers_figure(b["residual_error"], b["error_entry"], b["residual_step"],
                                                              b["precision"], lang=lang))
    return out


def _token(text: str) -> str:
    return inert(text.replace("\n", "↵")) or "∅"


def caption(d: dict[str, Any], lang: str) -> str:
    if d["precision"] is None:
        return t("precision_plain", lang, n=d["number"])
    if not d["reference_ids"]:
        return t("precision_empty", lang)
    ref, b = d["branches"][0], d["branches"][1]
    how = t("precision_simulated" if b["simulated"] else "precision_native", lang, compute=b["compute"])
    against = (t("precision_against", lang, n=d["reference"]) if d["reference"] is not None
               else t("precision_against_self", lang))
    lines = [t("precision_head", lang, n=d["number"], precision=b["precision"], how=how, against=against)]
    if d.get("cache_policy"):  # the run kept a KV lab policy: the comparison is of the weights alone
        lines.append(t("precision_whole_cache", lang))
    first = b["first_difference"]
    if first is None:
        lines.append(t("precision_same", lang))
    else:
        mine = d["branch_texts"][1]
        lines.append(t("precision_parted", lang, step=d["first_no"],
                       token=_token(mine[first]) if first < len(mine) else "∅",
                       reference=_token(d["texts"][first]) if first < len(d["texts"]) else "∅"))
    lines.append(t("precision_kl", lang, kl=b["mean_kl"], agree=b["agreement"]))
    if b["residual_error"]:
        entry = b["error_entry"]
        where = t("precision_embedding", lang) if entry == 0 else t("precision_block", lang, i=entry - 1)
        lines.append(t("precision_layers", lang, step=d["residual_no"], where=where, last=b["residual_error"][-1]))
    lines.append(t("precision_cost", lang, bytes=format_bytes(b["weight_bytes_per_token"]),
                   ref_bytes=format_bytes(ref["weight_bytes_per_token"]),
                   ratio=ref["weight_bytes_per_token"] / max(1, b["weight_bytes_per_token"])))
    low, f32 = d["speeds"]["low"], d["speeds"]["float32"]
    lines += [t("precision_speed", lang, n=int(low["n"]), tokens=d["speed_tokens"], precision=b["precision"],
                tps=low["median"], lo=low["min"], hi=low["max"], ref_tps=f32["median"], ref_lo=f32["min"],
                ref_hi=f32["max"]), noise.verdict(low, f32, d["load"], lang)]
    return ("" if lang == "zh" else " ").join(lines)


def idle(lang: str, words: str) -> Drawn:
    return {"precision_steps": HIDDEN, "precision_layers": HIDDEN}


VIEW = View("precision", "precision", frozenset({"finished"}), ("precision_md", "precision_steps", "precision_layers"),
            compute, draw, caption, idle, waits="precision_needs_run", busy="precision_after_run")

EXPERIMENT = Experiment(
    name="precision", tab="precision", elem_id="precision-tab", order=30,
    # "": the weights as loaded; a link replays the run as loaded first, then this one beside it
    fields=(Field("weight_precision", "choice", "", choices=("", *PRECISIONS), widget=False),),
    layout=(
        Words("precision_intro", ("precision_intro",), "precision-intro"),
        Widget("weight_precision", "radio", "precision_pick", "weight-precision", default="", choices=precision_choices,
               field="weight_precision"),
        Action("precision_fork", "fork", "precision_fork", "precision-fork-btn", inputs=("weight_precision",), run=fork),
        Out("precision_md", "markdown", "precision-md", words="precision_needs_run"),
        Out("precision_steps", "plot", "precision-steps-plot"),
        Out("precision_layers", "plot", "precision-layers-plot"),
    ),
    view=VIEW, badge=badge, config=config, lenient=lenient, needs_run="precision_needs_run",
)
