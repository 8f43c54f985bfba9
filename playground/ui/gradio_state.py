"""Gradio's state holder (private: `gradio.state_holder.StateHolder`, named in `gradio.routes`), part of the reach
into Gradio's internals that `ui/gradio_internals.py` gathers (and imports this from), pinned to the same version.

Once `state_session_capacity` sessions are held, Gradio drops the least recently used one, a page tab
as readily as a stranger's fresh session id: 1,100 Stop presses with new ids took every open tab's
copy of the page (its model list among it). `PagesLastStateHolder` drops sessions that are no page
tab first (`Blocks.playground_is_page`, set by `build_app`), least recently used first, then tabs whose
heartbeat is not connected (`Blocks.playground_is_live`), and never a live tab: one client opening 1,020 sessions
once took the teacher's state. Tabs are bounded per visitor instead (`app.visitors.Tabs`).

What Gradio keeps per tab is counted by `tab_states` (for the holdings line): its copy of the page's component
configs and the tab's State values.
"""

from __future__ import annotations

import sys
from typing import Any

import gradio as gr
import gradio.routes
from gradio.state_holder import StateHolder


class PagesLastStateHolder(StateHolder):
    """Gradio's `StateHolder`, but over capacity the least recently used session that is no page tab goes first,
    then the least recently used tab whose heartbeat is not connected; a live tab never goes (Gradio's own drops
    the least recently used of all, an open tab as readily as a stranger's fresh session). The number of tabs is
    bounded per visitor instead (`visitors.Tabs`), so going past the capacity takes many visitors' live tabs."""

    def update(self, session_id: str) -> None:
        with self.lock:
            if session_id in self.session_data:
                self.session_data.move_to_end(session_id)
            blocks = getattr(self, "blocks", None)
            is_page = getattr(blocks, "playground_is_page", None) or (lambda key: False)
            is_live = getattr(blocks, "playground_is_live", None) or (lambda key: False)
            while len(self.session_data) > self.capacity:
                # oldest first; the session just used is the newest and is never the one to go
                others = [k for k in self.session_data if k != session_id]
                victim = next((k for k in others if not is_page(k)), None)
                if victim is None:
                    victim = next((k for k in others if not is_live(k)), None)
                if victim is None:
                    return  # every tab held is open: over capacity until one closes
                del self.session_data[victim]
                self.time_last_used.pop(victim, None)


def drop_state(demo: gr.Blocks, session: str) -> bool:
    """Forget Gradio's state of `session` (a tab closed for its visitor's bound); False when none was held."""
    holder = getattr(demo, "state_holder", None)
    if holder is None:
        return False
    with holder.lock:
        holder.time_last_used.pop(session, None)
        return holder.session_data.pop(session, None) is not None


def _deep_bytes(value: Any, seen: set[int], budget: list[int]) -> int:
    """Approximate bytes of `value` and what it holds (containers and their items, objects' __dict__); stops after
    `budget[0]` objects (a tab's state is small; this bounds the time of a strange one)."""
    if id(value) in seen or budget[0] <= 0:
        return 0
    seen.add(id(value))
    budget[0] -= 1
    size = sys.getsizeof(value, 64)
    nbytes = getattr(value, "nbytes", None)  # an array's data
    if isinstance(nbytes, int):
        size += nbytes
    if isinstance(value, dict):
        size += sum(_deep_bytes(k, seen, budget) + _deep_bytes(v, seen, budget) for k, v in value.items())
    elif isinstance(value, (list, tuple, set, frozenset)):
        size += sum(_deep_bytes(v, seen, budget) for v in value)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        size += _deep_bytes(vars(value), seen, budget)
    return size


def tab_states(demo: gr.Blocks | None) -> tuple[int, int]:
    """(sessions Gradio keeps state for, about how many bytes that state takes): each session's copy of the page's
    component configs (`SessionState.config_values`, measured on one session: the same page for every tab) and
    its State values (`state_data`, measured for each)."""
    holder = getattr(demo, "state_holder", None)
    if holder is None:
        return 0, 0
    with holder.lock:
        states = list(holder.session_data.values())
    if not states:
        return 0, 0
    shared = {id(b) for b in getattr(demo, "blocks", {}).values()}  # the page's own blocks, never a tab's
    page = _deep_bytes(states[0].config_values, set(shared), [200_000])
    held = 0
    for state in states:
        held += page + _deep_bytes(state.state_data, set(shared), [20_000])
    return len(states), held


# Every app Gradio makes from now on holds its sessions' state in ours (it names the class in its routes).
gradio.routes.StateHolder = PagesLastStateHolder
