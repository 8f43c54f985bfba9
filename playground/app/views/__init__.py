"""Every deep panel, lesson and experiment as a View of the run (see `playground.app.view`), and the three steps the
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

from playground.app import experiments
from playground.app.session import Session
from playground.app.view import HIDDEN, KEEP, Context, Drawn, Selection, Slot, View, Waiting, shown
from playground.app.views import attention, cache, card, inspector, positional
from playground.app.views.lessons import VIEWS as LESSON_VIEWS
from playground.app.views.lessons import view_of as lesson_view
from playground.app.words import t
from playground.generation.engine import drain

__all__ = ["HIDDEN", "KEEP", "LESSON_VIEWS", "NO_VIEW", "PANELS", "TABS", "Context", "Drawn", "Selection", "Slot", "View",
           "Waiting", "all_views", "closed_views", "compute", "context_for", "draw", "open_view", "pending", "reads_run",
           "shown", "show", "slices", "slot_names", "waiting"]

PANELS: dict[str, View] = {v.name: v for v in (inspector.VIEW, attention.VIEW, cache.VIEW, positional.VIEW,
                                               *(e.view for e in experiments.EXPERIMENTS), card.VIEW)}
# the deep views' tabs, in order: the panels, the lessons, each experiment's, the model card
TABS = ("inspector", "attention", "cache", "positional", "lessons", *(e.tab for e in experiments.EXPERIMENTS), "card")
NO_VIEW = "none"  # what the page says when a section of no views is open (Class tools): nothing to draw


def model_sliders() -> tuple[str, ...]:
    """The sliders whose range is the model's (a layer, a head): All heads' and every experiment's."""
    return (*attention.SLIDERS, *(w.name for e in experiments.EXPERIMENTS for w in e.widgets() if w.high_of))


def slider_tops(config: Any) -> dict[str, int]:
    """Each of `model_sliders` at its maximum for a model: set when the model loads, so a slider reads the model's
    layers and heads before the first run."""
    tops = attention.slider_tops(config)
    tops.update({w.name: w.high_of(config) for e in experiments.EXPERIMENTS for w in e.widgets() if w.high_of})
    return tops


def all_views() -> list[View]:
    return [*PANELS.values(), *LESSON_VIEWS.values()]


def slot_names() -> list[str]:
    """Every component any view draws (the page's one redraw event writes to these), in a stable order."""
    names: dict[str, None] = {}
    for view in all_views():
        names.update(dict.fromkeys(view.slots))
    return list(names)


def open_view(tab: str, lesson: str = "steps") -> View:
    """The view drawn in the open tab (the Lessons tab: the picked lesson's)."""
    if tab == "lessons":
        return lesson_view(lesson)
    return PANELS.get(tab, PANELS["inspector"])


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
    sdpa = session.sdpa if session.sdpa is not None and session.sdpa.get("model") == session.model else None
    found: tuple[str, ...] = ()
    if "drafters" in view.needs and drafters is not None and run is not None:
        found = tuple(drafters(session.key, run.settings.model, run.settings.dtype))
    return Context(lm, run, session.lang, tuple(session.runs), session.model, sdpa, session.key, found,
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
