"""What a tab of the page is: one declared object with its layout, its view, its actions and its words.

Every tab under the live screen is one: a panel (the step inspector, all heads, the KV cache...), the lessons, an
experiment (`playground.app.experiments.base.Experiment`, a tab that also forks runs) and a class tool. Its module
holds everything about it:

    layout   its parts, as data: words, widgets, buttons and the outputs its view draws (the page builds them)
    view     compute / draw / caption of the run on screen (`playground.app.view`); None for a tab of no view
    actions  its buttons: a job measures the run on screen (its result kept on the run for the view to draw)
    words    `tab_<tab>` names it; every label is a words key of the locale files

A module of `playground.app.panels`, `playground.app.experiments` or `playground.app.activities` (a class tool)
that defines `TAB` (or `EXPERIMENT`) is a tab of the page, in its `section` at its `order`
(`playground.app.tabs`). No Gradio here.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from playground.app.run import Run
from playground.app.view import View
from playground.errors import PlaygroundError


class Refused(PlaygroundError):
    """A job (or a fork) the page cannot run; its first argument is a keyed note saying what to do."""


# --- the tab's parts, as data (the page builds the widgets) --------------------------------------------


@dataclass(frozen=True)
class Words:
    """A paragraph of the tab: the words of `keys`, one paragraph each (said again on a language switch)."""

    name: str
    keys: tuple[str, ...]
    elem_id: str | None = None
    classes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Widget:
    """One control. `kind`: "slider", "radio", "dropdown", "textbox", "checkbox" or "number" (`bounded`: `low` its
    minimum, `capped`: `high` its maximum); a textbox may be read-only (`interactive=False`) with a copy button
    (`copy`) or hold at most `max_length` characters; `label`/`info`: word
    keys; `choices(lang)`: (label, value) pairs of a radio or dropdown (said again on a language switch unless
    `relabel` is False: the view sets them). `field`: the run setting it edits (a link opens the page with it set);
    `view`: the tab's view reads it (a move redraws the open view); `follows`: a control of another tab it copies when
    that one moves; `high_of(config)`: its maximum from the model (set when a model loads); `picks`: its value picks
    which of the tab's views is open (the lessons). A control its view reads is read as `reads` says ("text",
    "whole", "count": a whole number above 0, "real", "flag"; None: as the page holds it), a missing or unusable
    value as its default; `on`: the event after which the view redraws ("change", or "submit" for a box); `moved`:
    it counts only when one of its tab's controls moved (else None: the view follows the selected step);
    `of_model(lm, lang)`: its choices follow the visitor's model (None before one loads): set, with its first as its
    value, when a model loads, and said again on a language switch."""

    name: str
    kind: str
    label: str
    elem_id: str
    default: Any = None
    info: str | None = None
    low: float = 0
    high: float = 1
    step: float = 1
    choices: Callable[[str], list[tuple[str, str]]] | None = None
    field: str | None = None
    view: bool = False
    follows: str | None = None
    high_of: Callable[[Any], int] | None = None
    custom: bool = False  # a dropdown that takes a typed value too
    visible: bool = True
    min_width: int | None = None
    scale: int | None = None
    relabel: bool = True
    picks: bool = False
    bounded: bool = True  # a number box with `low` as its minimum (else none: the tab says its range in words)
    capped: bool = False
    precision: int | None = None
    interactive: bool | None = None
    copy: bool = False
    max_length: int | None = None
    reads: str | None = None
    on: str = "change"
    moved: bool = False
    of_model: Callable[[Any, str], list[tuple[str, str]]] | None = None

    def read(self, values: Mapping[str, Any], moved: bool = True) -> Any:
        """This control's value in `values` (the page's, by component name) as its view reads it."""
        value = values.get(self.name, self.default)
        if self.moved and (not moved or values.get(self.name) is None):
            return None
        if self.reads is None:
            return value
        if self.reads == "flag":
            return bool(value)
        if self.reads == "text":
            return value if isinstance(value, str) else self.default if isinstance(self.default, str) else ""
        return _number(value, self.default, self.reads)


def _number(value: Any, default: Any, kind: str) -> Any:
    try:
        number = float(value or 0)
    except (TypeError, ValueError):
        return default
    if kind == "real":
        return number if number and math.isfinite(number) else default
    whole = int(number) if math.isfinite(number) else default
    return whole or default if kind == "count" else whole


def read(widgets: Iterable[Widget], values: Mapping[str, Any], moved: bool = True) -> dict[str, Any]:
    """What a view reads of its controls in `values` (a selection's), each as its widget reads it: a view's own
    defaults, wherever the selection came from."""
    return {w.name: w.read(values, moved) for w in widgets}


@dataclass(frozen=True)
class Row:
    """Widgets side by side (stacked on a phone). `name`: the row is a slot a view (or a tool) shows or hides."""

    parts: tuple[Widget | Action | Stack, ...]
    elem_id: str | None = None
    name: str | None = None
    visible: bool = True
    equal_height: bool = False


@dataclass(frozen=True)
class Stack:
    """Widgets one above the other, as one column of a row (`scale`, `min_width`: its share of the row)."""

    parts: tuple[Widget | Action, ...]
    scale: int = 1
    min_width: int = 320


@dataclass(frozen=True)
class Action:
    """A button. `kind`: "fork" (an experiment's: `run(ForkRequest) -> Fork`, the run on screen again with the
    settings it returns, streamed beside it), "press" (a class tool's: its own handler binds it), "job"
    (`run(JobRequest)`: a generator of `playground.app.jobs.Progress`, then its result, kept on the run on screen as `results[name]` for the view to draw; `needs="model"`: a job on the
    visitor's model, kept on the session for that model) or "stop" (ends the tab's job). `inputs`: the widgets it
    reads; `out`: the Markdown where its progress and refusals go; `progress`: the words key of its progress line
    ({done}, {total}) or `progress(Progress, lang) -> str`."""

    name: str
    kind: str
    label: str
    elem_id: str
    inputs: tuple[str, ...] = ()
    run: Callable[..., Any] | None = None
    out: str | None = None
    progress: str | Callable[[Any, str], str] | None = None
    primary: bool = True
    min_width: int | None = None
    visible: bool = True
    needs: str = "run"
    scale: int | None = None


@dataclass(frozen=True)
class Out:
    """Something the view (or a class tool's handler) draws: "markdown" (with `words` before anything is drawn),
    "html" (a line that carries data for the page's scripts; `initial(lang)`: its first value; `plain`: without
    Gradio's own CSS and click script, a tool's own markup), "plot" (hidden until drawn, unless `visible`), "data" (a
    hidden text the page's scripts read), "state" (what a tool keeps for the visitor's tab, not shown) or "timer"
    (ticks every `every` seconds once a tool starts it)."""

    name: str
    kind: str
    elem_id: str | None = None
    words: str | None = None
    visible: bool | None = None  # None: a plot starts hidden, anything else shown
    initial: Callable[[str], str] | None = None
    plain: bool = False
    every: float = 1.0


Part = Words | Widget | Row | Stack | Action | Out


@dataclass(frozen=True)
class JobRequest:
    """A job on the run on screen (`run`; None for a job on the visitor's model): `runs` are the tab's runs (a job
    may read the run's origin), `lm` the model, `step` the selected step (None: the newest), `stop` set when the
    visitor presses Stop."""

    run: Run | None
    runs: Sequence[Run]
    lm: Any
    values: Mapping[str, Any]
    step: int | None
    stop: threading.Event


# --- the tab -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Tab:
    """One tab of the page (see the module's docstring). `tab`: its id (words `tab_<tab>`, the views' tab the page
    reports open); `section`: the section that holds it (`playground.ui.sections`); `order`: its place there;
    `views`: a tab of several views, one open at a time, picked by its `picks` widget (the lessons: by name; `view`
    is the first); `needs_run`: the words when a job has no finished run to measure. A tab of no view (a class tool)
    is shown as one part of its section's page (`#<elem_id>`), beside the section's other tools."""

    tab: str
    elem_id: str
    section: str
    order: int
    layout: tuple[Part, ...]
    view: View | None
    views: Mapping[str, View] | None = None
    needs_run: str = "nothing_yet"

    def __post_init__(self) -> None:
        names = {p.name for p in self.parts()} | {r.name for r in self.layout if isinstance(r, Row) and r.name}
        for view in self.all_views():
            missing = set(view.slots) - names
            if missing:
                raise ValueError(f"tab {self.tab!r}: its view draws {sorted(missing)}, which its layout lacks")
        for action in self.actions():
            unknown = set(action.inputs) - {w.name for w in self.widgets()}
            if unknown:
                raise ValueError(f"tab {self.tab!r}: {action.name} reads {sorted(unknown)}, no widget of it")

    def parts(self) -> Iterator[Words | Widget | Action | Out]:
        """Every part of the layout, rows and their stacks opened, in order."""
        for part in self.layout:
            for inner in part.parts if isinstance(part, Row) else (part,):
                yield from inner.parts if isinstance(inner, Stack) else (inner,)

    def widgets(self) -> list[Widget]:
        return [p for p in self.parts() if isinstance(p, Widget)]

    def actions(self) -> list[Action]:
        return [p for p in self.parts() if isinstance(p, Action)]

    def all_views(self) -> list[View]:
        """Its views: the one it has, or each of the several it picks from."""
        if self.views is not None:
            return list(self.views.values())
        return [self.view] if self.view is not None else []

    def open_view(self, pick: str | None = None) -> View | None:
        """The view on screen when the tab is open: the picked one (an unknown pick: the first)."""
        if self.views is not None:
            return self.views.get(pick or "", self.view)
        return self.view

    def picker(self) -> Widget | None:
        """The widget whose value picks the open view, if the tab has several."""
        return next((w for w in self.widgets() if w.picks), None)

    def view_widgets(self) -> list[Widget]:
        """The widgets its view reads (their values reach it as `Selection.values`)."""
        return [w for w in self.widgets() if w.view]
