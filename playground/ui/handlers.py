"""All of the app's handlers, for one app: models, generation, deeper views, language, lifecycle.

Each job has its own module (`models`, `streaming`, `runs`, `views`, `experiments`: every tab's buttons, `language`);
this class only holds
them together with the per-tab sessions they share, so wiring and tests have one object to use.
"""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

from playground.app import heap, serving
from playground.app.catalog import Catalog
from playground.app.registry import ModelRegistry
from playground.app.session import Sessions
from playground.app.visitors import Tabs
from playground.checkpoints.limits import Limits
from playground.ui.experiments import Experiments
from playground.ui.gradio_internals import request_visitor
from playground.ui.models import Models, session_key
from playground.ui.runs import Runs
from playground.ui.streaming import Streaming
from playground.ui.teacher import Teacher
from playground.ui.views import Views


class Handlers:
    def __init__(self, catalog: Catalog, registry: ModelRegistry, limits: Limits | None = None) -> None:
        self.sessions = Sessions(on_expire=lambda key, session: self.forget(key))
        self.tabs = Tabs()  # each visitor's open tabs (a visitor is an address or an account)
        self.drop_state: Callable[[str], object] = lambda key: None  # Gradio's state of a tab closed here (build_app)
        self.models = Models(catalog, registry, self.sessions, limits)
        self.models.visitor_of = lambda owner: self.tabs.visitor(owner) or owner  # loads are bounded per visitor
        self.sessions.visitor_of = lambda key: self.tabs.visitor(key) or key  # and what runs keep
        # the shared batch offers its places by address, then by tab (the process's one server: the app's tabs)
        serving.default_server().visitor_of = self.tabs.owner_visitor
        self.stream = Streaming(self.models, self.sessions)
        self.experiments = Experiments(self.models, self.sessions, self.stream)
        self.runs = Runs(self.sessions, self.stream)
        self.views = Views(self.models, self.sessions)
        self.teacher = Teacher(self.models, self.sessions, self.stream)

    @property
    def catalog(self) -> Catalog:
        return self.models.catalog

    @property
    def registry(self) -> ModelRegistry:
        return self.models.registry

    def unload(self, request: gr.Request) -> None:
        """The tab closed: end its generation and job, forget its runs and delete its uploads and Hub
        downloads (with the models loaded from them), so their memory and disk are returned."""
        key = session_key(request)
        session = self.sessions.drop(key)
        if session is None:  # a script's client went away (Gradio calls this for it too)
            self.stream.scripts.end(key)
        else:
            session.stop_all()
        self.forget(key)

    def open_tab(self, request: gr.Request) -> None:
        """A page opened in the tab of `request`: it is its visitor's newest; beyond the visitor's bound of tabs, its
        oldest idle tabs close (a live tab, its heartbeat connected, never does)."""
        key = session_key(request)
        for old in self.tabs.open(key, request_visitor(request)):
            self.close_tab(old)

    def close_tab(self, key: str) -> None:
        """Close tab `key` for its visitor's bound: end what runs, forget what it held, Gradio's state with it."""
        session = self.sessions.drop(key)
        if session is not None:
            session.stop_all()
        self.forget(key)
        self.drop_state(key)

    def forget(self, key: str) -> None:
        """Return what a tab that is gone held: its uploads, its Hub downloads and their models, and Gradio's state of
        it (after a grace: Gradio's own unload call for it makes the state anew); it leaves the games it played in
        (a room's count of players drops it at once)."""
        self.tabs.close(key)
        self.stream.scripts.end(key)  # no page tab now: Gradio's copy of the page for it goes (the class soak: 366
        # states kept for 90 open tabs, 0.8 MiB each, until the 1,000 of Gradio's capacity)
        self.teacher.game.rooms.leave(key)
        self.registry.drop_under(self.catalog.uploads.forget(key))
        heap.release()
