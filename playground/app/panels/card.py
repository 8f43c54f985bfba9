"""The model card: the loaded model's structure in a table (the checkpoint's place on the server never shown)."""

from __future__ import annotations

from typing import Any

from playground.app import describe
from playground.app.tab import Out, Tab
from playground.app.view import Context, Drawn, Selection, Slot, View


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    info = describe.card_info(ctx.lm, ctx.lang)
    info.pop("path", None)
    return {"info": info, "name": ctx.model or ""}


def draw(data: dict[str, Any], lang: str) -> Drawn:
    return {}


def caption(data: dict[str, Any], lang: str) -> str:
    return describe.model_card_html(data["info"], data["name"], lang)


def idle(lang: str, words: str) -> Drawn:
    return {"card": Slot()}  # before a model loads, the card stays as the load left it


VIEW = View("card", "card", frozenset({"model"}), ("card",), compute, draw, caption, idle)

TAB = Tab(tab="card", elem_id="card-tab", section="machine", order=20, view=VIEW,
          layout=(Out("card", "html", "model-card"),))
