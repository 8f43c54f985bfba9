"""A paced reader of a scheduled run (`Ticket.stream(due=...)`, the page's stream): woken once a frame, not once a
step, and told when it has caught up; its events are the unpaced reader's, in order."""

from __future__ import annotations

import threading
import time

import pytest

import playground
from playground.generation import GenerationConfig
from playground.generation.batch import CAUGHT_UP, Scheduler
from playground.generation.plan import plan
from tests.hf_tiny import save_small_llama

WAIT = 30.0  # seconds: far longer than any run here; a reader still asleep after it was not woken


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_small_llama(directory)
    return playground.load_model(directory)


def _run(lm, tokens: int):
    return plan(lm, [3, 14, 15, 9, 26], GenerationConfig(max_new_tokens=tokens, top_candidates=0))


def _unpaced_ids(lm, tokens: int) -> list[int]:
    scheduler = Scheduler(lm)
    ticket = scheduler.submit(_run(lm, tokens))
    while scheduler.busy():
        scheduler.step()
    return [e.token_id for e in ticket.drain()]


class Reader(threading.Thread):
    """Reads a ticket's stream on its own thread, as a page's stream does."""

    def __init__(self, ticket, due) -> None:
        super().__init__(daemon=True)
        self.ticket, self.due, self.items = ticket, due, []
        self.asked = threading.Event()  # `due` was asked: the queue was empty, the reader is about to sleep

    def run(self) -> None:
        for item in self.ticket.stream(due=self._due):
            self.items.append(item)

    def _due(self) -> float:
        self.asked.set()
        return self.due()


def test_a_paced_reader_sleeps_through_the_steps_and_the_end_wakes_it(lm):
    scheduler = Scheduler(lm)
    ticket = scheduler.submit(_run(lm, 12))
    reader = Reader(ticket, lambda: time.monotonic() + WAIT)  # its next frame is always far away
    reader.start()
    assert reader.asked.wait(WAIT)
    for _ in range(6):  # the prompt, then five tokens: each step's event is queued, and the reader is not woken
        scheduler.step()
    assert ticket.produced == 6
    assert reader.items == []
    while scheduler.busy():
        scheduler.step()
    reader.join(WAIT / 3)
    assert not reader.is_alive()  # the end woke it: it took every event at once and returned
    assert [e.token_id for e in reader.items] == _unpaced_ids(lm, 12)


def test_a_paced_reader_is_told_when_it_has_caught_up(lm):
    scheduler = Scheduler(lm)
    ticket = scheduler.submit(_run(lm, 8))
    reader = Reader(ticket, lambda: 0.0)  # a frame always due: it takes each event as it comes
    reader.start()
    told = 0
    while scheduler.busy():
        scheduler.step()
        if scheduler.busy():  # after each step but the last, it takes the step's event and says it caught up
            told += 1
            deadline = time.monotonic() + WAIT
            while reader.items.count(CAUGHT_UP) < told and time.monotonic() < deadline:
                time.sleep(0.001)
    reader.join(WAIT)
    items = reader.items
    events = [item for item in items if item is not CAUGHT_UP]
    assert [e.token_id for e in events] == _unpaced_ids(lm, 8)
    assert items.count(CAUGHT_UP) >= 7  # one after each step's event (the last may end the stream first)
    assert items[0] is not CAUGHT_UP
    assert all(not (a is CAUGHT_UP and b is CAUGHT_UP) for a, b in zip(items, items[1:]))  # once per burst


def test_an_unpaced_reader_is_never_told(lm):
    scheduler = Scheduler(lm)
    ticket = scheduler.submit(_run(lm, 5))
    while scheduler.busy():
        scheduler.step()
    assert CAUGHT_UP not in list(ticket.stream(timeout=0))
