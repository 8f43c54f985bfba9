"""The page's one redraw: whatever happened (a step selected, a run ended, a tab opened, a control moved, the
language or the model changed), the open view is computed by the app core (`playground.app.views`, its model
work on the torch thread) and drawn by one generic renderer: a view's slots become `{component name: update}`.

Handlers here take the page's control values by component name and return updates by component name;
`wire_views` binds them with Gradio's dict inputs and outputs (no positional tuples)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import gradio as gr

from playground.app import describe, serving, views
from playground.app import tabs as registry
from playground.app.session import Session, Sessions
from playground.app.views import Selection, Slot
from playground.ui.gradio_internals import event_data
from playground.ui.models import Models, one_line, session_key

# The controls a view reads (its selection), by component name, and the tab whose view reads each.
TAB_OF: dict[str, str] = {w.name: tab.tab for tab in registry.TABS for w in tab.view_widgets()}
# redraw on submit (a box), not at each key
SUBMITTED = frozenset(w.name for tab in registry.TABS for w in tab.view_widgets() if w.on == "submit")
SLOTS = tuple(views.slot_names())  # every component a view draws


def render(slots: Mapping[str, Slot]) -> dict[str, Any]:
    """Any view's slots as Gradio updates by component name; a slot that changes nothing is left out."""
    return {name: gr.update(**slot.changes) for name, slot in slots.items() if slot.changes}


class Views:
    """The redraw handlers for the sessions of one app. A tab's redraw stops the one it still has running before
    that one's next slice: only the last selection's numbers are computed (the queue drops older ones still
    waiting, `gradio_internals.VisitorQueue`)."""

    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions
        self._drawing: dict[str, threading.Event] = {}  # each tab's running redraw: its stop flag
        self._lock = threading.Lock()

    def draw_open(self, session: Session, values: Mapping[str, Any], *, moved: bool = False) -> dict[str, Any]:
        """The open view of `session` for the controls' `values` (`moved`: one of its tab's controls moved, so a
        control that counts only then, the query row, counts; else it follows the selected step), as updates by
        component name; nothing when a newer redraw of the tab took its place."""
        return self._draw_open(session, values, moved=moved) or {}

    def _draw_open(self, session: Session, values: Mapping[str, Any], *, moved: bool = False) -> dict[str, Any] | None:
        """`draw_open`, None when a newer redraw of the tab took its place (began before this one ended: the
        figures' lane runs two at once, so this one's answer could reach the page after the newer one's)."""
        if session.deep_tab == views.NO_VIEW:  # Class tools is open: no view on screen
            return {}
        view = views.open_view(session.deep_tab, session.lesson)
        lang = session.lang
        tab = registry.BY_TAB.get(session.deep_tab)
        controls = tab.view_widgets() if tab is not None else ()
        selection = Selection.from_controls(values, session.selected_step, moved=moved, controls=controls)
        stop = threading.Event()
        with self._lock:
            older, self._drawing[session.key] = self._drawing.get(session.key), stop
        if older is not None:
            older.set()  # its numbers are for a selection the tab has left
        try:
            ctx = views.context_for(view, session, self.models.model_for, self.models.drafters)
            data = serving.call_sliced(views.slices(view, ctx, selection), owner=session.key, stop=stop)
            slots = views.draw(view, data, lang)
        except serving.Stopped:
            return None
        except Exception as exc:  # noqa: BLE001 - one line where the view's caption would be
            slots = {view.caption_slot: Slot(describe.inert(one_line(exc, lang, view.name)))}
        finally:
            with self._lock:
                if self._drawing.get(session.key) is stop:
                    del self._drawing[session.key]
        return None if stop.is_set() else render(slots)

    # --- the events that redraw --------------------------------------------------------------------

    def redraw(self, values: Mapping[str, Any], request: gr.Request | None = None) -> dict[str, Any]:
        """The run on screen, the language or the model changed: the open view again, and every other view empty
        with a word until it is opened (nothing of another run stays on the page)."""
        session = self.sessions.get(session_key(request))
        updates: dict[str, Any] = {}
        for view in views.closed_views(session.deep_tab, session.lesson):
            updates.update(render(views.pending(view, session.current, session.lang)))
        opened = self._draw_open(session, values)
        # superseded (a tab opened meanwhile, say): the newer redraw says it all, and these words for the views then
        # closed would empty the view it drew, had this answer come last (a lesson stuck on "Reading run N…")
        return {} if opened is None else {**updates, **opened}

    def reading(self, request: gr.Request | None = None) -> dict[str, Any]:
        """Said at once when the run on screen, the language or the model changed, before the open view's redraw
        (which waits behind other model work on a busy machine): the open view's words name the run on screen
        ("Reading run N…") and its figures go, so nothing of the previous run stays in it meanwhile."""
        session = self.sessions.get(session_key(request))
        if session.deep_tab == views.NO_VIEW or session.current is None:
            return {}
        view = views.open_view(session.deep_tab, session.lesson)
        return render(views.pending(view, session.current, session.lang)) if views.reads_run(view) else {}

    def select_step(self, evt: gr.EventData | None, values: Mapping[str, Any],
                    request: gr.Request | None = None) -> dict[str, Any]:
        """A token was clicked (or ← / →) in the live screen: the open view moves to that step (the step itself
        came first, by the page's direct call); views that do not follow the step stay."""
        session = self.sessions.get(session_key(request))
        run = session.current
        view = views.open_view(session.deep_tab, session.lesson)
        if run is None or event_data(evt).get("run") != run.token or not view.follows_step:
            return {}
        return self.draw_open(session, values)

    def tab_selected(self, tab: str, values: Mapping[str, Any], request: gr.Request | None = None) -> dict[str, Any]:
        """The views' tab on screen changed to `tab` (a section or a tab opened; the page's script says which): it
        becomes the open view."""
        session = self.sessions.get(session_key(request))
        if tab not in views.TABS and tab != views.NO_VIEW:
            return {}
        session.deep_tab = tab
        return self.draw_open(session, values)

    def control(self, tab: str, values: Mapping[str, Any], request: gr.Request | None = None) -> dict[str, Any]:
        """A control of `tab` moved: its view redraws when it is the open one."""
        session = self.sessions.get(session_key(request))
        if session.deep_tab != tab:
            return {}
        return self.draw_open(session, values, moved=True)

    def pick_lesson(self, lesson: str, values: Mapping[str, Any], request: gr.Request | None = None,
                    tab: str = "lessons") -> dict[str, Any]:
        """A view was picked in a tab of several (a lesson in the Lessons tab): it becomes the open view."""
        session = self.sessions.get(session_key(request))
        session.lesson = views.picked(tab, lesson)
        session.deep_tab = tab
        return self.draw_open(session, values)


