"""The run on screen, beside the live screen: the badge of what it changes from a plain run (`#active-settings`),
the tab's run history (`#run-history`: a click on a run makes it the run on screen) and the link box, which always
holds the link of the run on screen.

Every event that changes the run on screen (a run streaming or ending, a pick, a model switch, the language) ends
in `show`; a streaming handler is wrapped by `streamed`, which adds the badge and the history to each frame and
keeps the frames of a run the visitor picked away from off the screen.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from playground.app import describe, history
from playground.app.session import MAX_RUNS_PER_SESSION, Session, Sessions
from playground.app.settings import WIDGETS, format_branches, widget_settings
from playground.app.words import t
from playground.hosting import shared_link
from playground.ui.gradio_internals import event_data
from playground.ui.models import session_key
from playground.ui.streaming import Streaming

# The link box holds a query string from the server: the page's own address goes before it (inside a Space the
# server already wrote the Space's address).
RUN_SLOTS = 3  # a streamed frame's first outputs: the live screen, the notes, the branches (then the badge, the history)
ABSOLUTE_LINK_JS = """
(query) => (!query || /^https?:[/][/]/.test(query)) ? query : window.location.origin + window.location.pathname + query
"""


def badge_html(session: Session) -> str:
    """The badge of the run on screen ('' for a plain run or none)."""
    words = history.badge(session.current, session.lang)
    if not words:
        return ""
    return (f'<div class="pg-active"><span class="pg-active-title">{html.escape(t("active_title", session.lang))}'
            f'</span> {html.escape(words)}</div>')


def history_html(session: Session) -> str:
    """The tab's runs, newest first, each a button with its number in `data-run`; a word for the runs that left."""
    lang = session.lang
    entries = history.entries(session, lang)
    if not entries:
        return ""
    items = "".join(
        f'<li><button type="button" data-run="{e.number}" class="pg-run{" current" if e.current else ""}"'
        f'{" aria-current=true" if e.current else ""}>{html.escape(e.label)}'
        f'{" · " + html.escape(t("history_running", lang)) if e.running else ""}</button></li>' for e in entries)
    gone = history.gone(session, lang)
    return (f'<div class="pg-history"><h4>{html.escape(t("history_title", lang))} '
            f'<span class="pg-muted">{html.escape(t("history_hint", lang))}</span></h4><ol>{items}</ol>'
            + (f'<p class="pg-muted pg-gone">{html.escape(gone)}</p>' if gone else "") + "</div>")


def link_label(session: Session) -> str:
    """The link box's label: the run on screen's link, or (with none) the run the left column's settings make."""
    return t("link" if session.current is not None else "link_settings", session.lang)


class Runs:
    """The run on screen's badge, history and link, and the pick, for the sessions of one app."""

    def __init__(self, sessions: Sessions, stream: Streaming) -> None:
        self.sessions = sessions
        self.stream = stream

    def panels(self, session: Session) -> tuple[str, str]:
        """(badge, history) of the run on screen, as plain values: a stream resends them with every frame, and Gradio's
        streamed diffs stall on update dicts resent beside another output's values (a plain value that did not
        change costs an empty diff); an empty badge hides itself (page.css)."""
        return badge_html(session), history_html(session)

    def show(self, request: gr.Request | None = None, *widgets: Any) -> tuple[str, str, dict]:
        """(badge, history, link box) of the run on screen: the link box holds its link. With nothing on screen, a
        box Copy link showed for the left column (pressed with nothing on screen) holds the link of its `widgets`,
        renewed by every redraw (the page's own load finishing after the press, a model switch): it never hides what
        was just asked for. A box that showed a run's link is hidden once no run is on screen (a model switch):
        nothing of the old run stays."""
        session = self.sessions.get(session_key(request))
        if session.current is not None:
            session.link_asked = "run" if session.link_asked else ""  # a shown box now holds this run's link
            link = gr.update(value=shared_link(session.link_query()), label=link_label(session))
        elif session.link_asked == "settings" and len(widgets) == len(WIDGETS):
            query = session.link_query(widget_settings(widgets))
            link = gr.update(value=shared_link(query), visible=True, label=link_label(session))
        else:
            session.link_asked = ""
            link = gr.update(value="", visible=False)
        return (*self.panels(session), link)

    def copied(self, request: gr.Request, *widgets: Any) -> dict:
        """Copy link pressed: the box shows the link (`Streaming.link`) under the label of what it holds. The query,
        the box's visibility and its label in one update: a second update that only showed the box raced the first,
        and the browser then turned an empty query into the bare address (about one first click in three)."""
        value = self.stream.link(request, *widgets)
        return gr.update(value=value, visible=True, label=link_label(self.sessions.get(session_key(request))))

    def pick(self, evt: gr.EventData, request: gr.Request | None = None) -> tuple:
        """A run of the history was clicked: it becomes the run on screen (live screen, notes, branches, badge,
        history); the panels, the lab and the lessons follow in the redraw after. A run still streaming goes on, off
        the screen."""
        session = self.sessions.get(session_key(request))
        session.link_notes = []
        number = event_data(evt).get("run")
        run = session.pick(number) if isinstance(number, int) and not isinstance(number, bool) else None
        if run is None:
            note = t("history_gone_pick", session.lang, keep=MAX_RUNS_PER_SESSION)
            return gr.skip(), describe.notes_markdown([note], session.lang), gr.skip(), *self.panels(session)
        session.notes = list(run.notes)
        value = self.stream.current_value(session.lang, request)
        return (value, describe.notes_markdown(run.notes, session.lang),
                format_branches(session.lineage(run)), *self.panels(session))

    def streamed(self, handler: Callable[..., Iterator[tuple]]) -> Callable[..., Iterator[tuple]]:
        """`handler` (a streaming handler whose first argument or keyword is the request) with the badge and the
        history after the run's slots of each of its frames (live screen, notes, branches: a handler's own outputs
        follow them); a frame of a run that is no longer on screen (the visitor picked another) leaves the screen as
        it is."""
        @functools.wraps(handler)
        def frames(*args: Any, **kwargs: Any) -> Iterator[tuple]:
            request = next((a for a in (*args, *kwargs.values()) if isinstance(a, gr.Request)), None)
            session = self.sessions.get(session_key(request))
            for frame in handler(*args, **kwargs):
                live, rest = frame[0], frame[RUN_SLOTS:]
                current = session.current
                if isinstance(live, dict) and live.get("run") and (current is None or live["run"] != current.token):
                    yield (*(gr.skip(),) * RUN_SLOTS, gr.skip(), history_html(session), *(gr.skip() for _ in rest))
                    continue
                yield (*frame[:RUN_SLOTS], *self.panels(session), *rest)
        return frames
