"""One path in, without a browser: the deep views' sections hold every view's tab once, under their old element
ids; the page's script names the tab on screen and the server opens that view; the guided path's steps point at
elements of the page, in both languages; projector mode is a link field a copied link keeps."""

from __future__ import annotations

import html
import json
import re
from types import SimpleNamespace

import gradio as gr
import pytest

from playground.app import experiments, views
from playground.app.settings import WIDGETS, from_query, to_query
from playground.app.words import STRINGS, t
from playground.ui.guide import STEPS, guide_html, steps
from playground.ui.layout import build_page
from playground.ui.sections import SECTION_OF, SECTIONS, section_of
from tests.ui_fixtures import tiny_lm_handlers

# every element id of the views' tabs before the sections: links, tests and the public contract name them
KEPT_IDS = ("inspector-tab", "attention-tab", "cache-tab", "pe-tab", "lessons-tab", "card-tab", "teacher-tab",
            *(e.elem_id for e in experiments.EXPERIMENTS))


@pytest.fixture(scope="module")
def page():
    return build_page()


def ancestors(block) -> list:
    chain = []
    while block.parent is not None:
        block = block.parent
        chain.append(block)
    return chain


def test_every_view_tab_is_in_exactly_one_section():
    held = [tab for s in SECTIONS for tab in s.tabs]
    assert sorted(held) == sorted(views.TABS) and len(held) == len(set(held))
    assert [s.name for s in SECTIONS if not s.tabs] == ["teacher"]  # Class tools: one page, no tabs of its own
    assert section_of("attention") == "watch" and section_of("lab") == "experiment" and section_of("teacher") is None
    assert 4 <= len(SECTIONS) <= 5  # a few, each one click away


def test_the_page_nests_each_tab_in_its_section_and_keeps_its_element_id(page):
    by_id = {b.elem_id: b for b in page.demo.blocks.values() if getattr(b, "elem_id", None)}
    assert all(elem_id in by_id for elem_id in KEPT_IDS), [i for i in KEPT_IDS if i not in by_id]
    outer = by_id["deep-views"]
    assert isinstance(outer, gr.Tabs) and outer.overflow_behavior == "wrap"
    assert [c.elem_id for c in outer.children] == [s.elem_id if s.tabs else "teacher-tab" for s in SECTIONS]
    for section in (s for s in SECTIONS if s.tabs):
        inner = by_id[f"{section.name}-tabs"]
        assert isinstance(inner, gr.Tabs) and inner.overflow_behavior == "wrap"
        assert by_id[section.elem_id] in ancestors(inner)
        assert [c.id for c in inner.children if isinstance(c, gr.Tab)] == list(section.tabs)
    assert by_id["lessons-tab"] in ancestors(by_id["lesson-pick"])  # the lessons are one thing in one place
    assert by_id["topbar"] in ancestors(by_id["start-here"]) and by_id["topbar"] in ancestors(by_id["projector"])


def test_each_section_and_hint_speaks_both_languages(page):
    for section in (s for s in SECTIONS if s.tabs):
        en, zh = STRINGS[f"section_{section.name}"]
        assert en and zh and en != zh
        assert page.labels[f"section_{section.name}"] == (f"section_{section.name}", None)
        assert page.texts[f"section_{section.name}_hint"]("zh") == t(f"section_{section.name}_hint", "zh")
    # the lesson and the lab are two things with two names; the lab no longer points at a tab that is not there
    assert t("lesson_lab") != t("tab_lab") and not t("lesson_lab").startswith(t("tab_lab"))
    assert "Attention tab" not in t("lab_plain") and t("tab_attention") in t("lab_plain")
    assert t("tab_attention", "zh") in t("lab_plain", "zh")


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    return tiny_lm_handlers(tmp_path_factory)


