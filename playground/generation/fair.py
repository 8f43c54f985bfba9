"""Turns in a waiting line: each key's first item, then each one's second, and so on (round-robin by key).

The shared batch offers its places by visitor (an address, or an account) and, within a visitor, by tab; the page's
lanes serve their visitors the same way (`app.visitors.fair_order` is this function).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


def fair_order(events: Sequence[T], visitor: Callable[[T], Hashable],
               served: Mapping[Hashable, int] | None = None) -> list[T]:
    """`events` (a waiting line, first served first) served by `visitor` in turn: each visitor's first event, then
    each one's second, and so on, each round in the order the visitors first appear. A visitor with 30 events
    waiting delays another's one event by at most one of its own. `served`: when each visitor was last served (a
    growing count; absent: not yet), for a line served one event at a time: a round starts with the visitor served
    longest ago, so the turns go on from one call to the next."""
    rank: dict[Hashable, int] = {}
    keyed = []
    for i, event in enumerate(events):
        who = visitor(event)
        keyed.append((rank.get(who, 0), -1 if served is None else served.get(who, -1), i, event))
        rank[who] = rank.get(who, 0) + 1
    return [event for *_, event in sorted(keyed, key=lambda k: k[:3])]


def by_visitor_then_tab(events: Sequence[T], tab: Callable[[T], Hashable], visitor: Callable[[Hashable], Hashable],
                        served: Mapping[Hashable, int] | None = None) -> list[T]:
    """Visitors in turn, and within a visitor its tabs in turn: the tabs' round-robin keeps each visitor's own order
    of events, which the visitors' round-robin then interleaves (a busy address never starves another). `served`:
    when each tab and each visitor (keys `("tab", t)`, `("visitor", v)`) was last served."""
    served = served or {}
    tabs = {key[1]: n for key, n in served.items() if key[0] == "tab"}
    visitors = {key[1]: n for key, n in served.items() if key[0] == "visitor"}
    return fair_order(fair_order(events, tab, tabs), lambda e: visitor(tab(e)), visitors)
