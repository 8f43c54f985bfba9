"""Every tab's view of the run (see `playground.app.view`; the tabs: `playground.app.tabs`), and the three steps the
page takes for whichever is open: which view (`open_view`), its numbers (`compute`, on the torch thread) and its
slots (`draw`). No Gradio here.

    view = open_view(session.deep_tab, session.lesson)
    data = compute(view, ctx, selection)      # model work
    slots = draw(view, data, lang)            # {component name: Slot}
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from typing import Any

from playground.app import tabs as registry
from playground.app.session import Session
from playground.app.view import HIDDEN, KEEP, Context, Drawn, Selection, Slot, View, Waiting, shown
from playground.app.words import t
from playground.generation.engine import drain

__all__ = ["HIDDEN", "KEEP", "NO_VIEW", "PANELS", "TABS", "Context", "Drawn", "Selection", "Slot", "View",
           "Waiting", "all_views", "closed_views", "compute", "context_for", "draw", "open_view", "pending", "reads_run",
           "shown", "show", "slices", "slot_names", "waiting"]

# the tabs with a view, in the page's order, by id; the view of each (a tab of several: its first)
TABS = tuple(tab.tab for tab in registry.TABS if tab.all_views())
PANELS: dict[str, View] = {tab.tab: tab.view for tab in registry.TABS if tab.view is not None and tab.views is None}
NO_VIEW = "none"  # what the page says when a section of no views is open (Class tools): nothing to draw


def model_sliders() -> tuple[str, ...]:
    """The sliders whose range is the model's (a layer, a head), of every tab."""
    return tuple(w.name for tab in registry.TABS for w in tab.widgets() if w.high_of)


def slider_tops(config: Any) -> dict[str, int]:
    """Each of `model_sliders` at its maximum for a model: set when the model loads, so a slider reads the model's
    layers and heads before the first run."""
    return {w.name: w.high_of(config) for tab in registry.TABS for w in tab.widgets() if w.high_of}


def model_choices(lm: Any, lang: str) -> dict[str, list[tuple[str, str]]]:
    """The choices of every widget whose choices follow the visitor's model (`lm`; None before one loads)."""
    return {w.name: w.of_model(lm, lang) for tab in registry.TABS for w in tab.widgets() if w.of_model}


def all_views() -> list[View]:
    return [view for tab in registry.TABS for view in tab.all_views()]


def picked(tab: str, pick: str) -> str:
    """What a tab of several views keeps as picked for `pick` (an unknown one: its first view's)."""
    views = registry.BY_TAB[tab].views or {}
    return pick if pick in views else next(iter(views), "")


def slot_names(tab: str | None = None) -> list[str]:
    """Every component any view draws (the page's one redraw event writes to these), or `tab`'s views only, in a
    stable order."""
    names: dict[str, None] = {}
    for view in all_views() if tab is None else registry.BY_TAB[tab].all_views():
        names.update(dict.fromkeys(view.slots))
    return list(names)


def open_view(tab: str, lesson: str = "steps") -> View:
    """The view drawn in the open tab (a tab of several views, the Lessons tab: the picked one, `lesson`); an unknown
    tab: the first tab's."""
    found = registry.BY_TAB.get(tab)
    view = found.open_view(lesson) if found is not None else None
    return view if view is not None else registry.BY_TAB[TABS[0]].open_view()


def closed_views(tab: str, lesson: str = "steps") -> list[View]:
    """The views of every tab but the open one (the Lessons tab: the picked lesson's)."""
    return [open_view(other, lesson) for other in TABS if other != tab]


def pending(view: View, run: Any, lang: str) -> Drawn:
    """A view that is not open, empty with a word until it is: nothing of another run or language stays in it."""
    words = t("view_pending", lang, n=run.number) if run is not None else t(view.waits, lang)
    slots = view.idle(lang, words)
    slots.setdefault(view.caption_slot, Slot(words))
    return slots


def reads_run(view: View) -> bool:
    """Whether the view reads the run with the run's own model (else it reads the visitor's model, and the run
    only when it was made with that model)."""
    return bool(view.needs & {"run", "finished"})


def context_for(view: View, session: Session, model_for: Callable[[str, str, str], Any],
                drafters: Callable[[str, str, str], list[str]] | None = None) -> Context:
    """What `view` reads for `session`: its current run and the model to read it with (`model_for(name, dtype,
    owner)` resolves a model by name; no model work); `drafters(owner, name, dtype)`: the loaded models that can
    draft for a model (asked only by a view that needs them)."""
    run = session.current
    if reads_run(view):
        lm = model_for(run.settings.model, run.settings.dtype, run.owner) if run is not None and run.path else None
    else:
        lm = model_for(session.model, session.dtype, session.key) if session.model else None
        if run is not None and run.settings.model != session.model:
            run = None  # a run of another model says nothing about this one
    measured = {name: result for name, (model, result) in session.measured.items() if model == session.model}
    found: tuple[str, ...] = ()
    if "drafters" in view.needs and drafters is not None and run is not None:
        found = tuple(drafters(session.key, run.settings.model, run.settings.dtype))
    return Context(lm, run, session.lang, tuple(session.runs), session.model, measured, session.key, found,
                   session.view.layer)


def waiting(view: View, ctx: Context) -> Waiting | None:
    """Why `view` cannot be drawn from `ctx` yet (its needs not met), or None."""
    run = ctx.run
    if reads_run(view):
        if run is None or not run.path:
            return Waiting(view.waits)
        if "finished" in view.needs and run.running:
            return Waiting(view.busy)
    if ctx.lm is None and (view.needs & {"model", "finished"}):
        return Waiting("nothing_yet")
    return None


def compute(view: View, ctx: Context, sel: Selection) -> Any:
    """The view's data (or a `Waiting`) all at once: model work, to be called on the torch thread."""
    return drain(slices(view, ctx, sel))


def slices(view: View, ctx: Context, sel: Selection) -> Generator[None, None, Any]:
    """The view's data as slices of model work: a generator that yields between bounded slices and returns the
    data (the app runs each slice as its turn between the shared batch's steps). A view's `compute` returns its
    data, or such a generator itself when its work is longer than one slice (a comparison that reruns a prompt)."""
    why = waiting(view, ctx)
    if why is not None:
        return why
    out = view.compute(ctx, sel)
    if not inspect.isgenerator(out):
        return out
    return (yield from out)


def draw(view: View, data: Any, lang: str) -> Drawn:
    """The view's slots for `data` in `lang`: its figures and controls, and its caption in its first slot."""
    if isinstance(data, Waiting):
        slots = view.idle(lang, t(data.words, lang))
        slots.setdefault(view.caption_slot, Slot(t(data.words, lang)))
        return slots
    slots = view.draw(data, lang)
    slots[view.caption_slot] = Slot(view.caption(data, lang))
    return slots


def show(view: View, ctx: Context, sel: Selection) -> Drawn:
    """`draw(compute(...))` in one call (for tests and callers already on the torch thread)."""
    return draw(view, compute(view, ctx, sel), ctx.lang)
