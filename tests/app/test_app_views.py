"""Every View of the app core without Gradio: what each draws for every selection, before and after a run, while
it streams, after a model switch, on a branch, a fork and a link, in English and 中文."""

from __future__ import annotations

import re
import subprocess
import sys
from urllib.parse import parse_qsl

import numpy as np
import plotly.graph_objects as go
import pytest

from playground.analysis import attribute_step
from playground.app import lab, views
from playground.app.panels.lessons import VIEWS as LESSON_VIEWS
from playground.app.play import play_link
from playground.app.session import Session
from playground.app.settings import UISettings, from_query
from playground.app.tabs import BY_TAB
from playground.app.views import Selection, Slot, View
from playground.app.words import t
from playground.checkpoints.loader import load_model
from playground.interventions import Ablate
from playground.viz import causal
from tests.app.forks import fork_edit
from tests.app.test_app_run import play
from tests.ui_fixtures import save_tiny_decoder

SETTINGS = UISettings(model="a", prompt="Hello there", max_new_tokens=6)
CJK = re.compile(r"[\u4e00-\u9fff]")
VIEWS = views.all_views()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("w")
    return {"a": load_model(save_tiny_decoder(root / "a")), "b": load_model(save_tiny_decoder(root / "b", seed=1))}


def model_for(models):
    return lambda name, dtype, owner: models[name]


def show(models, view: View, session: Session, sel: Selection | None = None) -> dict[str, Slot]:
    """The view as the page draws it: its context from the session, its selection at the session's step."""
    ctx = views.context_for(view, session, model_for(models))
    return views.show(view, ctx, sel or Selection(step=session.selected_step))


def caption(models, view: View, session: Session, sel: Selection | None = None) -> str:
    return show(models, view, session, sel)[view.caption_slot].value


def with_run(models, lang: str = "en", **knobs) -> Session:
    session = Session(model="a", lang=lang)
    play(session, models["a"], UISettings(**{**SETTINGS.__dict__, "lang": lang, **knobs}))
    return session


def test_the_views_core_never_imports_gradio():
    code = "import sys, playground.app.views; assert 'gradio' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_view_names_what_it_needs_and_draws_only_its_own_slots():
    assert [v.name for v in views.PANELS.values()] == ["inspector", "attention", "positional", "lab", "kvlab",
                                                     "precision", "speculative", "reuse", "cache", "card"]
    assert [v.name for v in LESSON_VIEWS.values()] == [
        f"lesson:{n}" for n in ("steps", "lens", "kv", "memory", "patterns", "sdpa", "anatomy", "training", "lab", "serving")]
    assert views.open_view("lessons", "memory").name == "lesson:memory" and views.open_view("nope").name == "inspector"
    assert views.open_view("lessons", "nope").name == "lesson:steps"
    assert {v.name for v in VIEWS if v.follows_step} == {
        "inspector", "attention", "cache", "positional", "lab", "speculative", "lesson:steps", "lesson:lens", "lesson:kv",
        "lesson:memory", "lesson:anatomy", "lesson:lab", "lesson:serving"}
    assert {v.name for v in VIEWS if "finished" in v.needs} == {
        "lab", "kvlab", "precision", "speculative", "reuse", *(f"lesson:{n}" for n in ("steps", "lens", "kv", "memory", "patterns", "anatomy"))}
    with pytest.raises(ValueError, match="unknown parts"):
        View("x", "x", frozenset({"weather"}), ("a",), None, None, None, None)
    names = views.slot_names()
    assert len(names) == len(set(names)) and all(set(v.slots) <= set(names) for v in VIEWS)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.name)
def test_before_any_model_every_view_says_what_it_waits_for(view, lang, models):
    slots = show(models, view, Session(lang=lang))
    assert set(slots) <= set(view.slots)
    if view.name in ("card", "positional"):  # these wait for the first model's load, as they are
        assert slots[view.caption_slot].changes == {}
    else:
        words = t(view.waits, lang) if views.reads_run(view) else t("nothing_yet", lang)
        assert slots[view.caption_slot].value == words


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.name)
def test_with_a_model_and_no_run_a_view_draws_or_waits_for_the_run(view, lang, models):
    slots = show(models, view, Session(model="a", lang=lang))
    text = slots[view.caption_slot].value
    if views.reads_run(view):
        assert text == t(view.waits, lang)
    else:
        assert isinstance(text, str) and text and (CJK.search(text) if lang == "zh" else True)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.name)
