"""Every tab of the page is one declared `Tab`, found once by the one registry, in its section and order; a tab's
layout is checked when it is declared, and each control reads its own value."""

from __future__ import annotations

import pytest

from playground.app import experiments
from playground.app.panels import inspector
from playground.app.tab import Action, Out, Row, Tab, Widget, Words
from playground.app.tabs import BY_TAB, SECTIONS, TABS, checked, in_section


def test_every_tab_is_found_once_in_its_section_and_order():
    assert len(BY_TAB) == len(TABS) and {tab.section for tab in TABS} <= set(SECTIONS)
    assert [t.tab for t in in_section("watch")] == ["inspector", "attention"]
    assert [t.tab for t in in_section("inside")] == ["lessons", "positional"]
    assert [t.tab for t in in_section("experiment")] == [e.tab for e in experiments.EXPERIMENTS]
    assert [t.tab for t in in_section("machine")] == ["cache", "card"]
    # the class tools: one page of tabs of no view, as the Class tools tab shows them
    assert [t.tab for t in in_section("teacher")] == ["side_by_side", "game", "samples", "lens", "export"]
    assert not any(t.all_views() for t in in_section("teacher"))


def test_every_part_of_every_tab_has_its_own_name_and_element_id():
    names, ids = [], []
    for tab in TABS:
        names += [p.name for p in tab.parts()] + [r.name for r in tab.layout if isinstance(r, Row) and r.name]
        ids += [tab.elem_id] + [p.elem_id for p in tab.parts() if p.elem_id]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_a_tab_refuses_a_view_that_draws_outside_its_layout_and_a_button_that_reads_no_widget_of_it():
    view = inspector.VIEW  # draws caption, funnel, beam_tree, beam_table
    with pytest.raises(ValueError, match="lacks"):
        Tab(tab="t", elem_id="t-tab", section="watch", order=1, view=view, layout=(Out("caption", "markdown", "c"),))
    with pytest.raises(ValueError, match="no widget of it"):
        Tab(tab="t", elem_id="t-tab", section="watch", order=1, view=None,
            layout=(Words("w", ("w",)), Action("go", "press", "go", "go-btn", inputs=("nope",))))
    # the registry's own checks: a known section, an id of its own
    with pytest.raises(ValueError, match="no section 'nowhere'"):
        checked([Tab(tab="t", elem_id="t-tab", section="nowhere", order=1, view=None, layout=())])
    with pytest.raises(ValueError, match="share an id"):
        checked([inspector.TAB, inspector.TAB])
    assert checked([BY_TAB["card"], inspector.TAB]) == (inspector.TAB, BY_TAB["card"])  # the page's order


def test_each_control_reads_its_own_value_whatever_the_page_holds():
    layer = Widget("l", "slider", "layer", "l", default=0, view=True, reads="whole")
    count = Widget("n", "slider", "n", "n", default=64, view=True, reads="count")
    base = Widget("b", "number", "b", "b", default=1000, view=True, reads="real")
    sink = Widget("s", "checkbox", "s", "s", default=False, view=True, reads="flag")
    kind = Widget("k", "radio", "k", "k", default="self", view=True, reads="text")
    query = Widget("q", "slider", "q", "q", default=0, view=True, reads="whole", moved=True)
    raw = Widget("r", "radio", "r", "r", view=True)
    page = {"l": "3", "n": 0, "b": "abc", "s": 1, "k": 7, "q": 5, "r": "original"}
    assert [w.read(page) for w in (layer, count, base, sink, kind, raw)] == [3, 64, 1000, True, "self", "original"]
    assert query.read(page) == 5 and query.read(page, moved=False) is None and query.read({}) is None
    assert layer.read({}) == 0 and raw.read({}) is None
