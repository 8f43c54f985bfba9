"""The deep views' sections: a few named groups a newcomer can read (Watch · Look inside · Experiment · The machine ·
Class tools), each one click away, each holding its tabs as tabs of its own. Which tab sits where is the tab's own
declaration (its `section` and `order`: `playground.app.tabs`); the tabs are built by `playground.ui.tabs`, Class
tools by `playground.ui.teacher_layout`.

Both tab rows wrap instead of hiding tabs behind Gradio's "⋯" menu, so every section and every tab of the open
section is on screen at any width, and nothing moves when one is picked. A hidden tab's contents are not drawn
(Gradio mounts a tab's children when it opens): the server draws the view of the tab on screen (`session.deep_tab`),
which the page's script sends whenever it changes, by a section or a tab opened (`SECTIONS_JS`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from playground.app import tabs as registry
from playground.app.views import NO_VIEW


@dataclass(frozen=True)
class Section:
    """One section: its tab id (words `section_<name>`, its one-line hint `section_<name>_hint`) and the ids of the
    views' tabs it holds, in order (words `tab_<id>`). A section with no views' tabs is one page (Class tools: its
    tools, tabs of no view, one after another)."""

    name: str
    tabs: tuple[str, ...]

    @property
    def elem_id(self) -> str:
        return f"section-{self.name}"


# watch: the run as it was made (what it chose, where it looked); inside: how the model works, on the run on screen;
# experiment: fork the run with one change; machine: what it costs and what the model is; teacher: Class tools, one
# page (the teacher tab itself)
SECTIONS: tuple[Section, ...] = tuple(Section(name, tuple(tab.tab for tab in registry.in_section(name) if tab.all_views()))
                                      for name in registry.SECTIONS)

SECTION_OF: dict[str, str] = {tab: s.name for s in SECTIONS for tab in s.tabs}

# Sends the views' tab on screen when it changes (a section opens on the tab it showed last; Gradio mounts its tabs
# then, so they are waited for); `pgOpenTab(section, tab)` for the guided path.
# A section of no views sends `NO_VIEW`: nothing is drawn while it is open.
SECTIONS_JS = (f"const VIEWLESS = {json.dumps([s.name for s in SECTIONS if not s.tabs])};\n"
               f"const NO_VIEW = {json.dumps(NO_VIEW)};\n"
               + (Path(__file__).resolve().parent / "assets" / "sections.js").read_text(encoding="utf-8"))


def section_of(tab: str) -> str | None:
    """The section that holds the views' tab `tab` (None: not a view's tab)."""
    return SECTION_OF.get(tab)
