"""Who is calling: a visitor is an address (or a signed-in account), never a session id or one request.

Every per-visitor bound counts per visitor: the queue's places, the tabs Gradio keeps state for, uploads and loads.
The visitor is the network address the connection comes from or, behind trusted reverse proxies, the address the
nearest of them reports (`client_address`); a visitor signed in with the Space's sign-in is their account (`key`).
A session id or a header value the caller writes never names a visitor: a script can mint any number of sessions
and write any X-Forwarded-For it likes; only the entries our own proxies appended can be believed.

A class of 30 often shares one school address, so the bounds are sized for that: within a visitor, its tabs share
its places fairly (a tab at most its fair share); between visitors, no one holds more than a part of the queue, and
each lane serves the visitors waiting in turn (`fair_order`), so a busy address never starves another.

`PLAYGROUND_TRUSTED_PROXIES` says how many proxies stand in front of the app (0: the connection's own address).
On a Hugging Face Space the Hub's proxy is one, the default there. (uvicorn would rewrite the connection's
address from X-Forwarded-For for callers on 127.0.0.1; the UI tells it to trust nobody, so that this rule is
the only one: `ui/gradio_internals.py`.)

`QueuePlaces` is the queue's rule over visitors; `Tabs` the page tabs each visitor has open (the ones whose
heartbeat is connected are live and never evicted; beyond a visitor's bound its oldest idle tabs go first).
No Gradio here.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from playground.app.notes import note
from playground.generation.fair import fair_order  # noqa: F401  (the lanes' turns: one mechanism with the batch's)
from playground.hosting import on_space
from playground.notes import Note

TRUSTED_PROXIES_ENV = "PLAYGROUND_TRUSTED_PROXIES"
PAGE, CLIENT, USER = "tab:", "client:", "user:"
T = TypeVar("T")


def trusted_proxies() -> int:
    """Reverse proxies in front of the app whose X-Forwarded-For entries are believed (1 on a Space, else 0)."""
    raw = os.environ.get(TRUSTED_PROXIES_ENV, "").strip()
    if not raw:
        return 1 if on_space() else 0
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


def client_address(peer: str | None, forwarded_for: Sequence[str] = (), proxies: int = 0) -> str:
    """The caller's address: the connection's own (`peer`) with no trusted proxy; behind `proxies` of them, the
    entry the nearest one wrote (the `proxies`-th from the right of X-Forwarded-For: whatever the caller wrote
    stands to the left of it). A header with fewer entries than proxies came some other way: the peer, then."""
    if proxies > 0:
        hops = [hop.strip() for value in forwarded_for for hop in value.split(",") if hop.strip()]
        if len(hops) >= proxies:
            return hops[-proxies]
    return peer or "unknown"


def page(session: str) -> str:
    """A page tab (its Gradio session), as the shared batch names the owner of a run: one running generation each."""
    return PAGE + session


def client(address: str) -> str:
    """The owner of a script's calls (its visitor, `key`)."""
    return CLIENT + address


def is_client(visitor: str) -> bool:
    return visitor.startswith(CLIENT)


def key(address: str, username: str | None = None) -> str:
    """The visitor of a request: the signed-in account (`request.username` on a Space), else its client's address."""
    return USER + username if username else address


@dataclass(frozen=True)
class Place:
    """One event the queue holds: its visitor (`key`), the page tab that sent it (None: a script's call), whether
    it is still waiting (False: running)."""

    visitor: str
    tab: str | None
    waiting: bool = True


