"""Script calls leave no memory behind: a served app, real `gradio_client` calls to generate_text."""

from __future__ import annotations

import socket
import time

import gradio as gr
import pytest

from playground.ui import build_app, enable_queue, launch_kwargs
from tests.ui_fixtures import save_tiny_decoder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    demo = build_app(weights, tmp_path_factory.mktemp("uploads"))
    enable_queue(demo)
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, quiet=True, **launch_kwargs())
    yield demo, f"http://127.0.0.1:{port}/"
    demo.close()


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
