"""Every reach into Gradio's private internals, in one place, pinned to the Gradio of requirements.txt.

- `ScriptSessions`: Gradio's memory of script sessions and of closed tabs (its `StateHolder.session_data`),
  returned once their calls are over (below).
- `gradio_state` (its own module, imported here): Gradio's state holder, evicting sessions that are no page tab
  first, then idle tabs, never a tab whose heartbeat is connected; what it keeps per tab, counted.
- `UploadCache` (its own module, imported here): Gradio's copies of files POSTed to its upload route
  (`Blocks.upload_file_set`), held to the app's upload quota.
- `slow_queue_polling`: the queue's idle polling interval (`Blocks._queue`).
- `tolerate_streams_closing_together` and `EndStreamsOfGoneSessions` (their own module, imported here): two endings
  of Gradio's event streams made quiet (a tab's two streams cut at once; a stream opened by a closing tab).
- `HeartbeatWatch`: each beat of Gradio's heartbeat route (`/heartbeat/{session_hash}`, which an open tab
  keeps connected) is a sign the tab is open: its session is not idle, whatever it last clicked.
- `VisitorQueue`: the queue's places per visitor (`app/visitors.py`), enforced where an event joins the queue
  (`Queue.push`), and the one client address a request has (`visitor_of`; uvicorn is told to trust no
  X-Forwarded-For of its own, below).
- `event_data`: the payload a custom component's `trigger(name, data)` sends (`EventData._data`).
- `LOCALE_JS`: switches Gradio's own strings (upload box, buttons) with the page's language through
  its front end's `changeLocale` (found in its `core-*.js` asset).

A Gradio upgrade must run tests/ui/test_gradio_internals.py; `GRADIO_VERSION` is the version these
were written against (the test checks it equals the installed one and the pin).

Script sessions:

Gradio keeps, per session hash, a copy of every component's config (about 0.4 MiB for this page) and
lets one go only when `state_session_capacity` are held. Every `gradio_client.Client` that calls
`generate_text` is a session of its own, so without this a public Space grows by that much per script
call. A script session has nothing worth keeping (`generate_text` takes and returns plain values), so
it is dropped once a grace period has passed since it was last used: its call's return, then the
unload Gradio runs for it when the client goes away (which makes the state anew). A page tab's state is
kept while the tab is open (bounded by `TAB_CAPACITY`): a phone tab that comes back from the background
reuses its session. Once the tab is gone (its unload, its idle expiry, its visitor's bound of tabs), nothing
of it is kept on the app's side, so Gradio's copy goes the same way.

This reaches into Gradio's `StateHolder` (the requirements pin Gradio); without one it does nothing.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
import gradio.routes
import gradio.utils
from gradio import route_utils
from gradio.server_messages import ProcessCompletedMessage

from playground.app import heap, visitors
from playground.app.notes import render
from playground.ui.gradio_state import PagesLastStateHolder, drop_state, tab_states
from playground.ui.gradio_streams import EndStreamsOfGoneSessions, tolerate_streams_closing_together
from playground.ui.gradio_uploads import UploadCache

GRADIO_VERSION = "6.31.0"
__all__ = ["EndStreamsOfGoneSessions", "PagesLastStateHolder", "UploadCache", "drop_state", "tab_states",
           "tolerate_streams_closing_together"]  # from gradio_state, gradio_streams and gradio_uploads

GRACE_SECONDS = 5.0  # from a session's last use: Gradio sends a call's result within milliseconds


class ScriptSessions:
    """Session hashes whose calls are over (a script's; a page tab's once it closed), dropped from Gradio's state
    holder `grace_seconds` later by a background sweeper that runs only while some are waiting."""

    def __init__(self, is_page: Callable[[str], bool], grace_seconds: float = GRACE_SECONDS) -> None:
        self.is_page = is_page  # a page tab's session is never dropped, whatever it called
        self.grace_seconds = grace_seconds
        self.app: Any = None  # the Blocks, once built: Gradio gives it its `state_holder` at launch
        self._ended: dict[str, float] = {}
        self._lock = threading.Lock()
        self._sweeper: threading.Thread | None = None

    def end(self, key: str | None) -> None:
        """`key`'s call is over (again): drop its state `grace_seconds` from now."""
        if not key:
            return
        with self._lock:
            self._ended[key] = time.monotonic()
            if self._sweeper is None or not self._sweeper.is_alive():
                self._sweeper = threading.Thread(target=self._sweep_while_waiting, daemon=True,
                                                 name="script-sessions")
                self._sweeper.start()

    def _sweep_while_waiting(self) -> None:
        while True:
            time.sleep(self.grace_seconds)
            if self.sweep():
                heap.release()
            with self._lock:
                if not self._ended:
                    self._sweeper = None
                    return

    def sweep(self) -> int:
        """Drop the ended sessions past their grace; returns how many went."""
        holder = getattr(self.app, "state_holder", None)
        session_data = getattr(holder, "session_data", None)
        if session_data is None:
            return 0
        now = time.monotonic()
        with self._lock:
            due = [k for k, t in self._ended.items() if now - t >= self.grace_seconds]
            for key in due:
                del self._ended[key]
        dropped = 0
        with holder.lock:
            for key in due:
                if not self.is_page(key) and session_data.pop(key, None) is not None:
                    holder.time_last_used.pop(key, None)
                    dropped += 1
        return dropped

    def __len__(self) -> int:
        with self._lock:
            return len(self._ended)


