"""Uploads count per visitor, an address or an account, not per tab (issue 42, item 1).

One address opening many tabs (or minting sessions) once multiplied the per-tab upload quota. Now its tabs share
one visitor's share. Each tab's uploads stay private to that tab. Requests come as on a Space: one trusted proxy,
each visitor its X-Forwarded-For.
"""

from __future__ import annotations

import gradio as gr
import pytest
from starlette.datastructures import Headers

from playground.app.visitors import TRUSTED_PROXIES_ENV
from tests.ui.test_hostile_uploads import _as_uploaded
from tests.ui_fixtures import save_tiny_decoder, tiny_lm_handlers

PER_TAB, PER_VISITOR = 1.5, 3.5  # in tiny checkpoints: a tab keeps one, a visitor three (at once, in use)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = save_tiny_decoder(tmp_path_factory.mktemp("upload") / "lm")
    return folder, sum(f.stat().st_size for f in folder.iterdir())


@pytest.fixture(scope="module")
def h(tmp_path_factory, checkpoint):
    _, size = checkpoint
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TRUSTED_PROXIES_ENV, "1")
        mp.setenv("PLAYGROUND_UPLOAD_QUOTA_BYTES", str(100 * size))  # the server's disk is never what binds here
        mp.setenv("PLAYGROUND_UPLOAD_OWNER_QUOTA_BYTES", str(int(PER_TAB * size)))
        mp.setenv("PLAYGROUND_UPLOAD_VISITOR_QUOTA_BYTES", str(int(PER_VISITOR * size)))
        yield tiny_lm_handlers(tmp_path_factory)


def tab(session: str, address: str) -> gr.Request:
    """A page tab's request that the (trusted) proxy says comes from `address`."""
    return gr.Request(session_hash=session, headers=Headers({"x-forwarded-for": address}),
                      client={"host": "127.0.0.1", "port": 40000})


def upload(h, request: gr.Request, checkpoint, tmp_path) -> tuple[str | None, str]:
    out = h.models.upload(_as_uploaded(checkpoint[0], tmp_path / request.session_hash), "float32", "en", request)
    return (out["model"]["value"] if "model" in out else None), out["model_status"]


def test_one_address_many_tabs_share_one_visitors_quota(h, checkpoint, tmp_path):
    tabs = [tab(f"flood-{i}", "203.0.113.9") for i in range(5)]
    results = [upload(h, t, checkpoint, tmp_path) for t in tabs]
    loaded = [name for name, _ in results if name]
    assert len(loaded) == 3, results  # each upload is loaded in its tab (in use): three fit in the visitor's share
    refused = [status for name, status in results if not name]
    assert len(refused) == 2 and all("the most one visitor keeps here" in s for s in refused), refused
    assert all("\n" not in s and "/tmp" not in s for s in refused)  # one line, no server path
    other = upload(h, tab("neighbour", "198.51.100.7"), checkpoint, tmp_path)
    assert other[0] and other[0].startswith("upload/"), other  # another address has its own share
    assert h.catalog.uploads.visitor_quota_bytes == int(PER_VISITOR * checkpoint[1])


def test_a_class_behind_one_address_each_uploads_and_tabs_stay_private(h, checkpoint, tmp_path):
    first = tab("student-0", "192.0.2.1")
    name, status = upload(h, first, checkpoint, tmp_path)
    assert name, status
    h.models.load("tiny-lm", "float32", "en", first)  # the first student moves on: the upload is no longer open
    names = [upload(h, tab(f"student-{i}", "192.0.2.1"), checkpoint, tmp_path)[0] for i in range(1, 4)]
    assert all(names), names  # every student's upload is stored and loaded
    assert name not in h.catalog.names("student-0")  # the idle one made room within the address's share
    assert h.catalog.uploads.was_evicted(h.catalog.uploads.owner_upload_dir("student-0") / name.split("/", 1)[1])
    for i, own in enumerate(names, start=1):  # a tab sees its own upload and none of its classmates'
        visible = {n for n in h.catalog.names(f"student-{i}") if n.startswith("upload/")}
        assert visible == {own}, (i, visible)
