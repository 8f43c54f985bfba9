"""One press from settings to frames (`playground.app.play`): the page's Generate, a link and `/generate_text`
give the same tokens and the same notes, each press passes through its settings once, and a link's notes stay
beside every frame of its run. Real Gradio handlers on tiny random checkpoints, in-process."""

from __future__ import annotations

import importlib
import re

import gradio as gr
import pytest

from playground.app import describe
from playground.app.frames import fold
from playground.app.play import play
from playground.app.session import Session
from playground.app.settings import WIDGETS, UISettings, to_query
from playground.interventions import Ablate, pack
from playground.ui import build_app
from tests.app.test_numbers import _overflowing
from tests.ui_fixtures import save_tiny_decoder, save_tiny_seq2seq

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")
    save_tiny_seq2seq(root / "tiny-seq2seq" / "model.safetensors")
    _overflowing(root / "overflow-lm")
    return build_app(root, tmp_path_factory.mktemp("uploads"))


@pytest.fixture(scope="module")
def h(app):
    return app.playground_handlers


def request(session: str, **query) -> gr.Request:
    return gr.Request(session_hash=session, query_params=query)


def press(h, settings: UISettings, session: str) -> list:
    return list(h.stream.generate(request(session), 0.0, *[getattr(settings, f) for f in WIDGETS]))


def open_link(h, session: str, **query) -> list:
    """The page load, the model's load, then the link's own run: every frame (live, notes, branches)."""
    out = h.models.page_load(request(session, **query))
    widgets = dict(zip(WIDGETS, out[:-1]))
    widgets["model"] = widgets["model"]["value"]
    loaded = h.models.load_from_link(widgets["model"], widgets["dtype"], widgets["lang"], request(session))
    assert out[-1]  # the page load said something about this link
    if "value" in loaded["chat"]:
        widgets["chat"] = loaded["chat"]["value"]
    return [(None, out[-1], None)] + list(h.stream.generate_link(request(session), 0.0, *[widgets[f] for f in WIDGETS]))


SAME = [
    UISettings(prompt="Hello", max_new_tokens=6),
    UISettings(prompt="Hello", mode="sample", temperature=1.2, top_k=500, top_p=0.9, seed=7, max_new_tokens=6),
    UISettings(prompt="Hello", mode="beam", num_beams=3, max_new_tokens=5, lang="zh"),
    UISettings(prompt="x" * 5000, max_new_tokens=1024),  # cut in characters, then to the context
    UISettings(model="tiny-seq2seq", prompt="March 5, 2021", max_new_tokens=200, lang="zh"),
]


@pytest.mark.parametrize("number", range(len(SAME)))
def test_the_page_and_the_script_api_give_the_same_tokens_and_notes(h, number):
    s = SAME[number]
    frames = press(h, s, f"same{number}")
    run = h.sessions.get(f"same{number}").current
    api = h.stream.generate_text(s.model, s.prompt, to_query(s))
    assert api["token_ids"] == run.generated_ids and run.generated_ids
    assert api["finish_reason"] == run.finish_reason
    assert describe.notes_markdown(api["notes"], s.lang) == frames[-1][1]
    if number in (1, 3, 4):  # settings the app changed: said, in the visitor's language
        assert api["notes"] and all(CJK.search(n) for n in api["notes"]) == (s.lang == "zh")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_link_and_the_script_api_with_the_same_query_say_the_same(h, lang):
    """A link's unusable values are notes of the page load, kept beside its run; /generate_text with the same
    query returns the same notes (then the run's own), in the query's language, never Python's words."""
    query = {"temperature": "abc", "top_k": "x1", "mode": "sample", "seed": "4", "max_new_tokens": "5", "lang": lang}
    frames = open_link(h, f"link-{lang}", model="tiny-lm", prompt="Hi", **query)
    run = h.sessions.get(f"link-{lang}").current
    api = h.stream.generate_text("tiny-lm", "Hi", "&".join(f"{k}={v}" for k, v in query.items()))
    assert api["token_ids"] == run.generated_ids
    assert describe.notes_markdown(api["notes"], lang) == frames[-1][1]
    assert all(frames[0][1] in f[1] for f in frames)  # the page load's notes, in every frame of the run
    assert "abc" in frames[-1][1] and "could not convert" not in frames[-1][1]
    assert ("应为数字" in frames[-1][1]) == (lang == "zh") and ("expected a number" in frames[-1][1]) == (lang == "en")


