"""What an experiment is: one object with its run settings, its tab's controls, its fork, its view and its words.

An experiment changes one thing about a run (an edit of the model, the KV cache's policy, the weights' precision,
a drafter) and compares the forked run with the run it came from. Its module holds everything about it:

    fields   its run settings (rows of `playground.app.fields`): links carry them, its fork sets them, Generate never
    layout   its tab, as data: words, widgets, the buttons (a fork, a job, a stop) and the outputs its view draws
    view     compute / draw / caption of the run on screen (`playground.app.view`)
    badge    what it changes in a run, as keyed words ([] for a run it does not touch)

The page builds the tab from the layout and serves every fork with one handler (`playground.ui.experiments`); the
session knows nothing of experiments. No Gradio here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from playground.app.fields import Field, Lenient
from playground.app.run import Run
from playground.app.view import View
from playground.errors import PlaygroundError
from playground.notes import Note


class ForkError(PlaygroundError):
    """A fork or job the page cannot run; its first argument is a keyed note saying what to do."""


# --- the tab's parts, as data (the page builds the widgets) --------------------------------------------


@dataclass(frozen=True)
class Words:
    """A paragraph of the tab: the words of `keys`, one paragraph each (said again on a language switch)."""

    name: str
    keys: tuple[str, ...]
    elem_id: str


@dataclass(frozen=True)
class Widget:
    """One control. `kind`: "slider", "radio", "dropdown", "textbox" or "checkbox"; `label`/`info`: word keys;
    `choices(lang)`: (label, value) pairs of a radio or dropdown. `field`: the run setting it edits (a link opens the
    page with it set); `view`: the experiment's view reads it (a move redraws the open view); `follows`: a control of
    another tab it copies when that one moves, its maximum from the model (`high_of(config)`)."""

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


@dataclass(frozen=True)
class Row:
    """Widgets side by side (stacked on a phone)."""

    parts: tuple[Widget | Action, ...]
    elem_id: str | None = None


@dataclass(frozen=True)
class Action:
    """A button. `kind`: "fork" (`run(ForkRequest) -> Fork`: the run on screen again with the settings it returns,
    streamed beside it), "job" (`run(JobRequest)`: a generator of `playground.app.jobs.Progress`, then its result,
    kept on the run on screen as `results[name]` for the view to draw) or "stop" (ends the tab's job). `inputs`: the
    widgets it reads; `out`: the Markdown where its progress and refusals go; `progress(Progress, lang)`: its
    progress line."""

    name: str
    kind: str
    label: str
    elem_id: str
    inputs: tuple[str, ...] = ()
    run: Callable[..., Any] | None = None
    out: str | None = None
    progress: str | None = None  # the words key of a job's progress line ({done}, {total})
    primary: bool = True
    min_width: int | None = None


@dataclass(frozen=True)
class Out:
    """Something the view draws: "markdown" (with `words` before anything is drawn), "html" (a line that carries
    data for the page's scripts) or "plot"."""

    name: str
    kind: str
    elem_id: str
    words: str | None = None


Part = Words | Widget | Row | Action | Out


# --- what a fork and a job receive and return ---------------------------------------------------------


@dataclass(frozen=True)
class ForkRequest:
    """A fork of `run` (the finished run on screen): `settings` reproduce it (its seed, no branches), `lm` is its
    model, `values` the fork's widgets by name."""

    run: Run
    settings: Any
    lm: Any
    values: Mapping[str, Any]


@dataclass(frozen=True)
class Fork:
    """A fork's answer: the settings it changes, and what it measured on the way (kept on the forked run's
    `results`, for its view to draw; a keyed note among them, e.g. the steering vector's norm, is also said under the
    button at once, while the fork streams)."""

    changes: dict[str, Any]
    results: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobRequest:
    """A job on the run on screen: `runs` are the tab's runs (a job may read the run's origin), `step` the selected
    step (None: the newest), `stop` set when the visitor presses Stop."""

    run: Run
    runs: Sequence[Run]
    lm: Any
    values: Mapping[str, Any]
    step: int | None
    stop: threading.Event


# --- the experiment ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Experiment:
    """One experiment (see the module's docstring). `tab`: its tab's id (words `tab_<tab>`); `order`: its tab's place
    among the experiments' (and of its rules in the lenient pass); `needs_run`: the words when there is no finished
    run to fork; `lenient`: its rule over its fields together (each field's own rule runs first)."""

    name: str
    tab: str
    elem_id: str
    order: int
    fields: tuple[Field, ...]
    layout: tuple[Part, ...]
    view: View
    badge: Callable[[Any], list[Note]]
    config: Callable[[Any], dict[str, Any]]  # the run settings -> GenerationConfig keywords ({} when it is off)
    needs_run: str
    lenient: Lenient | None = None
    ran: Callable[[Run], bool] | None = None  # whether a run did what its settings ask (default: `kept_in_config`)

    def __post_init__(self) -> None:
        names = {p.name for p in self.parts()}
        missing = set(self.view.slots) - names
        if missing:
            raise ValueError(f"experiment {self.name!r}: its view draws {sorted(missing)}, which its layout lacks")
        for action in self.actions():
            unknown = set(action.inputs) - {w.name for w in self.widgets()}
            if unknown:
                raise ValueError(f"experiment {self.name!r}: {action.name} reads {sorted(unknown)}, no widget of it")

    def parts(self) -> Iterator[Words | Widget | Action | Out]:
        """Every part of the layout, rows opened, in order."""
        for part in self.layout:
            yield from part.parts if isinstance(part, Row) else (part,)

    def widgets(self) -> list[Widget]:
        return [p for p in self.parts() if isinstance(p, Widget)]

    def actions(self) -> list[Action]:
        return [p for p in self.parts() if isinstance(p, Action)]

    def view_controls(self) -> tuple[str, ...]:
        """The widgets its view reads (their values reach it as `Selection.extra`)."""
        return tuple(w.name for w in self.widgets() if w.view)

    def is_on(self, settings: Any) -> bool:
        """Whether `settings` ask for this experiment (any of its fields away from its default)."""
        return any(getattr(settings, f.name) != f.default for f in self.fields)

    def did(self, run: Run) -> bool:
        """Whether `run` asked for this experiment and did it: a change the lenient pass dropped (a drafter that
        cannot run beside a cache policy, a precision this build lacks) never ran, and no badge names it."""
        if not self.is_on(run.settings):
            return False
        if self.ran is not None:
            return self.ran(run)
        try:
            return kept_in_config(self.config(run.settings), run.cfg)
        except ValueError:  # settings that do not parse ran as nothing (the link's note said so)
            return False


def kept_in_config(asked: Mapping[str, Any], cfg: Any) -> bool:
    """Whether the run's config (as run, after the lenient pass) still holds every keyword the settings asked for:
    the same value, or for a list (edits) as many items."""
    for name, value in asked.items():
        got = getattr(cfg, name, None)
        if isinstance(value, (list, tuple)):
            if len(got or ()) != len(value):
                return False
        elif got != value:
            return False
    return True


def compared_with(run: Run, runs: Sequence[Run]) -> Run | None:
    """The finished run `run` is compared with: its origin, the run it forked from (a branch's origin stands in for
    its own: a fork reruns the request from its start), among the tab's `runs`; None when it has none or the origin
    has left the tab's history."""
    by_number = {r.number: r for r in runs}
    origin = by_number.get(run.origin) if run.origin is not None else None
    while origin is not None and origin.branch_of is not None:
        origin = by_number.get(origin.origin) if origin.origin is not None else None
    if origin is None or origin.running or not origin.path or origin.prompt_ids != run.prompt_ids:
        return None
    return origin
