"""A note is English text with a key and values: scripts print it, pickles and JSON keep it, the page says it in
the visitor's language from its key (a reason inside a note in the same language)."""

from __future__ import annotations

import json
import pickle

from playground.app.notes import error_line, note, render
from playground.errors import PlaygroundError
from playground.notes import Note


def test_a_note_is_its_english_text_and_keeps_its_key_through_pickle_and_json():
    made = note("link_ignored", name="top_k", value="'x1'", why=note("expect_number"))
    assert made == "ignored link parameter top_k='x1': expected a number" and isinstance(made, str)
    again = pickle.loads(pickle.dumps(made))  # ZeroGPU's worker sends plans and their notes back pickled
    assert isinstance(again, Note) and again.key == "link_ignored" and again.values["why"].key == "expect_number"
    assert json.loads(json.dumps({"notes": [made]})) == {"notes": [str(made)]}
    assert render(made, "zh") == "忽略了链接参数 top_k='x1':应为数字"


def test_text_without_a_key_is_shown_as_it_is_and_errors_say_their_keyed_line():
    assert render("a checkpoint's own words", "zh") == "a checkpoint's own words"
    assert render(Note("made elsewhere", "no-such-key"), "zh") == "made elsewhere"
    assert error_line(PlaygroundError(note("no_checkpoint", name="nope")), "zh") == "这里没有名为“nope”的检查点;请从列表中选择或上传它"
    assert error_line(ValueError("first line\nsecond"), "en") == "first line"
