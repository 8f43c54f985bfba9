"""Links parse within the lab's limits (issue 31, rows 9 and 11), against a served app.

A short link whose `edits=` inflates to deeply nested JSON, and one that packs 10,000 ablations (the
lab allows 16): the page load and `/generate_text` answer with one note, the link's other values still
apply, and the next visitor is served as before.
"""

from __future__ import annotations

import base64
import json
import time
import zlib

import gradio as gr
import pytest

from playground.app.fields import MAX_EDITS
from playground.app.settings import WIDGETS, from_query
from playground.interventions import Ablate, pack
from tests.ui_fixtures import save_tiny_decoder, script_client, served_app


def _deflated(data: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(data, 9)).decode().rstrip("=")


NESTED = _deflated(b"[" * 100_000 + b"]" * 100_000)  # a few hundred characters, 100,000 levels deep
NESTED_DICTS = _deflated(b'{"a":' * 50_000 + b"1" + b"}" * 50_000)
# 10,000 ablations written as the shortest dicts the decoder accepts: ~2,000 characters
MANY = _deflated(json.dumps([{"type": "ablate", "layer": 0, "head": h % 2} for h in range(10_000)]).encode())
SEVENTEEN = pack([Ablate(0, head=h % 2) for h in range(MAX_EDITS + 1)])
HOSTILE = {"nested": NESTED, "nested dicts": NESTED_DICTS, "10,000 ablations": MANY, "17 edits": SEVENTEEN}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with served_app(weights, tmp_path_factory.mktemp("uploads")) as app:
        yield app


@pytest.fixture(scope="module")
def client(served):
    with script_client(served[1]) as c:
        yield c


def _one_edits_note(notes: list[str] | str) -> None:
    lines = [n for n in (notes.splitlines() if isinstance(notes, str) else notes) if "edits" in n]
    assert len(lines) == 1, notes
    assert "Traceback" not in lines[0] and "recursion" not in lines[0].lower() and len(lines[0]) < 300, lines


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_edits_link_is_one_note_in_the_script_api(case, client):
    started = time.perf_counter()
    out = client.predict("tiny-lm", "Hello", f"max_new_tokens=3&edits={HOSTILE[case]}", api_name="/generate_text")
    seconds = time.perf_counter() - started
    print(f"\n{case} ({len(HOSTILE[case])} characters): answered in {seconds:.2f} s, notes {out['notes']}")
    assert len(out["token_ids"]) == 3  # the plain run, without the edits
    _one_edits_note(out["notes"])
    assert seconds < 5.0


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_edits_link_opens_the_page_with_one_note(case, served, client):
    handlers = served[0].playground_handlers
    request = gr.Request(session_hash=f"tab-{case}", query_params={"prompt": "keep me", "edits": HOSTILE[case]})
    *values, notes = handlers.models.page_load(request)
    assert values[WIDGETS.index("prompt")] == "keep me"
    assert handlers.sessions.get(f"tab-{case}").link_settings.edits == ""  # what the link's run would replay
    _one_edits_note(notes)
    out = client.predict("tiny-lm", "Hello", "max_new_tokens=2", api_name="/generate_text")  # still serving
    assert len(out["token_ids"]) == 2


def test_sixteen_edits_are_still_read():
    settings, notes = from_query({"edits": pack([Ablate(0, head=h % 2) for h in range(MAX_EDITS)])})
    assert notes == [] and settings.edits


def test_any_error_while_reading_a_link_is_a_note(monkeypatch):
    import playground.app.fields as fields_module

    def broken(text: str) -> tuple:
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(fields_module, "unpack", broken)
    settings, notes = from_query({"edits": "abc", "prompt": "kept"})
    assert settings.prompt == "kept" and settings.edits == ""
    assert len(notes) == 1 and "edits" in notes[0] and "nobody foresaw" not in notes[0], notes
    json.dumps(notes)
