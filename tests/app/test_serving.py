"""Serving: runs from many threads join one batch and each gets exactly its own run alone."""

from __future__ import annotations

import math
import threading
import time

import pytest

import playground
from playground.app.serving import Server
from playground.generation import GenerationConfig
from playground.generation.batch import run_alone
from playground.generation.plan import plan
from tests.hf_tiny import save_small_llama


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_small_llama(directory)
    return playground.load_model(directory)


def test_concurrent_visitors_get_their_solo_runs(lm, one_thread):
    plans = [plan(lm, [5 + i, 9, 23, 40 + i], GenerationConfig(max_new_tokens=8 + i, temperature=0.7 * (i % 2),
                                                               seed=i)) for i in range(5)]
    alone = [[e.token_ids for e in run_alone(p)] for p in plans]
    server = Server(max_rows=4, call=lambda fn: fn())  # steps on the server's own driver thread
    got: dict[int, list[list[int]]] = {}

    def visit(i: int) -> None:
        got[i] = [e.token_ids for e in server_events(server, plans[i])]

    threads = [threading.Thread(target=visit, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [got[i] for i in range(5)] == alone


def test_stop_ends_a_run_and_frees_its_row(lm, one_thread):
    server = Server(call=lambda fn: fn())
    stop = threading.Event()
    ticket = server.submit(plan(lm, [5, 9], GenerationConfig(max_new_tokens=50)), stop)
    events = []
    for event in ticket.stream(timeout=60):
        events.append(event)
        if len(events) == 3:
            stop.set()
    assert 3 <= len(events) < 50 and not events[-1].finished
    after = server.submit(plan(lm, [5, 9], GenerationConfig(max_new_tokens=2)))
    assert list(after.stream(timeout=60))[-1].finished


def server_events(server: Server, p):
    ticket = server.submit(p)
    yield from ticket.stream(timeout=60)


def test_active_counts_running_and_waiting_requests(lm, one_thread):
    server = Server(max_rows=1, call=lambda fn: fn())
    assert server.active() == 0
    stops = [threading.Event() for _ in range(3)]
    tickets = [server.submit(plan(lm, [5, 9], GenerationConfig(max_new_tokens=40)), stop) for stop in stops]
    next(tickets[0].stream(timeout=60))  # the first runs; one row, so the other two wait
    assert server.active() == 3
    for stop in stops:
        stop.set()
    for ticket in tickets:
        list(ticket.stream(timeout=60))
    deadline = time.monotonic() + 30  # a finished ticket leaves the running list at the end of its step
    while server.active() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.active() == 0


def test_a_crowd_spaces_each_visitors_frames():
    from playground.app.frames import FRAME_SECONDS, MAX_FRAME_SECONDS, SERVER_FRAMES_PER_SECOND, frame_seconds

    assert frame_seconds(0) == frame_seconds(1) == FRAME_SECONDS  # one visitor: ~12 frames a second
    assert frame_seconds(8) == pytest.approx(8 / SERVER_FRAMES_PER_SECOND)  # the server's frames shared by 8
    assert frame_seconds(1000) == MAX_FRAME_SECONDS  # a big crowd still sees its text move twice a second


def test_a_request_without_a_place_is_told_its_place_and_longest_wait(lm, one_thread):
    """One row: the first request decodes, the second waits and hears its place (1) and a wait no longer
    than the first request's remaining budget at the measured step time; then it runs as usual."""
    from playground.app.serving import WAIT_REPORT_SECONDS, Waiting

    def slow_steps(fn):  # 30 steps of at least 50 ms: the first request holds the one row for 1.5 s or more
        time.sleep(0.05)
        return fn()

    server = Server(max_rows=1, call=slow_steps)
    first = server.submit(plan(lm, [5, 9], GenerationConfig(max_new_tokens=30)))
    next(first.stream(timeout=60))
    second = server.events(plan(lm, [6, 9], GenerationConfig(max_new_tokens=4)), threading.Event(),
                           report_waiting=True)
    report = next(second)
    assert isinstance(report, Waiting) and report.position == 1
    step = first.scheduler.step_seconds
    assert report.seconds is not None and report.seconds <= math.ceil(30 * step) + 1
    rest = list(second)
    assert not any(isinstance(e, Waiting) and e.position != 1 for e in rest)
    tokens = [e for e in rest if not isinstance(e, Waiting)]
    assert len(tokens) == 4 and tokens[-1].finished
    assert WAIT_REPORT_SECONDS <= 1  # a request admitted within this is never reported


def test_a_request_admitted_at_once_is_never_reported_waiting(lm, one_thread):
    from playground.app.serving import Waiting

    server = Server(call=lambda fn: fn())
    events = list(server.events(plan(lm, [5, 9], GenerationConfig(max_new_tokens=5)), threading.Event(),
                                report_waiting=True))
    assert not any(isinstance(e, Waiting) for e in events) and len(events) == 5
