"""The KV cache: what the cache held at the selected step, its growth over the run, and (once measured on the run)
the run again without the cache, timed."""

from __future__ import annotations

from typing import Any

from playground import viz
from playground.app import describe
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run = ctx.run
    step = run.step(sel.step)
    return {"step": step, "cache": dict(run.events[min(step, len(run.events) - 1)].cache),
            "growth": describe.growth_series(run.events, run.step_number), "rerun": run.results.get("rerun")}


def draw(data: dict[str, Any], lang: str) -> Drawn:
    return {"growth": Slot(viz.cache_growth(*data["growth"], lang=lang)), **rerun_slots(data["rerun"], lang)}


def rerun_slots(result: Any, lang: str) -> Drawn:
    """The run again with and without the cache (`playground.app.cache_rerun`), when it was measured."""
    if result is None:
        return {"compare": HIDDEN, "compare_md": Slot("")}
    note = t("rerun_note", lang, verdict=t("same_tokens" if result.same_tokens else "different_tokens", lang))
    if result.partial:
        note += " " + t("rerun_partial", lang, steps=result.steps, total=result.total_steps,
                        tflops=result.full_uncached_flops / 1e12, seconds=result.full_uncached_seconds)
    return {"compare": shown(viz.timing_comparison(result.cached, result.uncached, lang=lang)),
            "compare_md": Slot(note)}


def caption(data: dict[str, Any], lang: str) -> str:
    return describe.cache_markdown(data["cache"], lang)


def idle(lang: str, words: str) -> Drawn:
    return {"growth": Slot(viz.cache_growth([], [], [], [], lang=lang)), **rerun_slots(None, lang)}


VIEW = View("cache", "cache", frozenset({"run", "step"}), ("kv", "growth", "compare_md", "compare"), compute, draw,
            caption, idle,
            waits="cache_intro")