def wire_views(page: Any, h: Views, follows: list[Any], figures_kw: dict[str, Any]) -> Callable[[Any], Any]:
    """Bind the redraws: after each event of `follows` (runs ending, the language, a model load) the open view
    redraws; so it does on a step selected, a views' tab opened (in any section), a lesson picked and each view's
    own controls.
    Returns `then_redraw(dependency)` for events bound later."""
    controls = {page.component(n): n for n in TAB_OF}
    outputs = [page.component(n) for n in SLOTS]
    inputs = set(controls)
    # Gradio's page keeps a loading status for every component an event has shown progress on, and writes all of
    # them again at each status message of any event (every streamed frame of a run): with the 66 slots the page
    # did that work for every view's slot on every frame. One hidden component carries the redraws' progress.
    figures_kw = {**figures_kw, "show_progress_on": [page.open_view]}

    def named(values: dict[Any, Any]) -> dict[str, Any]:
        return {controls[c]: v for c, v in values.items() if c in controls}

    def keyed(updates: dict[str, Any]) -> dict[Any, Any]:
        # Gradio reads an empty dict as one output value: "nothing changes" is one component skipped
        return {page.component(n): u for n, u in updates.items()} or {outputs[0]: gr.skip()}

    def redraw(values: dict, request: gr.Request) -> dict:
        return keyed(h.redraw(named(values), request))

    def select_step(values: dict, evt: gr.EventData, request: gr.Request) -> dict:
        return keyed(h.select_step(evt, named(values), request))

    def tab_selected(values: dict, request: gr.Request) -> dict:
        values = dict(values)
        tab = values.pop(page.open_view, None)
        return keyed(h.tab_selected(str(tab or ""), named(values), request))

    def control(tab: str) -> Callable[..., dict]:
        def changed(values: dict, request: gr.Request) -> dict:
            return keyed(h.control(tab, named(values), request))
        return changed

    def picking(tab: str, picker: Any) -> Callable[..., dict]:
        def pick(values: dict, request: gr.Request) -> dict:
            values = dict(values)
            lesson = values.pop(picker, None)
            return keyed(h.pick_lesson(str(lesson or ""), named(values), request, tab))
        return pick

    def reading(request: gr.Request) -> dict:
        return keyed(h.reading(request))

    def then_redraw(dep: Any) -> Any:
        # first, at once, the open view names the run it will read; then its redraw, in the figures' lane
        return dep.then(reading, None, outputs, queue=False, show_progress_on=[page.open_view]).then(
            redraw, inputs, outputs, **figures_kw)

    for dep in follows:
        then_redraw(dep)
    page.live.select(select_step, inputs, outputs, **figures_kw)
    page.open_view.select(tab_selected, inputs | {page.open_view}, outputs, **figures_kw)  # the page's script: the tab
    for tab, picker in _pickers(page):  # a tab of several views: its picker opens one
        picker.input(picking(tab, picker), inputs | {picker}, outputs, **figures_kw)
    for name, tab in TAB_OF.items():
        component = page.component(name)
        # a tab's own control redraws that tab's views: their components show the progress
        own = {**figures_kw, "show_progress_on": [page.component(n) for n in views.slot_names(tab)] or [page.open_view]}
        (component.submit if name in SUBMITTED else component.change)(control(tab), inputs, outputs, **own)
    return then_redraw


def _pickers(page: Any) -> list[tuple[str, Any]]:
    """(tab, its picker) of every tab of several views."""
    return [(tab.tab, page.component(tab.picker().name)) for tab in registry.TABS if tab.picker() is not None]
