"""Each visitor's uploads live within their own share (issue 31, row 10), against a served app.

Visitor A uploads a checkpoint and uses it; visitor B uploads seven under the same server quota. A's
upload stays (it is in use) and A's next run uses it; B's earlier uploads make room for B's newer
ones, B's status says which went, and asking for one that went says so (not "private").
"""

from __future__ import annotations

import gradio as gr
import pytest

from playground.app.names import PRIVATE_UPLOAD
from playground.app.settings import FIELDS, UISettings
from tests.ui.test_hostile_uploads import _as_uploaded
from tests.ui_fixtures import save_tiny_decoder, served_app


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with served_app(weights, tmp_path_factory.mktemp("uploads")) as (demo, _):
        yield demo


def _run(handlers, session: str, model: str):
    settings = UISettings(model=model, prompt="Hello", max_new_tokens=3)
    frames = list(handlers.stream.generate(gr.Request(session_hash=session), 0.0,
                                           *[getattr(settings, f) for f in FIELDS]))
    return frames[-1][0]


def test_a_stranger_uploading_seven_checkpoints_never_evicts_an_upload_in_use(served, tmp_path):
    handlers = served.playground_handlers
    catalog = handlers.models.catalog
    folder = save_tiny_decoder(tmp_path / "lm")
    size = sum(f.stat().st_size for f in folder.iterdir())
    catalog.uploads.quota_bytes = int(6.5 * size)  # the server keeps six such uploads; the was 40 MB
    a = gr.Request(session_hash="visitor-a")
    a_name = handlers.models.upload(_as_uploaded(folder, tmp_path / "a"), "float32", "en", a)["model"]["value"]
    assert a_name.startswith("upload/") and _run(handlers, "visitor-a", a_name)["status"]["state"] == "done"
    b = gr.Request(session_hash="visitor-b")
    b_names, b_statuses = [], []
    for i in range(7):
        out = handlers.models.upload(_as_uploaded(folder, tmp_path / f"b{i}"), "float32", "en", b)
        b_names.append(out["model"]["value"] if "model" in out else None)
        b_statuses.append(out["model_status"])
    print(f"\nB's statuses: {b_statuses}")
    assert all(n and n.startswith("upload/") for n in b_names), b_statuses  # each of B's uploads loaded
    after = _run(handlers, "visitor-a", a_name)
    print(f"A's run after B's seven uploads: {after['status']}")
    assert after["status"]["state"] == "done", after["status"]  # A's upload, in use, is still there
    assert a_name in handlers.models.catalog.names("visitor-a")
    used = sum(f.stat().st_size for f in catalog.uploads.upload_dir.rglob("*") if f.is_file())
    assert used <= catalog.uploads.quota_bytes
    evicted = [n for n in b_names if n not in catalog.names("visitor-b")]
    assert evicted, "B's uploads fit without evicting anything: the test's quota is too large"
    told = [n for n in evicted if any(n in s and "was removed" in s for s in b_statuses)]
    assert told == evicted, b_statuses  # B was told, for each one, at the upload that removed it
    message = _run(handlers, "visitor-b", evicted[0])["status"]["error"]
    assert PRIVATE_UPLOAD not in message and "removed" in message, message
