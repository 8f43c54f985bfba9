"""The precision what-if: the run on screen with its weights at another precision against float32, aligned token
by token: per-step KL and top-1 agreement (teacher-forced on float32's tokens), the first token that differs,
the residual stream's relative error per layer at that step, weight bytes per token and measured tokens/s, and
whether the precision is simulated. Every result names the runs it reads."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from playground.app import precision_lab
from playground.app.describe import format_bytes, inert
from playground.app.settings import has_precision
from playground.app.views.base import HIDDEN, Context, Drawn, Selection, View, shown
from playground.app.words import t
from playground.viz import precision as figures


def compute(ctx: Context, sel: Selection) -> Generator[None, None, dict[str, Any]]:
    """In slices (one decoding step or pass each): the comparison reruns both precisions."""
    run = ctx.run
    if not has_precision(run.settings):
        return {"number": run.number, "precision": None}
    reference = precision_lab.reference_among(ctx.runs, run)
    numbers = yield from precision_lab.measure_slices(ctx.lm, run)
    return {"number": run.number, "precision": run.settings.weight_precision,
            "reference": None if reference is None else reference.number, **numbers}


def draw(d: dict[str, Any], lang: str) -> Drawn:
    if d["precision"] is None or not d["reference_ids"]:
        return {"precision_steps": HIDDEN, "precision_layers": HIDDEN}
    b = d["branches"][1]
    out: Drawn = {"precision_steps": shown(figures.steps_figure(b["kl"], b["top1"], d["texts"], b["precision"])),
                  "precision_layers": HIDDEN}
    if b["residual_error"]:
        out["precision_layers"] = shown(figures.layers_figure(b["residual_error"], b["error_entry"], b["residual_step"],
                                                              b["precision"]))
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
    against = t("precision_against", lang, n=d["reference"]) if d["reference"] is not None else t("precision_against_self", lang)
    lines = [t("precision_head", lang, n=d["number"], precision=b["precision"], how=how, against=against)]
    first = b["first_difference"]
    if first is None:
        lines.append(t("precision_same", lang))
    else:
        mine = d["branch_texts"][1]
        lines.append(t("precision_parted", lang, step=first + 1,
                       token=_token(mine[first]) if first < len(mine) else "∅",
                       reference=_token(d["texts"][first]) if first < len(d["texts"]) else "∅"))
    lines.append(t("precision_kl", lang, kl=b["mean_kl"], agree=b["agreement"]))
    if b["residual_error"]:
        entry = b["error_entry"]
        where = t("precision_embedding", lang) if entry == 0 else t("precision_block", lang, i=entry - 1)
        lines.append(t("precision_layers", lang, step=b["residual_step"] + 1, where=where,
                       last=b["residual_error"][-1]))
    lines.append(t("precision_cost", lang, bytes=format_bytes(b["weight_bytes_per_token"]),
                   ref_bytes=format_bytes(ref["weight_bytes_per_token"]),
                   ratio=ref["weight_bytes_per_token"] / max(1, b["weight_bytes_per_token"]),
                   tps=b["tokens_per_s"], ref_tps=ref["tokens_per_s"]))
    return ("" if lang == "zh" else " ").join(lines)


def idle(lang: str, words: str) -> Drawn:
    return {"precision_steps": HIDDEN, "precision_layers": HIDDEN}


VIEW = View("precision", "precision", frozenset({"finished"}), ("precision_md", "precision_steps", "precision_layers"),
            compute, draw, caption, idle, waits="precision_needs_run", busy="precision_after_run")