# uvicorn (which Gradio's launch starts) rewrites a request's address from X-Forwarded-For when the connection
# comes from 127.0.0.1: any process on the machine could then name itself anyone. The app decides which proxies
# it believes (`visitors.trusted_proxies`); an operator who sets FORWARDED_ALLOW_IPS keeps uvicorn's rule.
os.environ.setdefault("FORWARDED_ALLOW_IPS", "")


HEARTBEAT_PATH = re.compile(r"/heartbeat/([^/]+)$")


class HeartbeatWatch:
    """ASGI middleware (`launch(app_kwargs={"middleware": [...]})`): every chunk Gradio's heartbeat route sends a
    tab (at once, then every GRADIO_HEARTBEAT_INTERVAL seconds, 15 by default, for as long as the tab keeps the
    connection) calls `on_beat(session_hash)`. A closed tab's connection ends (Gradio then runs its unload)."""

    def __init__(self, app: Any, on_beat: Callable[[str], Any], on_connect: Callable[[str], Any] | None = None,
                 on_disconnect: Callable[[str], Any] | None = None) -> None:
        self.app, self.on_beat = app, on_beat
        self.on_connect, self.on_disconnect = on_connect, on_disconnect  # the tab is live between the two

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        found = HEARTBEAT_PATH.search(scope.get("path", "")) if scope.get("type") == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        session = found.group(1)

        async def beating(message: dict) -> None:
            if message.get("type") == "http.response.body" and message.get("body"):
                self.on_beat(session)
            await send(message)

        if self.on_connect is not None:
            self.on_connect(session)
        try:
            await self.app(scope, receive, beating)
        finally:
            if self.on_disconnect is not None:
                self.on_disconnect(session)


def request_visitor(request: Any, username: str | None = None) -> str:
    """The visitor (`visitors.key`) a request comes from: its signed-in account (Gradio's OAuth `username`), else
    its client's address (the connection's, or the nearest trusted proxy's report of it)."""
    username = username or getattr(request, "username", None)
    peer = getattr(getattr(request, "client", None), "host", None)
    headers = getattr(request, "headers", None)
    forwarded = headers.getlist("x-forwarded-for") if headers is not None else []
    return visitors.key(visitors.client_address(peer, forwarded, visitors.trusted_proxies()), username)


def visitor_of(session: str | None, request: Any, is_page: Callable[[str], bool]) -> str:
    """The owner of an event's run in the shared batch: the page tab of `session` when a page opened it (one
    running generation each), else its visitor's scripts (`visitors.client`)."""
    if session and is_page(session):
        return visitors.page(session)
    return visitors.client(request_visitor(request))


