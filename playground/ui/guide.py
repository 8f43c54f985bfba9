"""The guided path ("Start here", `#start-here`): a short ordered walk through the page on the run on screen —
generate, click a token, the temperature, attention, the KV cache, a lab fork — one sentence a step, with Back and
Next. It only moves the page (opens a section and its tab, scrolls to the control and highlights it), so it runs in
the browser (`assets/guide.js`); this module says the steps and writes them into the entry's HTML in one language
(the language switch writes it again).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from playground.app.words import t
from playground.ui.sections import section_of

ASSETS = Path(__file__).resolve().parent / "assets"


@dataclass(frozen=True)
class Step:
    """One step: its words (`guide_<name>`), the element it points at (a CSS selector) and the views' tab it opens
    first (None: the control is on the page already)."""

    name: str
    target: str
    tab: str | None = None


STEPS: tuple[Step, ...] = (
    Step("generate", "#generate-btn"),
    Step("token", "#token-stream"),
    Step("temperature", "#mode"),
    Step("attention", "#attention-tab", tab="attention"),
    Step("cache", "#rerun-btn", tab="cache"),
    Step("fork", "#lab-ablate-head", tab="lab"),
)

GUIDE_JS = (ASSETS / "guide.js").read_text(encoding="utf-8")  # opens tabs with sections.js's `pgOpenTab`


def steps(lang: str) -> list[dict[str, str | None]]:
    """The steps as the browser reads them: words, target, and the section and tab to open."""
    return [{"text": t(f"guide_{s.name}", lang), "target": s.target, "tab": s.tab,
             "section": section_of(s.tab) if s.tab else None} for s in STEPS]


def guide_html(lang: str) -> str:
    """The entry's HTML in `lang`: the Start here button and the (closed) step card with every step's words."""
    a = html.escape
    data = a(json.dumps(steps(lang), ensure_ascii=False))
    return (f'<button type="button" class="pg-start-btn" aria-expanded="false">▶ {a(t("start_here", lang))}</button>'
            f'<div class="pg-guide" role="dialog" aria-label="{a(t("guide_title", lang))}" hidden data-steps="{data}"'
            f' data-count="{a(t("guide_step", lang))}" data-next="{a(t("guide_next", lang))}"'
            f' data-done="{a(t("guide_done", lang))}">'
            f'<div class="pg-guide-head"><strong>{a(t("guide_title", lang))}</strong>'
            f'<span class="pg-guide-count"></span>'
            f'<button type="button" class="pg-guide-x" data-act="close" aria-label="{a(t("guide_close", lang))}"'
            f' title="{a(t("guide_close", lang))}">×</button></div>'
            f'<p class="pg-guide-text"></p>'
            f'<div class="pg-guide-buttons"><button type="button" data-act="back">{a(t("guide_back", lang))}</button>'
            f'<button type="button" data-act="next" class="primary">{a(t("guide_next", lang))}</button></div></div>')
