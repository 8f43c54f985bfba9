"""Forks as the page makes them, without Gradio: an experiment's button pressed on the run on screen."""

from __future__ import annotations

import dataclasses

from playground.app.experiments import BY_NAME
from playground.app.experiments.causal import with_edit
from playground.app.play import Origin, fork_of
from playground.app.run import Run
from playground.app.session import Session
from tests.app.test_app_run import play


def press(session: Session, lm, experiment: str, action: str, run: Run | None = None, keep: bool = False,
          **values) -> Run:
    """`action` of `experiment` pressed with the widgets' `values` on `run` (the run on screen), played to its end;
    `keep`: the tab's keep box ticked (the fork stacks on what `run` already has)."""
    exp = BY_NAME[experiment]
    button = next(a for a in exp.actions() if a.name == action)
    settings, origin = fork_of(session, run or session.current, lm, exp, button, values, keep)
    return play(session, lm, settings, origin=origin)


def fork_edit(session: Session, lm, edit, run: Run | None = None) -> Run:
    """The causal lab's fork of `run` (the run on screen) with any edit after its own."""
    run = run or session.current
    base = dataclasses.replace(session.run_settings(run), branches="")
    return play(session, lm, dataclasses.replace(base, **with_edit(base, lm, edit).changes),
                origin=Origin(run, "causal"))
