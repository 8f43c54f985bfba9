"""The deep views' sections: a few named groups a newcomer can read (Watch · Look inside · Experiment · The machine ·
Class tools), each one click away, each holding its views as tabs of its own. Only which view sits where; the
views themselves are built by `playground.ui.panel_tabs`, `playground.ui.experiment_tabs` and
`playground.ui.teacher_layout`.

Both tab rows wrap instead of hiding tabs behind Gradio's "⋯" menu, so every section and every tab of the open
section is on screen at any width, and nothing moves when one is picked. A hidden tab's contents are not drawn
(Gradio mounts a tab's children when it opens): the server draws the view of the tab on screen (`session.deep_tab`),
which the page's script sends whenever it changes, by a section or a tab opened (`SECTIONS_JS`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from playground.app import experiments
from playground.app.views import NO_VIEW


@dataclass(frozen=True)
class Section:
    """One section: its tab id (words `section_<name>`, its one-line hint `section_<name>_hint`) and the ids of the
    views' tabs it holds, in order (words `tab_<id>`). A section with no tabs of its own is one page (Class tools)."""

    name: str
    tabs: tuple[str, ...]

    @property
    def elem_id(self) -> str:
        return f"section-{self.name}"


SECTIONS: tuple[Section, ...] = (
    Section("watch", ("inspector", "attention")),  # the run as it was made: what it chose, where it looked
    Section("inside", ("lessons", "positional")),  # how the model works, on the run on screen
    Section("experiment", tuple(e.tab for e in experiments.EXPERIMENTS)),  # fork the run with one change
    Section("machine", ("cache", "card")),  # what it costs and what the model is
    Section("teacher", ()),  # Class tools: the teacher tab itself
)

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