def test_every_view_draws_each_step_of_a_finished_run_in_the_visitor_s_language(view, lang, models):
    session = with_run(models, lang)
    run = session.current
    drawn = {}
    last = len(run.path) - 1
    for step in (None, 0, 2, last, 99):  # the newest, two steps, the last and one past the end (clamped)
        slots = show(models, view, session, Selection(step=step))
        assert set(slots) <= set(view.slots) and view.caption_slot in slots
        text = slots[view.caption_slot].value
        assert isinstance(text, str) and text and "Traceback" not in text
        if lang == "zh":
            assert CJK.search(text), text[:200]
        figures = [s.value for s in slots.values() if isinstance(s.value, go.Figure)]
        for fig in figures:
            if lang == "zh" and fig.layout.title.text:
                assert CJK.search(fig.layout.title.text), fig.layout.title.text
        drawn[step] = text
    assert drawn[99] == drawn[None] == drawn[last]  # no selection: the newest token
    if view.name in ("inspector", "cache", "lesson:steps", "lesson:lens"):
        assert drawn[0] != drawn[2]  # the view follows the selected step


def test_the_inspector_names_the_selected_token_and_shows_beams_for_beam_search(models):
    session = with_run(models)
    run = session.current
    slots = show(models, views.PANELS["inspector"], session, Selection(step=1))
    assert slots["caption"].value.startswith("Step 2") and f"(id {run.path[1].token_id})" in slots["caption"].value
    assert slots["beam_tree"].visible is False and slots["funnel"].value.layout.title.text.startswith("Step 2")
    assert "sampling pipeline" in slots["funnel"].value.layout.title.text
    beam = with_run(models, mode="beam", num_beams=3)
    slots = show(models, views.PANELS["inspector"], beam, Selection(step=2))
    assert slots["beam_tree"].visible and slots["beam_table"].visible
    # beams sample nothing: the chart says what its candidates are (issue 36 point 5)
    assert slots["funnel"].value.layout.title.text.replace("<br>", " ") == t("funnel_title_beam", "en", step=3)
    assert "sampling pipeline" not in slots["funnel"].value.layout.title.text


def test_all_heads_clamp_the_selection_and_follow_the_step_unless_a_query_is_picked(models):
    session = with_run(models)
    run, c = session.current, models["a"].config
    view = views.PANELS["attention"]
    slots = show(models, view, session, Selection(1, {"att_layer": 99, "att_head": -3, "att_view": "group",
                                                      "att_scale": "log"}))
    assert slots["att_layer"].value == c.n_layers - 1 and slots["att_head"].value == 0
    assert slots["att_query"].value == len(run.prefix_ids) - 1 + 1 and "GQA" in slots["att_note"].value
    asked = show(models, view, session, Selection(1, {"att_layer": 1, "att_head": 2, "att_query": 3}))
    assert asked["att_query"].value == 3 and "value" not in asked["att_layer"].changes  # in range: left as typed
    maps = run.attention_maps(models["a"], "self", 1)
    np.testing.assert_allclose(np.asarray(asked["att_heat"].value.data[0].customdata, dtype=float), maps[2], atol=1e-6)


def test_while_a_run_streams_the_views_that_read_it_whole_wait_and_the_others_draw(models):
    session = Session(model="a")
    play(session, models["a"], SETTINGS)
    session.current.finish_reason = None  # as it is between two events of a run still streaming
    assert session.current.running
    assert caption(models, LESSON_VIEWS["steps"], session) == t("lesson_after_run", "en")
    assert caption(models, views.PANELS["lab"], session) == t("lab_after_run", "en")
    assert caption(models, views.PANELS["inspector"], session).startswith("Step 6")


def test_after_a_model_switch_the_run_is_read_with_its_own_model_and_the_model_views_read_the_new_one(models):
    session = with_run(models)
    session.model = "b"  # the visitor switched models; the run on screen is still model a's
    inspector = views.context_for(views.PANELS["inspector"], session, model_for(models))
    positional = views.context_for(views.PANELS["positional"], session, model_for(models))
    assert inspector.lm is models["a"] and inspector.run is session.current
    assert positional.lm is models["b"] and positional.run is None  # a run of another model says nothing of b
    lesson = views.context_for(LESSON_VIEWS["steps"], session, model_for(models))
    assert lesson.lm is models["a"]  # a lesson on the run reads it with the model that made it
    assert t("pe_shift_needs_run", "en") in caption(models, views.PANELS["positional"], session)
    session.model = "a"
    assert t("pe_shift_needs_run", "en") not in caption(models, views.PANELS["positional"], session)


