"""Gradio's run history and SSR off, and the pinned Gradio checked against the advisories table (issue 42, item 9).

Gradio 6.27.0 up to 6.32.0 is inside CVE-2026-134825 (run history + SSR + a saved HF token). Before, a served
app answered `/gradio_api/runs` with 200 and its page config said `run_history: true`. The table test fails when
requirements.txt pins a Gradio inside an advisory that the app's launch settings do not close.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from playground.hosting_advisories import ADVISORIES, open_advisories
from playground.tools.deploy import split_front_matter
from playground.ui import launch_kwargs
from tests.ui_fixtures import save_tiny_decoder, served_app

ROOT = Path(__file__).resolve().parents[2]


def pinned_gradio() -> str:
    line = next(x for x in (ROOT / "requirements.txt").read_text().splitlines() if x.startswith("gradio"))
    name, _, version = line.split("#")[0].strip().partition("==")
    assert name == "gradio" and version, f"requirements.txt pins gradio exactly (gradio==X.Y.Z), not {line!r}"
    return version


def test_the_pinned_gradio_is_inside_no_open_advisory():
    pin = pinned_gradio()
    front, _ = split_front_matter((ROOT / "README.md").read_text())
    assert str(front["sdk_version"]) == pin  # the Space runs the version the advisories were checked against
    still_open = open_advisories("gradio", pin, launch_kwargs())
    assert not still_open, (f"gradio=={pin} is inside {[a.id for a in still_open]}: move the pin past it, or launch "
                            f"with the row's mitigation ({[dict(a.mitigation) for a in still_open]})")


def test_an_advisory_is_open_until_its_whole_mitigation_is_in_force():
    """The check itself: inside the range it takes every mitigating setting; outside the range it takes none."""
    cve = next(a for a in ADVISORIES if a.id == "CVE-2026-134825")
    assert open_advisories("gradio", "6.31.0", {}) == [cve]
    assert open_advisories("gradio", "6.27.0", {"run_history": False}) == [cve]  # SSR still on
    assert open_advisories("gradio", "6.31.0", {"run_history": False, "ssr_mode": None}) == [cve]  # None: env decides
    assert open_advisories("gradio", "6.31.0", {"run_history": False, "ssr_mode": False}) == []
    assert open_advisories("gradio", "6.32.0", {}) == [] and open_advisories("gradio", "6.26.0", {}) == []


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    # the environment asks for both: explicit launch settings must win over it
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GRADIO_RUN_HISTORY", "true")
        env.setenv("GRADIO_SSR_MODE", "true")
        weights = tmp_path_factory.mktemp("weights")
        save_tiny_decoder(weights / "tiny-lm")
        with served_app(weights, tmp_path_factory.mktemp("uploads")) as app:
            yield app


def test_a_started_app_serves_no_run_history_and_no_ssr(served):
    demo, url = served
    config = httpx.get(url + "config", timeout=30).json()
    assert config["run_history"] is False and "runs" not in config["footer_links"]
    assert demo.ssr_mode is False  # the page is rendered in the browser: no SSR proxy in front of the app
    assert httpx.get(url + "gradio_api/runs", timeout=30).status_code == 404
    assert httpx.post(url + "gradio_api/run-history/connect", json={}, timeout=30).status_code in (404, 405)
    assert httpx.get(url, timeout=30).status_code == 200  # the page itself still served
