"""Gradio's own upload route within the app's quota (issue 31, row 7), against a served app.

`POST /gradio_api/upload` needs no upload event: before, Gradio kept whatever came for 15 minutes (3 ×
300 MB beside a 40 MB app quota). Now a file over what one visitor may keep is refused (413), and
Gradio's copies that no upload stored are swept down to the server's upload quota, oldest first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from playground.ui import build_app, enable_queue, launch_kwargs
from tests.ui_fixtures import free_port, save_tiny_decoder

KIB = 1024
QUOTA = 1024 * KIB  # the server keeps 1 MiB of uploads here; a visitor half of it


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    demo = build_app(weights, tmp_path_factory.mktemp("uploads"))
    demo.playground_handlers.catalog.uploads.quota_bytes = QUOTA
    enable_queue(demo)
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, quiet=True, **launch_kwargs(demo))
    yield demo, f"http://127.0.0.1:{port}"
    demo.close()


def _post(url: str, size: int, name: str = "model.safetensors") -> httpx.Response:
    return httpx.post(url + "/gradio_api/upload", files=[("files", (name, os.urandom(size)))], timeout=60)


def test_a_file_over_a_visitors_share_is_refused_by_gradios_route(served):
    demo, url = served
    response = _post(url, 2 * QUOTA)
    print(f"\n2 MiB POST with a 1 MiB quota: HTTP {response.status_code}")
    assert response.status_code == 413
    assert _post(url, 64 * KIB).status_code == 200  # a file within the share is taken as before


def test_gradios_copies_no_upload_stored_are_swept_to_the_quota(served):
    demo, url = served
    held = []
    for _ in range(6):  # 6 × 400 KiB: each within a visitor's share, together over the quota
        response = _post(url, 400 * KIB)
        assert response.status_code == 200
        held += response.json()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        kept = sum(Path(f).stat().st_size for f in held if Path(f).exists())
        if kept <= QUOTA:
            break
        time.sleep(0.5)
    print(f"Gradio's copies after 6 × 400 KiB POSTs: {kept // KIB} KiB kept (quota {QUOTA // KIB} KiB)")
    assert kept <= QUOTA
    assert Path(held[-1]).exists()  # the newest stays: an upload event may still come for it
