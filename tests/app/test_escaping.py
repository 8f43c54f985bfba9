"""Every string a checkpoint controls is shown as text, never as markup, in every element of the page.

A hostile checkpoint (our own format) carries HTML in every config string, in its card, in every
token and special token, and in its chat template. It is uploaded, loaded and run through every
handler; nothing that comes back for rendering may contain a live tag.
"""

from __future__ import annotations

import json
import re

import gradio as gr
import pytest

from playground.app.frames import entries
from playground.app.settings import FIELDS, UISettings
from playground.ui import build_app
from tests.ui_fixtures import HOSTILE_TOKENS as TOKENS
from tests.ui_fixtures import save_hostile_checkpoint

LIVE_TAG = re.compile(r"<\s*(img|script|form|input|iframe|svg|a|b|h1|style|div)\b", re.I)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return save_hostile_checkpoint(tmp_path_factory.mktemp("gradio-tmp") / "model.safetensors")


def _strings(value) -> list[str]:
    """Every string in an update, a figure or a nested value (what would reach the page)."""
    if hasattr(value, "to_plotly_json"):
        return _strings(json.loads(value.to_json()))
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _no_live_tags(label: str, text) -> None:
    for s in _strings(text):
        assert not LIVE_TAG.search(s), f"{label}: {s[:200]}"


def test_every_element_shows_checkpoint_text_as_text(hostile, tmp_path):
    (tmp_path / "weights").mkdir()
    app = build_app(tmp_path / "weights", tmp_path / "uploads")
    h = app.playground_handlers
    request = gr.Request(session_hash="visitor")
    loaded = h.models.upload([str(hostile)], "float32", "en", request)
    name = loaded["model"]["value"]
    assert name.startswith("upload/"), loaded["model_status"]
    markup = {"status": loaded["model_status"], "about": loaded["model_about"], "card": loaded["card"]}  # Markdown / HTML
    assert "&lt;img" in loaded["card"] and "&lt;img" in loaded["model_about"]  # shown, as text
    lm = h.models.model_for(name, "float32", "visitor")
    assert set(lm.checkpoint_texts()) >= {"config.family", "config.extra.note"}  # the hostile fields are real
    for lang in ("en", "zh"):
        status, about, _, card = h.models.refresh(lang, "", request)
        markup.update({f"status {lang}": status, f"about {lang}": about, f"card {lang}": card})
    settings = UISettings(model=name, prompt=" ".join(TOKENS), mode="sample", seed=1, max_new_tokens=12, chat=True)
    frames = list(h.stream.generate(request, 0.0, *[getattr(settings, f) for f in FIELDS]))
    run = h.sessions.get("visitor").current
    assert run is not None and run.path, frames[-1]
    assert any(s.token_text in TOKENS for s in run.path)  # hostile tokens were really generated
    markup.update({f"notes {i}": f[1] for i, f in enumerate(frames)})
    session = h.sessions.get("visitor")
    figures = []
    for tab in ("inspector", "attention", "cache"):
        session.deep_tab = tab
        out = h.views.redraw({"att_kind": "self", "att_view": "head", "att_scale": "linear"}, request)
        markup.update({f"{tab} {k}": out[k]["value"] for k in ("caption", "att_note", "kv") if k in out})
        figures += [out[k] for k in ("funnel", "att_grid", "att_heat", "att_row", "att_summary", "growth") if k in out]
    session.deep_tab = "positional"
    markup["pe"] = h.views.redraw({"pe_length": 32, "pe_base": 1000, "pe_pair": 0}, request)["pe_md"]["value"]
    for lesson in ("steps", "lens", "kv", "memory", "patterns", "anatomy", "training"):
        out = h.views.pick_lesson(lesson, {}, request)
        markup[f"lesson {lesson}"] = out["lesson_md"]["value"]
        figures += [out["lesson_plot1"], out["lesson_plot2"]]
    for label, text in markup.items():
        _no_live_tags(label, text)
    # Figures: plotly renders a few tags (<b>, <br>, <a>) in its text, so token text must arrive escaped.
    for fig in figures:
        value = fig.get("value", fig) if isinstance(fig, dict) else fig
        if value is None or isinstance(value, dict) and value.get("__type__"):
            continue
        for text in _strings(value):
            assert "<img" not in text and "<script" not in text and "<a href" not in text, text[:200]
    sent = [text for f in frames for text in _strings(entries(f[0]))]  # each frame's new entries
    assert any(t in sent for t in TOKENS)  # the page receives tokens as text, to escape itself
