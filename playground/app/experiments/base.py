"""What an experiment is: one object with its run settings, its tab's controls, its fork, its view and its words.

An experiment changes one thing about a run (an edit of the model, the KV cache's policy, the weights' precision,
a drafter) and compares the forked run with the run it came from. Its module holds everything about it:

    fields   its run settings (rows of `playground.app.fields`): links carry them, its fork sets them, Generate never
    layout   its tab, as data: words, widgets, the buttons (a fork, a job, a stop) and the outputs its view draws
    view     compute / draw / caption of the run on screen (`playground.app.view`)
    badge    what it changes in a run, as keyed words ([] for a run it does not touch)

Its tab's parts (`Words`, `Widget`, `Row`, `Action`, `Out`) are every tab's (`playground.app.tab`). The page builds the
tab from the layout and serves every fork with one handler (`playground.ui.experiments`); the
session knows nothing of experiments. No Gradio here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from playground.app.fields import Field, Lenient
from playground.app.run import Run
from playground.app.tab import Action, JobRequest, Out, Part, Refused, Row, Tab, Widget, Words
from playground.app.view import View
from playground.notes import Note


class ForkError(Refused):
    """A fork or job the page cannot run; its first argument is a keyed note saying what to do."""


__all__ = ["Action", "Experiment", "Fork", "ForkError", "ForkRequest", "JobRequest", "Out", "Part", "Row", "Widget",
           "Words", "compared_with", "kept_in_config"]


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


# --- the experiment ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Experiment(Tab):
    """One experiment (see the module's docstring): a tab of the Experiment section that also forks runs. `tab`: its
    tab's id (words `tab_<tab>`); `order`: its tab's place among the experiments' (and of its rules in the lenient
    pass); `needs_run`: the words when there is no finished run to fork; `lenient`: its rule over its fields together
    (each field's own rule runs first)."""

    name: str
    section: str = "experiment"
    fields: tuple[Field, ...]
    view: View
    badge: Callable[[Any], list[Note]]
    config: Callable[[Any], dict[str, Any]]  # the run settings -> GenerationConfig keywords ({} when it is off)
    needs_run: str
    lenient: Lenient | None = None
    ran: Callable[[Run], bool] | None = None  # whether a run did what its settings ask (default: `kept_in_config`)

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
