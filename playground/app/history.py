"""A tab's runs in words: the history (each run with its short label, newest first), the badge of what the run on
screen changes from a plain run, and the live screen's branch comparison. No Gradio here.

    run 7 · ablate head 23.4 · from run 6          (a fork: what it changed, and the run it forked from)
    run 8 · branch at step 4 · from run 7          (a branch: the step it continues from)
    run 9                                          (a plain run: Generate pressed again is a run of its own)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.app import experiments
from playground.app.notes import render
from playground.app.play import fork_base
from playground.app.run import Run
from playground.app.session import MAX_RUNS_PER_SESSION, Session
from playground.app.words import t

SEPARATOR = " · "


@dataclass(frozen=True)
class Entry:
    """One run of the history as the page lists it."""

    number: int
    label: str
    current: bool
    running: bool


def badge(run: Run | None, lang: str) -> str:
    """What the run changed from a plain run, as it ran ("int4 weights · window 16 · drafted by prompt lookup"); '' for
    a plain run or none. A change its settings asked for that did not run is not named (its note says why)."""
    if run is None:
        return ""
    return SEPARATOR.join(render(words, lang) for words in experiments.badge_of(run))


def label(run: Run, lang: str, model: str | None = None) -> str:
    """The run's short label: its number, what it changed from its origin and the run it came from; its model when
    that is not `model` (the tab's)."""
    parts = [t("run_label", lang, n=run.number), *(render(words, lang) for words in run.about)]
    if run.origin is not None:
        parts.append(t("history_from", lang, n=run.origin))
    if model is not None and run.settings.model != model:
        parts.append(run.settings.model)
    return SEPARATOR.join(parts)


def entries(session: Session, lang: str) -> list[Entry]:
    """The history, newest first."""
    current = session.current
    return [Entry(run.number, label(run, lang, session.model), run is current, run.running)
            for run in reversed(session.runs)]


def gone(session: Session, lang: str) -> str:
    """The words for the runs that left the history ('' while none has)."""
    n = session.gone
    if not n:
        return ""
    return t("history_gone_one" if n == 1 else "history_gone", lang, n=n, keep=MAX_RUNS_PER_SESSION)


def fork_line(session: Session, experiment: Any, keep: bool, lang: str) -> str:
    """What `experiment`'s fork of the run on screen keeps, said before the press: '' when the run on screen has no
    other lab's change (or there is none, or it still runs); otherwise those changes, and the run the fork starts
    from (by default the plain run, `play.fork_base`) or, with `keep`, that it keeps them."""
    run = session.current
    if run is None or run.running:
        return ""
    stacked = experiments.others(run.settings, experiment)
    if not stacked:
        return ""
    words = SEPARATOR.join(render(w, lang) for e in stacked for w in e.badge(run.settings))
    if keep:
        return t("fork_kept", lang, n=run.number, words=words)
    base, _ = fork_base(session, run, experiment)
    if base is run:
        return t("fork_from_gone", lang, n=run.number, words=words)
    return t("fork_from", lang, n=run.number, words=words, base=base.number)


def branch_rows(session: Session, run: Run, lang: str) -> list[dict[str, Any]]:
    """The live screen's branch comparison of `run`, each row with what its run changed from a plain run."""
    return session.branches(run, lambda r: badge(r, lang))
