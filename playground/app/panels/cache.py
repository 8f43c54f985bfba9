"""The KV cache: what the cache held at the selected step, its growth over the run, and (once measured on the run)
the run again without the cache, timed (a job on the run: "Run again without the cache")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from playground import viz
from playground.app import cache_rerun, describe, noise
from playground.app.jobs import Progress
from playground.app.tab import Action, JobRequest, Out, Tab
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run = ctx.run
    step = run.step(sel.step)
    cache = dict(run.events[min(step, len(run.events) - 1)].cache)
    return {"step": step, "cache": cache, "growth": describe.growth_series(run.events, run.step_number),
            "rerun": run.results.get("rerun"), "reused": describe.reused_bytes(cache)}


def draw(data: dict[str, Any], lang: str) -> Drawn:
    growth = viz.cache_growth(*data["growth"], lang=lang, reused=data.get("reused", (0, 0)))
    return {"growth": Slot(growth), **rerun_slots(data["rerun"], lang)}


def rerun_slots(result: Any, lang: str) -> Drawn:
    """The run again with and without the cache (`playground.app.cache_rerun`), when it was measured."""
    if result is None:
        return {"compare": HIDDEN, "compare_md": Slot("")}
    gap = "" if lang == "zh" else " "
    c, u = result.spreads["cached"], result.spreads["uncached"]
    note = t("rerun_note", lang, n=int(c["total_ms"]["n"]),
             verdict=t("same_tokens" if result.same_tokens else "different_tokens", lang))
    for key, words in (("prefill_ms", "rerun_spread_prefill"), ("decode_ms_per_token", "rerun_spread_decode")):
        note += gap + t(words, lang, c=c[key]["median"], c_lo=c[key]["min"], c_hi=c[key]["max"], u=u[key]["median"],
                        u_lo=u[key]["min"], u_hi=u[key]["max"])
        note += gap + noise.verdict(c[key], u[key], None, lang)
    note += noise.busy_words(result.load, lang)
    if result.partial:
        note += gap + t("rerun_partial", lang, steps=result.steps, total=result.total_steps,
                        tflops=result.full_uncached_flops / 1e12, seconds=result.full_uncached_seconds)
    return {"compare": shown(viz.timing_comparison(result.cached, result.uncached, lang=lang,
                                                   spreads=(c, u))),
            "compare_md": Slot(note)}


def caption(data: dict[str, Any], lang: str) -> str:
    return describe.cache_markdown(data["cache"], lang)


def idle(lang: str, words: str) -> Drawn:
    return {"growth": Slot(viz.cache_growth([], [], [], [], lang=lang)), **rerun_slots(None, lang)}


VIEW = View("cache", "cache", frozenset({"run", "step"}), ("kv", "growth", "compare_md", "compare"), compute, draw,
            caption, idle,
            waits="cache_intro")


def rerun(req: JobRequest) -> Iterator[Any]:
    """The run on screen's request again with and without the cache, back to back, timed fresh (the live run's
    timings include pacing and painting); long runs are timed in part. Its result is the run's `results["rerun"]`."""
    run = req.run
    knobs = run.cfg.replace(capture_attention=False, attention_layers=None, top_candidates=0)
    forced = run.stream_ids[: len(run.inherited) + len(run.forced)]
    return cache_rerun.rerun_work(req.lm, run.prompt_ids, knobs, forced, len(run.path))


def rerun_progress(p: Progress, lang: str) -> str:
    if p.stage == "warmup":
        return t("rerun_warmup", lang)
    return t("rerun_progress", lang, mode=t(f"rerun_mode_{p.stage}", lang), done=p.done, total=p.total,
             seconds=p.seconds)


TAB = Tab(tab="cache", elem_id="cache-tab", section="machine", order=10, view=VIEW, needs_run="generate_first", layout=(
    Out("kv", "markdown", "kv-stats", words="cache_intro"),
    Out("growth", "plot", "cache-growth", visible=True),
    Action("rerun", "job", "rerun", "rerun-btn", run=rerun, out="compare_md", progress=rerun_progress, primary=False),
    Out("compare_md", "markdown", "compare-md"),
    Out("compare", "plot", "compare-plot", visible=True)))
