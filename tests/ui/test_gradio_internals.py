"""Script calls leave no memory behind: a served app, real `gradio_client` calls to generate_text."""

from __future__ import annotations

import time

import gradio as gr
import pytest

from tests.ui_fixtures import save_tiny_decoder, served_app


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with served_app(weights, tmp_path_factory.mktemp("uploads")) as app:
        yield app


def test_each_script_session_is_dropped_from_gradio_after_its_call(served):
    from gradio_client import Client

    demo, url = served
    scripts = demo.playground_handlers.stream.scripts
    scripts.grace_seconds = 0.2
    outputs = []
    for _ in range(6):  # every Client is a session of its own, as in a script run six times
        client = Client(url, verbose=False)
        outputs.append(client.predict("tiny-lm", "Hello", "max_new_tokens=3", api_name="/generate_text")["token_ids"])
        client.close()  # its heartbeat ends: Gradio runs the page's unload for the session
    assert all(o == outputs[0] for o in outputs) and len(outputs[0]) == 3
    deadline = time.monotonic() + 20
    while (demo.state_holder.session_data or len(scripts)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not demo.state_holder.session_data, f"Gradio still holds {len(demo.state_holder.session_data)} sessions"


def test_a_page_tab_s_session_is_never_dropped(served):
    demo, _ = served
    handlers = demo.playground_handlers
    handlers.models.page_load(gr.Request(session_hash="a-tab", query_params={}))
    demo.state_holder["a-tab"]  # Gradio's copy of the page for that tab
    scripts = handlers.stream.scripts
    scripts.grace_seconds = 0.0
    scripts.end("a-tab")
    scripts.sweep()
    assert "a-tab" in demo.state_holder.session_data


def test_a_closed_page_tab_s_state_is_dropped_from_gradio_after_its_unload(served):
    """Issue 42's class soak: Gradio kept the state of 366 sessions for 90 open tabs (281 MiB at 0.8 MiB each):
    a tab that closed was forgotten by the app but not by Gradio, until its capacity of 1,000. Its unload (or its
    idle expiry) now hands it to the same sweep as a script's session; an open tab's state stays."""
    demo, _ = served
    handlers = demo.playground_handlers
    for tab in ("closing-tab", "open-tab"):
        handlers.models.page_load(gr.Request(session_hash=tab, query_params={}))
        demo.state_holder[tab]  # Gradio's copy of the page for the tab
    handlers.stream.scripts.grace_seconds = 0.0
    handlers.unload(gr.Request(session_hash="closing-tab"))
    handlers.stream.scripts.sweep()  # or the sweeper thread, if one is waiting already
    deadline = time.monotonic() + 5
    while "closing-tab" in demo.state_holder.session_data and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "closing-tab" not in demo.state_holder.session_data and "open-tab" in demo.state_holder.session_data


def test_the_pinned_gradio_is_the_one_installed_and_required():
    from pathlib import Path

    from playground.ui.gradio_internals import GRADIO_VERSION

    pin = Path(__file__).resolve().parents[2] / "requirements.txt"
    assert f"gradio=={GRADIO_VERSION}" in pin.read_text() and gr.__version__ == GRADIO_VERSION


def test_the_live_screens_server_functions_survive_gradios_per_tab_copy(served):
    """A handler that updates the live screen (gr.skip(), gr.update) makes Gradio rebuild it for that tab
    from its constructor arguments; the page's calls must still reach the server functions."""
    import httpx

    demo, url = served
    live = demo.playground_page.live
    state = demo.state_holder["copy-tab"]
    state[live._id] = live.__class__(**{**live.constructor_args, "render": False})  # what Gradio does
    for fn_name, data in (("attention_row", ["no-such-run-token-xx", 0, "self", 0, "mean"]),
                          ("set_view", ["no-such-run-token-xx", "self", 0, "mean"]),
                          ("select_step", ["no-such-run-token-xx", 3])):
        reply = httpx.post(url + "gradio_api/component_server/", json={
            "session_hash": "copy-tab", "component_id": live._id, "fn_name": fn_name, "data": data})
        assert reply.status_code == 200, reply.text
    assert reply.json() == {} and httpx.post(url + "gradio_api/component_server/", json={
        "session_hash": "copy-tab", "component_id": live._id, "fn_name": "attention_row",
        "data": ["x", 0, "self", 0, "mean"]}).json() == {"row": None}


def test_a_flood_of_fresh_session_ids_never_drops_a_page_tab_s_state(served):
    """Stop presses from 30 session ids nobody opened, over a capacity of 20: the tab's state stays, the
    flood's goes (Gradio dropped the least recently used of all, the tab first)."""
    import uuid

    import httpx

    demo, url = served
    handlers = demo.playground_handlers
    handlers.models.page_load(gr.Request(session_hash="open-tab", query_params={}))
    demo.state_holder["open-tab"]
    stop = next(i for i, fn in demo.fns.items() if getattr(fn.fn, "__func__", None) is handlers.stream.stop.__func__)
    capacity, demo.state_holder.capacity = demo.state_holder.capacity, 20
    try:
        flood = [uuid.uuid4().hex[:11] for _ in range(30)]
        with httpx.Client(base_url=url, timeout=30) as client:
            codes = {client.post("gradio_api/run/predict", json={"fn_index": stop, "data": [0],
                                                                  "session_hash": key}).status_code for key in flood}
        assert codes == {200}
        assert "open-tab" in demo.state_holder.session_data
        assert len(demo.state_holder.session_data) <= 20
        assert not any(handlers.sessions.has(key) for key in flood)  # Stop kept nothing for them
    finally:
        demo.state_holder.capacity = capacity


def test_gradio_s_state_holder_and_heartbeat_have_the_shape_gradio_state_reaches_into(served):
    """What `ui/gradio_state.py` and the heartbeat watch rely on (a Gradio upgrade that moves any of it fails here)."""
    from collections import OrderedDict

    import gradio.routes
    import httpx
    from gradio.state_holder import SessionState, StateHolder

    from playground.ui.gradio_state import PagesLastStateHolder

    holder = StateHolder()
    assert isinstance(holder.session_data, OrderedDict) and isinstance(holder.time_last_used, dict)
    assert hasattr(holder, "lock") and hasattr(holder, "capacity")
    assert gradio.routes.StateHolder is PagesLastStateHolder  # every app Gradio makes holds its state in ours
    for name in ("config_values", "state_data"):  # what tab_states measures
        assert name in SessionState.__init__.__code__.co_names
    demo, url = served
    with httpx.stream("GET", url + "gradio_api/heartbeat/shape-tab", timeout=30) as stream:  # what HeartbeatWatch sees
        assert stream.status_code == 200 and next(stream.iter_lines()) == "data: ALIVE"
        assert demo.playground_handlers.tabs.live("shape-tab")  # connected: live
    deadline = time.monotonic() + 10
    while demo.playground_handlers.tabs.live("shape-tab") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not demo.playground_handlers.tabs.live("shape-tab")  # the connection ended


def test_what_gradio_keeps_per_tab_is_counted(served):
    from playground.ui.gradio_state import tab_states

    demo, _ = served
    handlers = demo.playground_handlers
    for attempt in range(3):  # a tab of an earlier test may leave meanwhile: measure again in a quiet moment
        before, before_bytes = tab_states(demo)
        for key in (f"counted-{attempt}-1", f"counted-{attempt}-2"):
            handlers.models.page_load(gr.Request(session_hash=key, query_params={}))
            demo.state_holder[key]
        tabs, held = tab_states(demo)
        if tabs == before + 2:
            break
    assert tabs == before + 2
    per_tab = (held - before_bytes) / 2
    assert 50_000 < per_tab < 5 * 2**20, per_tab  # the issue measured 0.42 MiB a tab (RSS)


def test_two_event_streams_of_one_tab_closing_together_log_no_error(served, caplog):
    """A tab that reconnects holds two event streams for a while; when both are cut (the tab closes), Gradio's
    second clean-up deleted the session's message queue again and logged a KeyError traceback."""
    import asyncio
    import logging
    import socket
    from urllib.parse import urlparse

    demo, url = served
    session = "two-streams"
    demo._queue.pending_messages_per_session[session] = asyncio.Queue()
    port = urlparse(url).port
    streams = []
    for _ in range(2):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET /gradio_api/queue/data?session_hash={session} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.settimeout(10)
        assert b"200" in s.recv(4096).split(b"\r\n")[0]  # the stream is open
        streams.append(s)
    with caplog.at_level(logging.ERROR):
        for s in streams:
            s.close()
        deadline = time.monotonic() + 5
        while session in demo._queue.pending_messages_per_session and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the second stream's clean-up
    assert session not in demo._queue.pending_messages_per_session
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


def test_a_stream_opened_after_its_sessions_queue_was_deleted_ends_without_a_traceback(served, caplog):
    """A closing tab: the client aborts its event stream (Gradio deletes the session's message queue), then an event
    the page had joined opens a new stream. Gradio answers it "session not found" by raising an HTTP 404 inside the
    response it has started; the server logged "response already started" with a traceback (seen in CI)."""
    import logging
    import socket
    from urllib.parse import urlparse

    demo, url = served
    session = "closed-tab"
    assert session not in demo._queue.pending_messages_per_session
    with caplog.at_level(logging.ERROR), socket.create_connection(("127.0.0.1", urlparse(url).port)) as s:
        s.sendall(f"GET /gradio_api/queue/data?session_hash={session} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.settimeout(10)
        received = b""
        while not received.endswith(b"0\r\n\r\n"):  # the chunked body's end: the stream is closed
            chunk = s.recv(4096)
            assert chunk, received  # the server did not cut the connection without ending the body
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].endswith(b"200 OK"), head
    assert b'"session_not_found":true' in body, body  # what the Gradio client reads as "this session is gone"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
