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
