"""A tab's live attention choice is checked against the model each run reads (round 5, row 2): picking head 8 of a
9-head model and then running a 4-head model once broke every later run of the tab ("index 8 is out of bounds")."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from playground.app.frames import fold
from playground.app.session import LiveView
from playground.app.settings import FIELDS, UISettings
from playground.ui import build_app
from tests.hf_tiny import llama_like, save_decoder
from tests.ui_fixtures import CHARS, SPECIALS, save_char_tokenizer, save_tiny_decoder


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")  # 2 layers, 4 heads (2 KV heads)
    wide = root / "wide-lm"  # 3 layers, 9 heads (3 KV heads): SmolLM2's head count
    save_decoder(wide, "llama", llama_like(vocab_size=len(SPECIALS) + len(CHARS), hidden_size=72, num_attention_heads=9,
                                           num_key_value_heads=3, num_hidden_layers=3, eos_token_id=2), seed=1)
    save_char_tokenizer(wide)
    return build_app(root, tmp_path_factory.mktemp("uploads")).playground_handlers


def press(h, session: str, model: str) -> list:
    settings = UISettings(model=model, prompt="Hello", max_new_tokens=4)
    request = gr.Request(session_hash=session)
    return list(h.stream.generate(request, 0.0, *[getattr(settings, f) for f in FIELDS]))


def test_a_head_the_next_model_lacks_falls_back_to_the_mean_and_says_so(h):
    first = press(h, "tab", "wide-lm")
    token = first[-1][0]["run"]
    assert h.stream.set_view([token, "self", 2, "8"]) == {}
    assert h.sessions.get("tab").view == LiveView("self", 2, "8")  # head 8 of 9, layer 2 of 3: taken
    frames = press(h, "tab", "tiny-lm")
    last = frames[-1][0]
    path: list = []
    for frame in frames:  # the frames append what is new: the page folds them
        path = fold(path, frame[0])
    assert last["status"]["state"] == "done" and len(path) == 4, last["status"]
    att = json.loads(last["att"])  # the attention row travels as a JSON text (Gradio sends it whole)
    assert att["head"] == "mean" and att["layer"] == 1
    assert "no head 8" in frames[-1][1] and "no layer 2" in frames[-1][1]
    assert h.sessions.get("tab").view == LiveView("self", -1, "mean")
    again = press(h, "tab", "tiny-lm")  # and the tab keeps working, without the note
    assert again[-1][0]["status"]["state"] == "done" and "no head" not in again[-1][1]


def test_a_head_or_layer_the_runs_model_lacks_is_never_taken(h):
    token = press(h, "other", "tiny-lm")[-1][0]["run"]
    for bogus in (["self", 0, "8"], ["self", 5, "mean"], ["cross", 0, "mean"], ["self", 0, "group:7"]):
        h.stream.set_view([token, *bogus])
        assert h.sessions.get("other").view == LiveView(), bogus
    h.stream.set_view([token, "self", 1, "group:1"])
    assert h.sessions.get("other").view == LiveView("self", 1, "group:1")


def test_a_live_value_that_cannot_be_built_ends_the_run_with_one_line(h, monkeypatch):
    from playground.app import frames

    def broken(*args, **kwargs):
        raise IndexError("index 8 is out of bounds for axis 0 with size 4")

    monkeypatch.setattr(frames, "live_value", broken)
    out = press(h, "broken", "tiny-lm")
    assert out[-1][0]["status"]["state"] == "error" and "IndexError" in out[-1][0]["error"]
    run = h.sessions.get("broken").current
    assert not run.running and run.finish_reason == "stopped" and len(run.path) < 4
    monkeypatch.undo()
    assert press(h, "broken", "tiny-lm")[-1][0]["status"]["state"] == "done"  # the tab is usable
