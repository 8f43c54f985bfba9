"""The KV cache: what the cache held at the selected step, and its growth over the run."""

from __future__ import annotations

from typing import Any

from playground import viz
from playground.app import describe
from playground.app.views.base import Context, Drawn, Selection, Slot, View


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run = ctx.run
    step = run.step(sel.step)
    return {"step": step, "cache": dict(run.events[min(step, len(run.events) - 1)].cache),
            "growth": describe.growth_series(run.events, run.step_number)}


def draw(data: dict[str, Any], lang: str) -> Drawn:
    return {"growth": Slot(viz.cache_growth(*data["growth"]))}


def caption(data: dict[str, Any], lang: str) -> str:
    return describe.cache_markdown(data["cache"], lang)


def idle(lang: str, words: str) -> Drawn:
    return {"growth": Slot(viz.cache_growth([], [], [], []))}


VIEW = View("cache", "cache", frozenset({"run", "step"}), ("kv", "growth"), compute, draw, caption, idle,
            waits="cache_intro")
