"""A visitor is an address and Gradio's tab state never evicts a live tab (issue 42, rows 1 and 2, and a class of
30 behind one school address). A served app as on a Space: one trusted proxy, each visitor its X-Forwarded-For."""

from __future__ import annotations

import secrets
import threading
import time

import httpx
import pytest

from playground.app.visitors import TRUSTED_PROXIES_ENV
from playground.tools.loadtest_page import Page, Visitor
from tests.ui_fixtures import save_tiny_decoder, served_app

QUEUE = 16  # the 64-place queue in small: one address holds at most half of it


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv(TRUSTED_PROXIES_ENV, "1")  # as on a Space: the Hub's proxy appends the client's address
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with served_app(weights, tmp_path_factory.mktemp("uploads"), queue_size=QUEUE, concurrency=1) as served:
        yield served
    mp.undo()


def at(address: str) -> httpx.Client:
    """A client whose requests the (trusted) proxy says come from `address`."""
    return httpx.Client(headers={"X-Forwarded-For": address}, timeout=60)


def join_generate(tab: Visitor, client: httpx.Client, tokens: int, pace_ms: int = 0) -> httpx.Response:
    body = {"data": [time.time() * 1000, *tab.values(max_new_tokens=tokens, pace_ms=pace_ms)], "event_data": None,
            "fn_index": tab.page.generate, "trigger_id": tab.page.generate, "session_hash": tab.session}
    return client.post(tab.page.url + "gradio_api/queue/join", json=body)


def drain(demo, seconds: float = 120) -> None:
    """Wait for the queue to be empty (the previous test's runs ended)."""
    end = time.monotonic() + seconds
    while any(True for _ in demo.playground_queue.held()) and time.monotonic() < end:
        time.sleep(0.2)


def test_one_address_in_many_fresh_sessions_cannot_fill_the_queue(app):
    """Row 1: one client loaded the page in 80 fresh sessions and pressed Generate once in each: the queue was
    full in 8 s and another visitor got "Queue is full". Each session that called a handler was a tab of its own."""
    demo, url = app
    page = Page.read(url)
    attacker = [Visitor(page, i, "tiny-lm", "tiny-lm", max_new_tokens=200) for i in range(QUEUE + 4)]
    refused = []
    with at("6.6.6.6") as client:
        for tab in attacker:
            tab.open(client)  # Gradio's page-load call, no browser
            response = join_generate(tab, client, 200, pace_ms=100)  # in slow motion: no run ends during the loop
            if response.status_code != 200:
                refused.append(response.json().get("detail", ""))
    assert len(refused) >= len(attacker) - QUEUE // 2, refused
    assert all("from your address" in why for why in refused), refused[:3]
    teacher = Visitor(page, 99, "tiny-lm", "tiny-lm", max_new_tokens=4)
    with at("203.0.113.7") as client:
        teacher.open(client)
        assert join_generate(teacher, client, 4).status_code == 200  # another address still gets in
    for tab in attacker:  # the attacker's runs stop (the next tests start from an empty queue)
        with at("6.6.6.6") as client:
            tab.predict(client, page.stop, [time.time() * 1000])
    drain(demo)


def test_a_live_tab_keeps_its_state_through_a_flood_of_sessions(app):
    """Row 2: one client opened the page in 1,020 fresh sessions; Gradio keeps 1,000 tabs' state and dropped the
    teacher's (its Reveal said "No game yet"). Here the capacity is 8 and each address keeps 4 tabs."""
    demo, url = app
    handlers, holder = demo.playground_handlers, demo.state_holder
    tabs = getattr(handlers, "tabs", None)  # (absent on main, where this test fails on the teacher's state)
    capacity, per_visitor = holder.capacity, getattr(tabs, "per_visitor", 0)
    holder.capacity = 8
    if tabs is not None:
        tabs.per_visitor = 4
    page = Page.read(url)
    teacher = Visitor(page, 0, "tiny-lm", "tiny-lm", max_new_tokens=3)
    beating, stop = threading.Event(), threading.Event()

    def heartbeat() -> None:  # what Gradio's page keeps connected while the tab is open
        with httpx.stream("GET", url + f"gradio_api/heartbeat/{teacher.session}", timeout=60,
                          headers={"X-Forwarded-For": "203.0.113.7"}) as stream:
            for _ in stream.iter_lines():
                beating.set()
                if stop.is_set():
                    return

    try:
        with at("203.0.113.7") as client:
            teacher.open(client)
        threading.Thread(target=heartbeat, daemon=True).start()
        assert beating.wait(30)
        flood = [Visitor(page, i, "tiny-lm", "tiny-lm", max_new_tokens=3) for i in range(12)]
        with at("6.6.6.6") as client:  # one address, 12 sessions: its 4 newest stay
            for tab in flood:
                tab.open(client)
        for i in range(10):  # and 10 more addresses, one tab each: past the capacity
            with at(f"198.51.100.{i}") as client:
                Visitor(page, 20 + i, "tiny-lm", "tiny-lm", max_new_tokens=3).open(client)
        assert teacher.session in holder.session_data and handlers.sessions.has(teacher.session)
        assert tabs.count("6.6.6.6") == 4
        assert not handlers.sessions.has(flood[0].session) and flood[0].session not in holder.session_data
        assert len(holder.session_data) <= 8
        with at("203.0.113.7") as client:  # and the teacher's tab still works
            assert join_generate(teacher, client, 3).status_code == 200
    finally:
        stop.set()
        holder.capacity = capacity
        if tabs is not None:
            tabs.per_visitor = per_visitor
    drain(demo)


def test_a_class_of_30_behind_one_address_all_generate_and_their_scripts_are_not_held_to_two(app):
    """30 students behind one school address: every tab loads the page and generates, at once; their notebooks'
    script calls from that address are not held to round 5's 2 places."""
    demo, url = app
    page = Page.read(url)
    queue, places = demo.playground_queue, demo.playground_queue.places
    queue.places, queue.queue.max_size = type(places)(64), 64  # the queue of 64: 30 at once fit
    class_ = [Visitor(page, i, "tiny-lm", "tiny-lm", max_new_tokens=4) for i in range(30)]
    done: list[list[int] | None] = [None] * 30

    def student(i: int) -> None:
        with at("192.0.2.1") as client:
            class_[i].open(client)
            done[i] = class_[i].generate(client)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(30)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(done) and not [e for tab in class_ for e in tab.errors], [e for tab in class_ for e in tab.errors][:3]

    results: list[int] = []

    def script() -> None:
        body = {"data": ["tiny-lm", "Hello", "max_new_tokens=4&chat=false"], "fn_index": page.api,
                "trigger_id": None, "session_hash": secrets.token_hex(8)}
        with at("192.0.2.1") as client:
            results.append(client.post(url + "gradio_api/queue/join", json=body).status_code)

    calls = [threading.Thread(target=script) for _ in range(6)]
    for th in calls:
        th.start()
    for th in calls:
        th.join()
    assert results == [200] * 6, results
    drain(demo)
    queue.places, queue.queue.max_size = places, QUEUE
