"""A visitor is not a session (reliability round 5, row 7): a served app, a script flooding `/generate_text`
from one address (each call a session of its own, each with a forged X-Forwarded-For), and a page visitor
pressing Generate meanwhile."""

from __future__ import annotations

import secrets
import threading

import httpx
import pytest

from playground.app.visitors import client_address
from playground.tools.loadtest_page import Page, Visitor
from tests.ui_fixtures import save_tiny_decoder, served_app

FLOOD = 40


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    # the server in small: a queue of 8 places, two generations at a time
    with served_app(weights, tmp_path_factory.mktemp("uploads"), queue_size=8, concurrency=2) as served:
        yield served


def api_index(url: str) -> int:
    config = httpx.get(url + "config", timeout=30).json()
    return next(d.get("id", i) for i, d in enumerate(config["dependencies"]) if d.get("api_name") == "generate_text")


def test_a_script_flooding_generate_text_leaves_the_queue_to_the_page(app):
    """Round 5: 80 parallel /generate_text calls from one script were 80 visitors (one session each): everyone
    else's Generate was answered `Queue is full` for about 8 minutes. A fix keyed on X-Forwarded-For would have
    been bypassed by the header: here every call writes another one."""
    demo, url = app
    fn = api_index(url)
    query = "max_new_tokens=24&chat=false"
    accepted: list[tuple[str, str]] = []
    refused: list[str] = []
    refused_sessions: list[str] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        session = secrets.token_hex(8)
        body = {"data": ["tiny-lm", "Hello", query], "fn_index": fn, "trigger_id": None, "session_hash": session}
        forged = {"X-Forwarded-For": f"10.{i}.{i}.{i}"}
        response = httpx.post(url + "gradio_api/queue/join", json=body, headers=forged, timeout=60)
        with lock:
            if response.status_code == 200:
                accepted.append((session, response.json()["event_id"]))
            else:
                refused.append(response.json().get("detail", ""))
                refused_sessions.append(session)

    flood = [threading.Thread(target=call, args=(i,)) for i in range(FLOOD)]
    for th in flood:
        th.start()
    for th in flood:
        th.join()

    page = Page.read(url)
    tab = Visitor(page, 0, "tiny-lm", "tiny-lm", max_new_tokens=8)
    with httpx.Client() as client:
        tab.open(client)
        ids = tab.generate(client)  # joins the queue while the flood's calls wait and run
    assert not tab.errors and ids, tab.errors
    assert demo.playground_queue.most_held["client:127.0.0.1"] <= 2  # one running, one waiting: its places
    assert len(accepted) <= FLOOD // 4 and len(refused) == FLOOD - len(accepted), len(accepted)
    assert all("calls from your address are already waiting or running" in r for r in refused), refused[:3]
    # issue 42's class soak: each refused join left Gradio's state of its session behind (288 for 62 tabs an hour)
    assert not set(refused_sessions) & set(demo.state_holder.session_data)

    finished = []
    for session, _event in accepted:  # the client's own calls still run to their end
        with httpx.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}, timeout=120) as s:
            for line in s.iter_lines():
                if line.startswith("data:") and '"process_completed"' in line:
                    finished.append('"success":true' in line.replace(" ", ""))
                    break
    assert finished and all(finished)


def test_the_client_is_the_address_the_connection_or_a_trusted_proxy_reports():
    assert client_address("127.0.0.1", ["6.6.6.6"], proxies=0) == "127.0.0.1"  # a header alone names nobody
    # behind one proxy (a Space): the entry it appended, whatever the caller wrote before it
    assert client_address("10.0.0.2", ["6.6.6.6, 7.7.7.7, 203.0.113.9"], proxies=1) == "203.0.113.9"
    assert client_address("10.0.0.2", ["6.6.6.6", "203.0.113.9"], proxies=1) == "203.0.113.9"  # two header lines
    assert client_address("10.0.0.2", ["6.6.6.6, 203.0.113.9, 10.0.0.7"], proxies=2) == "203.0.113.9"
    assert client_address("10.0.0.2", [], proxies=1) == "10.0.0.2"  # no proxy's entry: the connection