def test_a_links_notes_stay_when_its_run_adds_a_note_of_its_own(h):
    """The run's own note (its numbers cannot be right) joins the link's notes; it used to replace them."""
    frames = open_link(h, "overflow", model="overflow-lm", prompt="Hello", max_new_tokens="3", top_k="x1")
    link_note = "top_k='x1'"
    assert all(link_note in f[1] for f in frames)
    assert "float32" in frames[-1][1] and frames[-1][1].index(link_note) < frames[-1][1].index("float32")


def test_a_press_passes_through_its_settings_once(h, monkeypatch):
    """One fit to the context, one check of the edits against the model, one reading of the packed edits."""
    from playground.app import fields, limits, settings
    from playground.app.experiments import causal
    plan = importlib.import_module("playground.generation.plan")  # the package exports a function of that name

    calls = {"fit": 0, "check": 0, "unpack": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return call

    for module in (limits, plan):
        monkeypatch.setattr(module, "fit_to_context", counted("fit", module.fit_to_context))
    for module in (causal, plan):  # the causal lab's lenient rule checks the edits, the plan only trusts them
        monkeypatch.setattr(module, "check", counted("check", module.check))
    monkeypatch.setattr(fields, "unpack", counted("unpack", fields.unpack))
    fields.parse_edits.cache_clear()
    edits = pack([Ablate(1, head=0)])
    parsed = settings.from_query({"model": "tiny-lm", "prompt": "Hello", "max_new_tokens": "4", "edits": edits})[0]
    frames = list(play(Session(key="once"), h.models.model_for, parsed))
    assert frames[-1].run.finish_reason == "length" and frames[-1].run.cfg.interventions == (Ablate(1, head=0),)
    assert calls == {"fit": 1, "check": 1, "unpack": 1}


def test_the_notes_box_says_its_notes_again_in_the_new_language(app, h):
    """Notes are kept keyed in the session: the language switch renders the link's notes (and then the run's) in
    中文 and back, word for word as a 中文 link would have shown them."""
    from playground.ui.language import relabel, relabelled

    page = app.playground_page
    box = relabelled(page).index(page.notes)
    frames = open_link(h, "switch", model="tiny-lm", temperature="abc", top_p="7")
    zh = relabel(page, h.sessions, None, "zh", request("switch"))[box]
    assert zh == h.models.page_load(request("switch-zh", model="tiny-lm", temperature="abc", top_p="7", lang="zh"))[-1]
    assert "应为数字" in zh and "expected" not in zh
    assert relabel(page, h.sessions, None, "en", request("switch"))[box] == frames[0][1]
    pressed = press(h, UISettings(prompt="Hi", mode="sample", seed=None, max_new_tokens=2), "switch")
    zh = relabel(page, h.sessions, None, "zh", request("switch"))[box]
    assert "未指定种子" in zh and "abc" not in zh and "No seed" in pressed[-1][1]  # the press's own notes now


def test_a_stop_pressed_while_a_press_is_starting_ends_that_run(h):
    """Stop that arrives while the press is still starting (its model being resolved, its plan made: on a busy
    machine, seconds) ends that run at its first step: before, the run had no stop flag yet and ran to its end."""
    session = h.sessions.get("stop-starting")

    def lookup(*args):
        h.stream.stop(0.0, request("stop-starting"))  # the visitor's Stop, while the model is being resolved
        return h.models.model_for(*args)

    frames = list(play(session, lookup, UISettings(prompt="Hello", max_new_tokens=60)))
    run = frames[-1].run
    assert run.finish_reason == "stopped" and len(run.path) <= 1, (run.finish_reason, len(run.path))
    again = list(play(session, h.models.model_for, UISettings(prompt="Hello", max_new_tokens=6)))[-1].run
    assert again.finish_reason == "length" and len(again.path) == 6  # the next press runs as ever


def test_stop_in_slow_motion_ends_the_run_at_its_next_step_and_says_stopped(h):
    settings = UISettings(prompt="Hello", max_new_tokens=60, pace_ms=50)
    shown, stopped_at = [], None
    for live, _, _ in h.stream.generate(request("stop-pace"), 0.0, *[getattr(settings, f) for f in WIDGETS]):
        shown.append(live)
        if stopped_at is None and live["status"]["state"] == "running" and live["status"]["n"] >= 3:
            stopped_at = live["status"]["n"]
            h.stream.stop(0.0, request("stop-pace"))
    last = shown[-1]["status"]
    assert stopped_at is not None and last["state"] == "stopped" and last["reason"] == "stopped"
    path = []
    for live in shown:
        path = fold(path, live)
    assert last["n"] <= stopped_at + 1 and len(path) == last["n"]