@dataclass(frozen=True)
class QueuePlaces:
    """How many places of a queue of `size` events (None: unbounded) a visitor and its tabs may hold."""

    size: int | None
    per_client: int = 2  # a visitor's script calls with no page tab open, waiting or running
    per_tab: int = 16  # a page tab's events when it is its visitor's only one (a tab sends one or two at a time)
    page_share: float = 0.5  # of the queue, never taken by scripts
    visitor_share: float = 0.5  # of the queue, the most one visitor holds: a class of 30 fits in 32 of 64
    min_tab: int = 2  # a tab's places, however many tabs its visitor has
    max_client: int = 16  # a visitor's script calls, however many tabs it has open

    @property
    def scripts(self) -> int | None:
        """Places scripts may hold together (waiting), the rest kept for page tabs."""
        return None if self.size is None else max(1, int(self.size * (1 - self.page_share)))

    @property
    def per_visitor(self) -> int | None:
        """Places one visitor (an address, an account) holds at most, its tabs and scripts together."""
        return None if self.size is None else max(self.min_tab, int(self.size * self.visitor_share))

    def client_places(self, tabs_open: int) -> int:
        """A visitor's script calls: 2, and 2 more for each of its open tabs beyond one (a class running a notebook
        behind one address), at most `max_client`."""
        return min(max(self.per_client, self.max_client), self.per_client * max(1, tabs_open))

    def refusal(self, visitor: str, tab: str | None, held: Iterable[Place], tabs_open: int = 0) -> Note | None:
        """Why a new event of `visitor` (from page tab `tab`, or a script's call when None) may not join (None: it
        may). `held`: every event the queue holds, waiting or running; `tabs_open`: the visitor's open tabs."""
        theirs = [p for p in held if p.visitor == visitor]
        scripts_waiting = sum(p.waiting and p.tab is None for p in held)
        cap = self.per_visitor
        if cap is not None and len(theirs) >= cap:
            return note("queue_address_full", n=cap)
        if tab is None:
            places = self.client_places(tabs_open)
            if sum(p.tab is None for p in theirs) >= places:
                return note("queue_client_full", n=places)
            if self.scripts is not None and scripts_waiting >= self.scripts:
                return note("queue_scripts_full", n=self.scripts)
            return None
        share = self.tab_share({p.tab for p in theirs if p.tab is not None} | {tab})
        if sum(p.tab == tab for p in theirs) >= share:
            return note("queue_tab_full", n=share)
        return None

    def tab_share(self, tabs: Sequence[str] | set[str]) -> int:
        """A tab's places when these tabs of its visitor hold places: its fair part of the visitor's places."""
        cap = self.per_visitor
        if cap is None:
            return self.per_tab
        return max(self.min_tab, min(self.per_tab, cap // max(1, len(tabs))))


TABS_PER_VISITOR = 60  # a class of 30 behind one address, two tabs each
TABS_ENV = "PLAYGROUND_TABS_PER_ADDRESS"


def tabs_per_visitor() -> int:
    """Page tabs one visitor keeps open at once (`PLAYGROUND_TABS_PER_ADDRESS`, else TABS_PER_VISITOR)."""
    try:
        return max(1, int(os.environ.get(TABS_ENV, "") or TABS_PER_VISITOR))
    except ValueError:
        return TABS_PER_VISITOR


@dataclass
class _Tab:
    visitor: str
    seen: float


class Tabs:
    """The page tabs each visitor has open, by session. Thread-safe.

    A tab is live while its heartbeat is connected (the open page keeps it so): a live tab is never closed for
    another's sake. A visitor keeps at most `per_visitor` tabs: a new one beyond that closes the visitor's oldest
    idle tabs (least recently heard from, never a live one), so one address opening a thousand sessions costs
    only its own."""

    def __init__(self, per_visitor: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_visitor = per_visitor if per_visitor is not None else tabs_per_visitor()
        self.clock = clock
        self._tabs: dict[str, _Tab] = {}
        self._beats: dict[str, int] = {}  # heartbeat connections open now, by session (a tab has one)
        self._lock = threading.Lock()

    def open(self, tab: str, visitor: str) -> list[str]:
        """`tab` (a page's session) is `visitor`'s; returns the tabs to close now (the visitor's oldest idle ones
        beyond its bound)."""
        with self._lock:
            known = self._tabs.get(tab)
            if known is None:
                known = self._tabs[tab] = _Tab(visitor, self.clock())
            known.visitor, known.seen = visitor, self.clock()
            theirs = sorted((t.seen, k) for k, t in self._tabs.items() if t.visitor == visitor and k != tab)
            over = len(theirs) + 1 - self.per_visitor
            closing = [k for _, k in theirs if k not in self._beats][:max(0, over)]
            for k in closing:
                del self._tabs[k]
            return closing

    def seen(self, tab: str) -> None:
        """A sign of `tab` (one of its events, a heartbeat): it is the newest of its visitor's."""
        with self._lock:
            if tab in self._tabs:
                self._tabs[tab].seen = self.clock()

    def connect(self, tab: str) -> None:
        """`tab`'s heartbeat connected (it may come before the page's first event names the tab)."""
        with self._lock:
            self._beats[tab] = self._beats.get(tab, 0) + 1
            if tab in self._tabs:
                self._tabs[tab].seen = self.clock()

    def disconnect(self, tab: str) -> None:
        with self._lock:
            left = self._beats.get(tab, 0) - 1
            if left > 0:
                self._beats[tab] = left
            else:
                self._beats.pop(tab, None)
            if tab in self._tabs:
                self._tabs[tab].seen = self.clock()

    def live(self, tab: str) -> bool:
        """Whether `tab`'s heartbeat is connected now."""
        with self._lock:
            return tab in self._beats

    def close(self, tab: str) -> None:
        with self._lock:
            self._tabs.pop(tab, None)

    def visitor(self, tab: str | None) -> str | None:
        """The visitor `tab` belongs to (None: no page tab known here)."""
        with self._lock:
            known = self._tabs.get(tab or "")
            return None if known is None else known.visitor

    def owner_visitor(self, owner: object) -> object:
        """The visitor a shared batch's owner belongs to: a page tab's (`page`), a script's client's address
        (`client`); anything else is its own."""
        if isinstance(owner, str) and owner.startswith(PAGE):
            return self.visitor(owner[len(PAGE):]) or owner
        if isinstance(owner, str) and is_client(owner):
            return owner[len(CLIENT):]
        return owner

    def count(self, visitor: str) -> int:
        """`visitor`'s open tabs."""
        with self._lock:
            return sum(t.visitor == visitor for t in self._tabs.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._tabs)
