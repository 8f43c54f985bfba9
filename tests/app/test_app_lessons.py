"""The lessons registry of the app core without Gradio: every lesson computes, draws and captions a real
run of a tiny checkpoint; what each needs is checked before any work; the controls come back as data."""

from __future__ import annotations

import subprocess
import sys

import pytest

from playground import analysis
from playground.app import lessons
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.app.words import t
from playground.checkpoints.loader import load_model
from playground.viz import attention_steps as v_steps
from tests.app.test_app_run import play
from tests.ui_fixtures import save_tiny_seq2seq


@pytest.fixture(scope="module")
def run(lm):
    return play(Session(), lm, UISettings(prompt="Hello there", max_new_tokens=6))


def test_the_registry_names_every_lesson_once_with_what_it_needs():
    assert list(lessons.LESSONS) == ["steps", "lens", "kv", "memory", "patterns", "sdpa", "anatomy", "training", "lab",
                                    "serving"]
    assert {n for n, x in lessons.LESSONS.items() if not x.needs_run} == {"sdpa", "training", "lab", "serving"}
    assert {n for n, x in lessons.LESSONS.items() if x.follows_step} == {"steps", "lens", "kv", "memory", "anatomy", "lab", "serving"}


def test_the_lab_lesson_tells_its_walk_before_a_run_and_why_the_token_won_after(lm, run):
    before = lessons.show("lab", lm, None, None, lessons.Inputs(), "zh")
    assert before.caption.endswith(t("lab_needs_run", "zh")) and before.figures == []
    after = lessons.show("lab", lm, run, 2, lessons.Inputs(), "en")
    assert after.caption.startswith(t("lesson_lab_text", "en")) and len(after.figures) == 1


@pytest.mark.parametrize("name", list(lessons.LESSONS))
def test_a_lesson_waits_for_what_it_needs(name, lm, run):
    needs = lessons.LESSONS[name].needs_run
    assert lessons.waiting(name, None, "zh") == (t("lesson_needs_run", "zh") if needs else None)
    assert lessons.waiting(name, run, "en") is None


@pytest.mark.parametrize("name", list(lessons.LESSONS))
def test_every_lesson_draws_the_run_at_the_selected_step(name, lm, run):
    shown = lessons.show(name, lm, run, 2, lessons.Inputs(layer=99, head=-4, kind="cross"), "en")
    assert isinstance(shown.caption, str) and shown.caption
    assert all(hasattr(fig, "to_dict") for fig in shown.figures)
    c = shown.controls
    assert c.kinds == ["self"] and not c.kind_shown  # a decoder has one attention kind
    assert c.layer_max == max(1, lm.config.n_layers - 1) and c.layer_head == (name in ("steps", "patterns"))
    if name == "memory":
        presets = list(analysis.presets(lm))  # in English the labels are the presets' own names
        assert c.presets == list(zip(presets, presets)) and c.preset == presets[0]
    else:
        assert c.presets is None


def test_the_steps_lesson_follows_the_selected_step_and_clamps_layer_and_head(lm, run):
    at = {step: lessons.show("steps", lm, run, step, lessons.Inputs(layer=99, head=99)).caption for step in (1, 4)}
    assert at[1] != at[4]
    cache = run.analysis_cache(lm)
    clamped = analysis.attention_steps(lm, cache.result, 1, lm.config.n_layers - 1, lm.config.n_heads - 1, "self",
                                       cache=cache)
    assert at[1] == v_steps.attention_steps_caption(clamped)


def test_the_sdpa_lesson_asks_for_the_measurement_until_it_is_taken(lm):
    shown = lessons.show("sdpa", lm, None, None, lessons.Inputs(), "zh")
    assert shown.caption == t("lesson_sdpa_press", "zh") and shown.figures == []
    data = analysis.sdpa_vs_explicit(lm)
    shown = lessons.show("sdpa", lm, None, None, lessons.Inputs(), "en", sdpa=data)
    assert shown.caption != t("lesson_sdpa_press", "en") and len(shown.figures) == 1


def test_a_seq2seq_model_offers_its_three_attention_kinds(tmp_path):
    s2s = load_model(save_tiny_seq2seq(tmp_path / "tiny.safetensors"))
    run = play(Session(), s2s, UISettings(prompt="Hello", max_new_tokens=4))
    shown = lessons.show("steps", s2s, run, 1, lessons.Inputs(kind="encoder"))
    assert shown.controls.kinds == ["cross", "self", "encoder"] and shown.controls.kind_shown
    assert shown.controls.layer_max == max(1, s2s.config.n_encoder_layers - 1)


def test_the_lessons_core_never_imports_gradio():
    code = "import sys, playground.app.lessons; assert 'gradio' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_kv_presets_are_labelled_in_the_visitor_s_language(lm, run):
    from playground.analysis.kv_memory import WORKED_EXAMPLES

    en = lessons.show("memory", lm, run, 1, lessons.Inputs(), "en").controls.presets
    zh = lessons.show("memory", lm, run, 1, lessons.Inputs(), "zh").controls.presets
    assert [v for _, v in zh] == [v for _, v in en] == list(analysis.presets(lm))  # the values stay the keys
    assert all(label != value and any("\u4e00" <= ch <= "\u9fff" for ch in label) for label, value in zh)
    assert set(WORKED_EXAMPLES) <= set(lessons._PRESET_WORDS)  # every worked example has its words


@pytest.mark.parametrize("lang, words", [("en", "step {n}"), ("zh", "第 {n} 步")])
def test_the_lessons_count_steps_from_1_as_the_live_screen_does(lm, run, lang, words):
    """The live screen shows data-step 2 as "step 3" (describe.step_caption, live.js): so do the lessons'
    titles, captions and step axes."""
    from playground.app import describe

    assert "3" in describe.step_caption(run.path[2], lang)
    said = words.format(n=3)
    for name in ("steps", "lens", "anatomy"):
        shown = lessons.show(name, lm, run, 2, lessons.Inputs(), lang)
        titles = [fig.layout.title.text or "" for fig in shown.figures]
        assert said in shown.caption + " ".join(titles), name
        assert words.format(n=2) not in shown.caption + " ".join(titles), name
    strip = lessons.show("lens", lm, run, 2, lessons.Inputs(), lang).figures[1]
    assert list(strip.data[0].customdata[0, :, 0])[:3] == [
        f"{i + 1}: {run.path[i].token_text}" for i in range(3)]  # each column's step as the stream counts it


def test_the_beam_tree_and_table_count_steps_from_1():
    from playground.viz import sampling

    beams = [[{"tokens": "a", "score": -1.0}, {"tokens": "b", "score": -2.0}],
             [{"tokens": "ab", "score": -1.5}, {"tokens": "aa", "score": -2.5, "finished": True}]]
    table = sampling.beam_table(beams)
    assert list(table.data[0].cells.values[0]) == [1, 1, 2, 2]
    tree = sampling.beam_tree(beams)
    nodes = next(tr for tr in tree.data if tr.mode and "markers" in tr.mode)
    assert sorted(set(nodes.x)) == [1, 2]
