"""An upload a page has open never expires; one that expired, or went with its tab's session, says so when its
owner asks for it again, never that it is someone else's (reliability round 5, row 11)."""

from __future__ import annotations

import pytest

from playground.app.names import resolve
from playground.app.notes import render
from playground.app.uploads import Uploads
from playground.errors import PlaygroundError
from playground.tools.loadtest_page import small_checkpoint


class Clock:
    now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def nothing_listed(name):
    return None


def refusal(name: str, owner: str, uploads: Uploads) -> str:
    with pytest.raises(PlaygroundError) as refused:
        resolve(name, owner, uploads, nothing_listed)
    return render(refused.value.args[0])


def test_an_open_upload_outlives_its_time_to_live_and_a_gone_one_says_it_expired(tmp_path):
    clock = Clock()
    uploads = Uploads(tmp_path / "uploads", private=True, ttl_seconds=60, clock=clock)
    checkpoint = small_checkpoint(tmp_path)
    opened = uploads.save_upload([checkpoint], 10**9, "tab-a")
    idle = uploads.save_upload([checkpoint], 10**9, "tab-b")
    forgotten = uploads.save_upload([checkpoint], 10**9, "tab-c")
    uploads.in_use = lambda: [p for p in (uploads.owner_upload_dir("tab-a") / opened.removeprefix("upload/"),
                                          uploads.owner_upload_dir("tab-c") / forgotten.removeprefix("upload/"))
                              if p.exists()]
    clock.now += 3600
    removed = uploads.sweep()
    assert [p.name for p in removed] == [idle.removeprefix("upload/")]  # the open ones stay, unused or not
    resolve(opened, "tab-a", uploads, nothing_listed)
    assert "deleted after its time without use" in refusal(idle, "tab-b", uploads)
    uploads.forget("tab-c")  # its tab closed, or its session expired
    assert "deleted after its time without use" in refusal(forgotten, "tab-c", uploads)
    # another visitor naming them learns nothing: the same line as a name that never existed
    assert refusal(idle, "tab-x", uploads) == refusal("upload/" + "0" * 32, "tab-x", uploads)
    assert "private" in refusal(forgotten, "tab-x", uploads)
