"""The experiments of the page, one module each (what one is: `base`), found here in their tabs' order.

A module of this package that defines `EXPERIMENT` is an experiment: its settings join the run's (links carry them),
its tab joins the page, its view joins the views. Adding one is its module, its figure and its words in the locale
files; nothing else names it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from playground.app.experiments.base import Experiment
from playground.app.fields import Field
from playground.notes import Note


def _found() -> tuple[Experiment, ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        experiment = getattr(importlib.import_module(f"{__name__}.{info.name}"), "EXPERIMENT", None)
        if isinstance(experiment, Experiment):
            found.append(experiment)
    return tuple(sorted(found, key=lambda e: (e.order, e.name)))


EXPERIMENTS: tuple[Experiment, ...] = _found()
BY_NAME: dict[str, Experiment] = {e.name: e for e in EXPERIMENTS}
FIELDS: tuple[Field, ...] = tuple(f for e in EXPERIMENTS for f in e.fields)


def badge(settings: Any) -> list[Note]:
    """What every experiment changes in a run with `settings`, in tab order ([] for a plain run)."""
    return [words for e in EXPERIMENTS for words in e.badge(settings)]


def badge_of(run: Any) -> list[Note]:
    """What every experiment changed in `run`, as it ran: an experiment its settings asked for that did not run (the
    lenient pass dropped it, with a note) is not named."""
    return [words for e in EXPERIMENTS if e.did(run) for words in e.badge(run.settings)]


def others(settings: Any, experiment: Experiment) -> list[Experiment]:
    """The experiments other than `experiment` that `settings` ask for (what a fork of that run would stack)."""
    return [e for e in EXPERIMENTS if e is not experiment and e.is_on(settings)]


def active(settings: Any) -> list[Experiment]:
    """The experiments `settings` ask for."""
    return [e for e in EXPERIMENTS if e.is_on(settings)]


__all__ = ["BY_NAME", "EXPERIMENTS", "FIELDS", "Experiment", "active", "badge", "badge_of", "others"]
