"""The guided path ("Start here", `#start-here`): a short ordered walk through the page on the run on screen —
generate, the prompt's tokens, click a token, the temperature, attention, the KV cache, a lab fork of the head that
matters, the class game — one sentence a step, with Back and Next. It only moves the page (opens a section and its
tab, scrolls the control and what it is about into the window above the card, highlights it), so it runs in the
browser (`assets/guide.js`); this module says the steps and writes them into the entry's HTML in one language (the
language switch writes it again).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playground.app.words import t
from playground.ui.sections import section_of

ASSETS = Path(__file__).resolve().parent / "assets"


@dataclass(frozen=True)
class Step:
    """One step: its words (`guide_<name>`), the element it points at (a CSS selector), the views' tab it opens
    first (None: the control is on the page already) or, for a section of no tabs (Class tools), that section.
    `keep`: what stays in the window with it, above the card (the stream it is about, the result its button writes).
    `live`: a mark the page's view writes for the run on screen (data-run, and the values of `sets`); the step
    shows the mark's line under its words and sets each slider of `sets` (selector, the mark's data key) to it."""

    name: str
    target: str
    tab: str | None = None
    section: str | None = None
    keep: tuple[str, ...] = ()
    live: str | None = None
    sets: tuple[tuple[str, str], ...] = ()


STEPS: tuple[Step, ...] = (
    Step("generate", "#generate-btn", keep=("#token-stream",)),
    Step("tokens", "#prompt-tokens", keep=("#prompt",)),
    Step("token", "#token-stream", keep=("#step-panels",)),
    Step("temperature", "#mode", keep=("#token-stream",)),
    Step("attention", "#attention-tab", tab="attention"),
    Step("cache", "#rerun-btn", tab="cache", keep=("#compare-md", "#compare-plot")),
    # the head that adds the most to the selected token of the run on screen (the causal lab's attribution)
    Step("fork", "#lab-ablate-head", tab="lab", keep=("#lab-key-head", "#lab-head"), live="#lab-key-head .pg-key-head",
         sets=(("#lab-layer", "layer"), ("#lab-head", "head"))),
    Step("game", "#game-start-btn", section="teacher", keep=("#game",)),
)

GUIDE_JS = (ASSETS / "guide.js").read_text(encoding="utf-8")  # opens tabs with sections.js's `pgOpenTab`


def steps(lang: str) -> list[dict[str, Any]]:
    """The steps as the browser reads them: words, target, the section and tab to open, what stays in view, the
    live mark and the sliders it sets."""
    return [{"text": t(f"guide_{s.name}", lang), "target": s.target, "tab": s.tab,
             "section": section_of(s.tab) if s.tab else s.section, "keep": list(s.keep), "live": s.live,
             "sets": [list(pair) for pair in s.sets]} for s in STEPS]


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
            f'<p class="pg-guide-text"></p><p class="pg-guide-live" hidden></p>'
            f'<div class="pg-guide-buttons"><button type="button" data-act="back">{a(t("guide_back", lang))}</button>'
            f'<button type="button" data-act="next" class="primary">{a(t("guide_next", lang))}</button></div></div>')
