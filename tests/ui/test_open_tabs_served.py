"""An open tab keeps its session; only a closed or truly idle one expires, and an expired upload says it expired
(reliability round 5, row 11). A served app with the idle time and Gradio's heartbeat shortened to seconds."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from playground.tools.loadtest_page import Page, Visitor, small_checkpoint
from tests.ui_fixtures import save_tiny_decoder, served_app

IDLE = 3.0  # seconds a tab not heard from is kept (the app's 30 minutes, shortened)


@pytest.fixture
def app(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIO_HEARTBEAT_INTERVAL", "0.5")  # Gradio's 15 s between beats, shortened
    save_tiny_decoder(tmp_path / "weights" / "tiny-lm")
    with served_app(tmp_path / "weights", tmp_path / "uploads") as (demo, url):
        demo.playground_handlers.sessions.idle_seconds = IDLE
        yield demo, url


def upload(tab: Visitor, client: httpx.Client, checkpoint: Path) -> str:
    """The tab uploads `checkpoint` and keeps it loaded; its catalog name."""
    with open(checkpoint, "rb") as f:
        stored = client.post(tab.page.url + "gradio_api/upload", timeout=60,
                             files={"files": (checkpoint.name, f, "application/octet-stream")}).json()
    data = [[{"path": stored[0], "orig_name": checkpoint.name, "meta": {"_type": "gradio.FileData"}}], "float32", "en"]
    out = tab.follow(client, tab.join(client, tab.page.upload, data))
    name = next(u["value"] for u in out["output"] if isinstance(u, dict) and str(u.get("value", "")).startswith("upload/"))
    tab.model = name
    return name


def press(tab: Visitor, client: httpx.Client) -> dict:
    """Generate with the tab's model: the live screen's last value."""
    out = tab.follow(client, tab.join(client, tab.page.generate, [time.time() * 1000, *tab.values(prompt="1, 2, 3")]))
    return out["output"][0]


def test_an_open_tab_keeps_its_session_and_upload_and_an_idle_one_says_it_expired(app, tmp_path):
    """Round 5: a tab left open (its heartbeat connected) past the idle time lost its session and its upload, and
    its next Generate said `this upload is private to the visitor who made it`."""
    demo, url = app
    sessions = demo.playground_handlers.sessions
    page = Page.read(url)
    checkpoint = small_checkpoint(tmp_path)
    open_tab, gone_tab = (Visitor(page, i, "tiny-lm", "tiny-lm", max_new_tokens=3) for i in range(2))
    beating = threading.Event()
    stop = threading.Event()

    def heartbeat() -> None:  # what Gradio's page keeps connected while the tab is open
        with httpx.stream("GET", url + f"gradio_api/heartbeat/{open_tab.session}", timeout=60) as stream:
            for _ in stream.iter_lines():
                beating.set()
                if stop.is_set():
                    return

    with httpx.Client() as client:
        for tab in (open_tab, gone_tab):
            tab.open(client)
            upload(tab, client, checkpoint)
        beat = threading.Thread(target=heartbeat, daemon=True)
        beat.start()
        assert beating.wait(30)
        time.sleep(2.5 * IDLE)  # both tabs idle: one beating, one silent (a crashed tab, a script's session)
        Visitor(page, 2, "tiny-lm", "tiny-lm", max_new_tokens=3).open(client)  # a visitor's call sweeps the idle
        assert sessions.has(open_tab.session) and not sessions.has(gone_tab.session)

        live = press(open_tab, client)  # its upload is still there
        assert live["status"]["state"] == "done", live["status"]
        stop.set()
        gone = press(gone_tab, client)  # the tab came back (a phone waking): its upload went with its session
        assert gone["status"]["state"] == "error"
        assert "this upload was deleted after its time without use" in gone["status"]["error"], gone["status"]
        assert "private" not in gone["status"]["error"]
