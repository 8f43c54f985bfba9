"""Who is calling: a visitor is a page tab or a script's client, never one request.

Fairness in the shared batch (one running generation each), the queue's places and a script's share of the
server are per visitor. A page tab is its Gradio session (`page`): the page opened it and every event it sends
carries it. Anything else (a `gradio_client` script, a raw HTTP call, an event sent with a session no page
opened) is its client (`client`): the network address the connection comes from, or, behind trusted reverse
proxies, the address the nearest of them reports (`client_address`). A session id or a header value the caller
writes never names a client: each script call mints a session of its own, and a script can write any
X-Forwarded-For it likes; only the entries our own proxies appended can be believed.

`PLAYGROUND_TRUSTED_PROXIES` says how many proxies stand in front of the app (0: the connection's own address).
On a Hugging Face Space the Hub's proxy is one, the default there. (uvicorn would rewrite the connection's
address from X-Forwarded-For for callers on 127.0.0.1; the UI tells it to trust nobody, so that this rule is
the only one: `ui/gradio_internals.py`.)

`QueuePlaces` is the queue's rule over visitors: a script client keeps at most `per_client` calls waiting or
running, a page tab `per_tab` events, and scripts together never take the half of the queue kept for pages.
No Gradio here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from playground.app.notes import note
from playground.hosting import on_space
from playground.notes import Note

TRUSTED_PROXIES_ENV = "PLAYGROUND_TRUSTED_PROXIES"
PAGE, CLIENT = "tab:", "client:"


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
    """The visitor of a page tab (its Gradio session)."""
    return PAGE + session


def client(address: str) -> str:
    """The visitor of a script's calls (its client's address)."""
    return CLIENT + address


def is_client(visitor: str) -> bool:
    return visitor.startswith(CLIENT)


@dataclass(frozen=True)
class QueuePlaces:
    """How many places of a queue of `size` events (None: unbounded) a visitor may hold."""

    size: int | None
    per_client: int = 2  # a script client's calls, waiting or running (the batch runs one of them at a time)
    per_tab: int = 16  # a page tab's events, waiting or running (a tab sends one or two at a time)
    page_share: float = 0.5  # of the queue, never taken by scripts

    @property
    def scripts(self) -> int | None:
        """Places scripts may hold together (waiting), the rest kept for page tabs."""
        return None if self.size is None else max(1, int(self.size * (1 - self.page_share)))

    def refusal(self, visitor: str, held: Iterable[tuple[str, bool]]) -> Note | None:
        """Why a new event of `visitor` may not join (None: it may). `held`: (visitor, waiting) of every event the
        queue holds, waiting or running."""
        mine = scripts_waiting = 0
        for who, waiting in held:
            mine += who == visitor
            scripts_waiting += waiting and is_client(who)
        if is_client(visitor):
            if mine >= self.per_client:
                return note("queue_client_full", n=self.per_client)
            if self.scripts is not None and scripts_waiting >= self.scripts:
                return note("queue_scripts_full", n=self.scripts)
        elif mine >= self.per_tab:
            return note("queue_tab_full", n=self.per_tab)
        return None