def test_the_tab_the_page_names_becomes_the_open_view(h):
    request = gr.Request(session_hash="sections")
    session = h.sessions.get("sections")
    assert session.deep_tab == "inspector"
    h.models.load("tiny-lm", "float32", "en", request)  # the visitor's model: the card and the lessons read it
    for tab in ("attention", "kvlab", "card", "lessons"):
        drawn = h.views.tab_selected(tab, {}, request)
        assert session.deep_tab == tab
        assert set(drawn) <= set(views.open_view(tab, session.lesson).slots) and drawn
    for junk in ("teacher", "nope", ""):  # not a tab of views: ignored
        assert h.views.tab_selected(junk, {}, request) == {}
        assert session.deep_tab == "lessons"


def test_with_class_tools_open_a_run_draws_no_view(h):
    """The page says NO_VIEW when it opens a section of no views: a run then leaves every view waiting, drawing
    none (before, the view last open was computed after every run, off screen); the next tab opened draws again."""
    request = gr.Request(session_hash="tools-open")
    session = h.sessions.get("tools-open")
    h.models.load("tiny-lm", "float32", "en", request)
    assert h.views.tab_selected(views.NO_VIEW, {}, request) == {} and session.deep_tab == views.NO_VIEW
    settings = from_query({"prompt": "Hello", "max_new_tokens": "4"})[0]
    frames = list(h.stream.generate(request, 0.0, *[getattr(settings, f) for f in WIDGETS]))
    assert frames[-1][0]["status"]["state"] == "done"
    waiting = t("view_pending", "en", n=session.current.number)
    redrawn = h.views.redraw({}, request)
    captions = {v.caption_slot for v in views.all_views() if v.caption_slot in redrawn}
    assert captions and all(redrawn[c]["value"] == waiting for c in captions)
    assert h.views.select_step(SimpleNamespace(_data={"run": session.current.token}), {}, request) == {}
    drawn = h.views.tab_selected("inspector", {}, request)
    assert drawn and all(u.get("value") != waiting for u in drawn.values() if isinstance(u, dict))


def test_the_sections_script_knows_which_sections_hold_no_views():
    from playground.ui.sections import SECTIONS_JS
    assert SECTIONS_JS.startswith('const VIEWLESS = ["teacher"];\nconst NO_VIEW = "none";\n')


def test_the_guided_path_walks_generate_tokens_token_temperature_attention_cache_fork_game(page):
    assert [s.name for s in STEPS] == ["generate", "tokens", "token", "temperature", "attention", "cache", "fork",
                                       "game"]
    elem_ids = {b.elem_id for b in page.demo.blocks.values() if getattr(b, "elem_id", None)}
    sections = {s.name for s in SECTIONS}
    for step in STEPS:
        for selector in (step.target, *step.keep):  # what a step points at and keeps in view is on the page
            target = selector.lstrip("#")
            assert target in elem_ids or target in ("token-stream", "step-panels"), step  # the live screen's own
        if step.tab:
            assert section_of(step.tab) is not None
        if step.section:  # a section of no tabs (Class tools) is opened by itself
            assert step.tab is None and step.section in sections
        if step.live:  # a live step's mark is written into one of the page's elements, whose sliders it sets
            assert step.live.split()[0].lstrip("#") in elem_ids
            assert all(sel.lstrip("#") in elem_ids for sel, _ in step.sets)
    for lang in ("en", "zh"):
        shown = steps(lang)
        assert [s["text"] for s in shown] == [t(f"guide_{s.name}", lang) for s in STEPS]
        assert [s["section"] for s in shown] == [SECTION_OF.get(s.tab) if s.tab else s.section for s in STEPS]
        text = guide_html(lang)
        data = re.search(r'data-steps="([^"]*)"', text).group(1)
        assert json.loads(html.unescape(data)) == shown  # the words survive the attribute's escaping
        assert t("start_here", lang) in text and t("guide_next", lang) in text


def test_projector_mode_is_a_link_field_a_copied_link_keeps():
    assert "projector" in WIDGETS  # the page's toggle: Generate and Copy link read it
    settings, notes = from_query({"projector": "1"})
    assert settings.projector is True and not notes
    assert "projector=true" in to_query(settings)
    assert "projector" not in to_query(from_query({})[0])  # off: links stay as they were
    settings, notes = from_query({"projector": "maybe"})
    assert settings.projector is False and len(notes) == 1