class VisitorQueue:
    """Gradio's queue (`Blocks._queue`), its places held per visitor (`visitors.QueuePlaces`): an event that would
    take more than its visitor's or its tab's places is refused where it joins (`Queue.push`, which answers
    "queue_full" with the reason), before it holds anything; each lane's waiting line then serves its visitors in
    turn (`visitors.fair_order`). In the lanes `latest_only` names (a redraw, a model load), a tab's new event
    replaces the same event of the tab still waiting there: the older one ends at once, done and changing nothing
    (as Gradio's own cancel ends it), before any of its work starts."""

    def __init__(self, demo: gr.Blocks, places: visitors.QueuePlaces, is_page: Callable[[str], bool],
                 latest_only: frozenset[str] = frozenset(), tabs_of: Callable[[str], int] = lambda who: 0) -> None:
        self.queue = demo._queue
        self.places, self.is_page, self.latest_only, self.tabs_of = places, is_page, latest_only, tabs_of
        self.refused = 0  # events refused so far
        self.superseded = 0  # waiting events a newer one of the same tab replaced
        self.most_held: dict[str, int] = {}  # the most places each tab, visitor's scripts, visitor held at once
        self._push = self.queue.push
        self._lock: asyncio.Lock | None = None  # made in the server's event loop, on the first push
        self.queue.push = self.push

    def _fn_of(self, body: Any) -> Any:
        """The event a join names, or None (Gradio's own push refuses it). A session Gradio holds no state for
        reads the page's own events: looking it up in its state would make that state, and a join refused here
        would leave it behind (the class soak: about 4 per script flood, 357 states for 62 tabs after an hour)."""
        blocks = self.queue.blocks
        known = body.session_hash and body.session_hash in getattr(blocks.state_holder, "session_data", {})
        try:
            return route_utils.get_fn(blocks, None, body if known else body.model_copy(update={"session_hash": None}))
        except Exception:  # noqa: BLE001 - no such event
            return None

    def held(self) -> Iterator[visitors.Place]:
        """Every event the queue holds: waiting in a lane, or running."""
        for lane in list(self.queue.event_queue_per_concurrency_id.values()):
            for event in list(lane.queue):
                yield self._place(event, True)
        for events in list(self.queue.active_jobs):
            for event in events or ():
                yield self._place(event, False)

    def _place(self, event: Any, waiting: bool) -> visitors.Place:
        place = getattr(event, "playground_place", None)
        if place is None:  # an event that joined some other way: its visitor's script call
            place = event.playground_place = visitors.Place(request_visitor(event.request, event.username), None)
        return visitors.Place(place.visitor, place.tab, waiting)

    async def push(self, body: Any, request: Any, username: str | None) -> tuple[bool, Any, str]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one join at a time: a visitor's places are counted before its event joins
            fn = self._fn_of(body)
            page_event = fn is not None and fn.api_visibility == "private"  # a public API call is its client's
            who = request_visitor(request, username)
            tab = body.session_hash if page_event and body.session_hash and self.is_page(body.session_hash) else None
            if page_event and fn.concurrency_id in self.latest_only and body.session_hash:
                self._supersede(fn, body.session_hash)
            held = list(self.held())
            why = self.places.refusal(who, tab, held, self.tabs_of(who))
            if why is not None:
                self.refused += 1
                return False, render(why), "queue_full"
            ok, event_id, state = await self._push(body=body, request=request, username=username)
            event = self.queue.event_ids_to_events.get(event_id) if ok else None
            if event is not None:
                event.playground_place = visitors.Place(who, tab)
                self._fair(event)
                self._count(visitors.page(tab) if tab else visitors.client(who),
                            1 + sum(p.visitor == who and p.tab == tab for p in held))
                self._count(who, 1 + sum(p.visitor == who for p in held))
            return ok, event_id, state

    def _fair(self, event: Any) -> None:
        """The lane `event` joined serves its visitors in turn."""
        lane = self.queue.event_queue_per_concurrency_id.get(event.concurrency_id)
        if lane is not None and len(lane.queue) > 1:
            lane.queue[:] = visitors.fair_order(list(lane.queue), lambda e: self._place(e, True).visitor)

    def _supersede(self, fn: Any, session: str) -> None:
        """End `session`'s events of `fn` still waiting: the one joining replaces them."""
        lane = self.queue.event_queue_per_concurrency_id.get(fn.concurrency_id)
        for event in [e for e in (lane.queue if lane is not None else ()) if e.session_hash == session and e.fn is fn]:
            lane.queue.remove(event)
            self.queue.event_ids_to_events.pop(event._id, None)
            messages = self.queue.pending_messages_per_session.get(session)
            if messages is not None:
                messages.put_nowait(ProcessCompletedMessage(output={}, success=True, event_id=event._id))
            self.superseded += 1

    def _count(self, who: str, places: int) -> None:
        if places > self.most_held.get(who, 0):
            self.most_held[who] = places
            if len(self.most_held) > 1000:
                del self.most_held[min(self.most_held, key=self.most_held.__getitem__)]


def slow_queue_polling(demo: gr.Blocks, seconds: float) -> None:
    """Make the (enabled) queue look for work at most every `seconds` while idle."""
    queue = demo._queue
    queue.sleep_when_free = max(queue.sleep_when_free, seconds)
    queue.progress_update_sleep_when_free = max(queue.progress_update_sleep_when_free, seconds)


def event_data(evt: gr.EventData | None) -> dict[str, Any]:
    """The dict a custom component sent with its event (`trigger("select", {...})` in live.js)."""
    data = getattr(evt, "_data", None)
    return data if isinstance(data, dict) else {}


# Gradio's own strings (upload box, buttons) follow its locale: switch it with ours when the page can.
LOCALE_JS = """
(lang) => {
  try {
    const core = performance.getEntriesByType('resource').map(e => e.name).find(n => /\\/assets\\/core-[\\w-]+\\.js$/.test(n));
    if (core) import(core).then(m => m.changeLocale && m.changeLocale(lang === 'zh' ? 'zh-CN' : 'en')).catch(() => {});
  } catch (e) {}
  document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
  return lang;
}
"""