def test_a_branch_is_drawn_at_its_own_steps(models):
    session = with_run(models)
    parent = session.current
    other = next(c.token_id for c in parent.path[2].candidates if c.token_id != parent.path[2].token_id)
    child = play(session, models["a"], parent.settings, parent=(parent, 2, [other]))
    assert session.current is child
    text = caption(models, views.PANELS["inspector"], session, Selection(step=0))
    assert f"(id {child.path[0].token_id})" in text
    assert caption(models, views.PANELS["lab"], session) == t("lab_plain", "en")  # a branch is no edit


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_fork_names_its_run_and_switches_between_the_edited_and_the_original_run(models, lang):
    lm = models["a"]
    session = with_run(models, lang)
    original = session.current
    session.selected_step = 3
    fork = fork_edit(session, lm, Ablate(1, head=3), run=original)
    session.selected_step = 3
    view = views.PANELS["lab"]
    shown = show(models, view, session, Selection(step=3))
    md, attr_md = shown["lab_md"].value, shown["lab_attr_md"].value
    assert attr_md.startswith(lab.reads(fork, 3, lang)) and md.startswith(lab.reads(fork, 3, lang))
    assert shown["lab_div"].visible and shown["lab_run"].visible and shown["lab_run"].value == "shown"
    assert [v for _, v in shown["lab_run"].choices] == ["shown", "original"]
    assert [str(n) in label for (label, _), n in zip(shown["lab_run"].choices, (fork.number, original.number))] == [True] * 2
    switched = show(models, view, session, Selection(step=3, values={"lab_run": "original"}))
    assert switched["lab_attr_md"].value.startswith(lab.reads(original, 3, lang))  # "In run 1 (no edit), step 4:"
    assert switched["lab_md"].value == md and switched["lab_run"].value == "original"  # the divergence is the pair's
    for run, text in ((original, switched["lab_attr_md"].value), (fork, attr_md)):  # each side's own attribution
        ref = attribute_step(lm, lab.as_result(run), 3).to_dict()
        assert text == lab.reads(run, 3, lang) + " " + causal.attribution_caption(ref, run.path[3].token_text,
                                                                                   lang=lang)
    plain = with_run(models, lang)
    assert show(models, view, plain)["lab_run"].visible is False  # no edit: nothing to switch to


def test_a_link_with_edits_replays_the_plain_run_then_the_edited_one_and_the_lab_compares_them(models):
    source = with_run(models)
    fork_edit(source, models["a"], Ablate(0, head=1))
    params = dict(parse_qsl(source.link_query().lstrip("?")))
    settings, notes = from_query(params)
    session = Session(model="a")
    session.opened_from(params, notes, settings)
    runs = [out.run for out in play_link(session, lambda *a: models["a"], settings, pace=False) if out.run.finish_reason]
    assert [r.number for r in runs] == [1, 2] and runs[1].origin == 1 and runs[1].experiment == "causal"
    md = caption(models, views.PANELS["lab"], session, Selection(step=2))
    assert t("lab_edited", "en", edit=lab.describe_edits(runs[1].settings.edits, "en"), n=runs[0].number) in md


def test_a_lesson_view_is_the_registry_s_lesson(models):
    from playground.app import lessons

    session = with_run(models, "zh")
    for name in ("steps", "memory", "sdpa", "training"):
        view = LESSON_VIEWS[name]
        slots = show(models, view, session, Selection(step=1))
        direct = lessons.show(name, models["a"], session.current, 1, lessons.Inputs(), "zh")
        assert slots["lesson_md"].value == direct.caption
        assert [slots[k].visible for k in ("memory_row", "time_cache", "measure_sdpa")] == [
            name == "memory", False, name == "sdpa"]
        assert sum(slots[k].visible is True for k in ("lesson_plot1", "lesson_plot2")) == len(direct.figures)


def test_the_selection_reads_the_page_s_controls_whatever_they_hold():
    page = {"att_layer": 2.0, "att_head": "3", "att_query": 5, "att_sink": True, "lesson_batch": None, "pe_base": "abc",
            "pe_length": 0, "lab_run": "original", "att_kind": 7}

    def of(tab: str, moved: bool = False, values: dict = page) -> dict:
        return Selection.from_controls(values, 4, moved=moved, controls=BY_TAB[tab].view_widgets()).values

    heads = of("attention")
    assert [heads[k] for k in ("att_layer", "att_head", "att_query", "att_sink", "att_kind")] == [2, 3, None, True, "self"]
    assert of("lab") == {"lab_run": "original"}  # an experiment's control, as the page holds it (only when sent)
    assert of("lessons")["lesson_batch"] == 1 and of("positional") == {"pe_base": 1000, "pe_length": 64, "pe_pair": 0}
    assert of("attention", True)["att_query"] == 5 and of("attention", True, {})["att_query"] is None


def test_all_heads_opens_at_the_live_panel_s_layer_then_follows_the_last_one_moved(models):
    """Issue 36 point 4: All heads opened at layer 0 while the live panel showed the last layer."""
    session = with_run(models)
    session.key = "all-heads-follows-the-live-panel"
    last = models["a"].config.n_layers - 1
    view = views.PANELS["attention"]

    def layer_shown(slider: int, step: int = 1) -> int:
        slots = show(models, view, session, Selection(step, {"att_layer": slider}))
        return slots["att_layer"].value if "value" in slots["att_layer"].changes else slider

    assert last > 0 and layer_shown(0) == last  # the page's slider starts at 0; the live panel shows the last layer
    session.set_view("self", 0, "mean")  # the live panel's layer is moved
    assert layer_shown(last) == 0
    assert layer_shown(1) == 1 and layer_shown(1, step=2) == 1  # the tab's own slider, kept when the step moves
    session.set_view("self", last, "mean")
    assert layer_shown(1) == last
