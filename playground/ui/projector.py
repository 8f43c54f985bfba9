"""Projector mode (`#projector`, the link field `projector`): large type and the settings column hidden, so the live
screen fills a projected screen and reads from the back of a class. A class on the page's root (`pg-projector`,
styled at the end of `assets/page.css`), set whenever the toggle's value changes: by a click or by a link."""

from __future__ import annotations

from typing import Any

PROJECTOR_CLASS = "pg-projector"
PROJECTOR_JS = f"(on) => {{ document.body.classList.toggle('{PROJECTOR_CLASS}', !!on); return on; }}"


def wire_projector(page: Any) -> None:
    """The toggle's value, by a click or from a link on load, switches the page's mode (in the browser only)."""
    toggle = page.component("projector")
    toggle.change(None, toggle, None, js=PROJECTOR_JS, queue=False)
