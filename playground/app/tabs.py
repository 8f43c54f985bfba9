"""Every tab of the page, found in its package: the panels (`playground.app.panels`), the experiments
(`playground.app.experiments`) and the class activities (`playground.app.activities`), each one declared `Tab`
(`playground.app.tab`). The one registry the page builds, serves and redraws from; nothing else lists tabs.

A module of those packages that defines `TAB` (an experiment: `EXPERIMENT`) is a tab, in its section at its order.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence

from playground.app import experiments
from playground.app.tab import Tab

# The page's sections, in order (their words: `section_<name>`; `playground.ui.sections` says how each is shown).
SECTIONS = ("watch", "inside", "experiment", "machine", "teacher")
PACKAGES = ("playground.app.panels", "playground.app.activities")  # besides the experiments (their own package)


def _found() -> tuple[Tab, ...]:
    found: list[Tab] = list(experiments.EXPERIMENTS)
    for package in PACKAGES:
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            tab = getattr(importlib.import_module(f"{package}.{info.name}"), "TAB", None)
            if isinstance(tab, Tab):
                found.append(tab)
    return checked(found)


def checked(found: Sequence[Tab]) -> tuple[Tab, ...]:
    """`found` in the page's order (by section, then order), each in a known section and with an id of its own."""
    for tab in found:
        if tab.section not in SECTIONS:
            raise ValueError(f"tab {tab.tab!r}: no section {tab.section!r}; the sections are {SECTIONS}")
    ids = [tab.tab for tab in found]
    if len(ids) != len(set(ids)):
        raise ValueError(f"two tabs share an id: {sorted(i for i in ids if ids.count(i) > 1)}")
    return tuple(sorted(found, key=lambda tab: (SECTIONS.index(tab.section), tab.order, tab.tab)))


TABS: tuple[Tab, ...] = _found()
BY_TAB: dict[str, Tab] = {tab.tab: tab for tab in TABS}


def in_section(section: str) -> tuple[Tab, ...]:
    """The tabs `section` holds, in order."""
    return tuple(tab for tab in TABS if tab.section == section)


__all__ = ["BY_TAB", "SECTIONS", "TABS", "Tab", "checked", "in_section"]
