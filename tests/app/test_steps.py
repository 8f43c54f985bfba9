"""One step numbering (issue 29, item 2): for one run and one selected step, the live screen, the inspector,
the beam tree and its table, the KV chart, the lessons and the lab all name the same step number, the one
`Run.step_number` gives (step 1 is the first generated token), and "Why the KV cache helps" speaks of that
one step (one T + 1) in both of its paragraphs."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from playground import analysis, viz
from playground.app import describe, frames, lab
from playground.app.panels import cache as cache_view
from playground.app.panels import inspector as inspector_view
from playground.app.play import play_link
from playground.app.session import LiveView, Session
from playground.app.settings import UISettings, from_query
from playground.app.view import Context, Selection
from playground.app.words import t
from playground.steps import FIRST_STEP, step_index, step_number
from playground.viz import anatomy as v_anatomy
from playground.viz import attention_steps as v_steps
from playground.viz import kv_lesson as v_kv
from playground.viz import logit_lens as v_lens
from tests.app.test_app_run import play

SELECTED = 5  # the engine's index of the selected step: the sixth new token
NEW = 8


def test_the_rule():
    assert FIRST_STEP == 1 and step_number(0) == 1 and step_index(1) == 0
    # the words shown once on the page say what step 1 is, in both languages
    assert "step 1 = the first new token" in t("legend_hint", "en") and "第 1 步 = 第一个新 token" in t("legend_hint", "zh")


def test_the_live_screen_counts_the_same_way():
    """live.js reads every step number from the server's count (`first_step`, Run.step_number), never adding 1
    by itself: a branch's numbers continue its parent's."""
    script = (Path(__file__).resolve().parents[2] / "playground/ui/assets/live.js").read_text(encoding="utf-8")
    shown = re.findall(r'tr\("(step_of|branch_here|kv_at_step)", \{ step: stepNo\(v, step\)', script)
    assert sorted(shown) == ["branch_here", "kv_at_step", "step_of"]
    assert "step ${stepNo(v, step)}" in script and "step: b.step })" in script
    assert not re.search(r"step \+ 1|step: b\.step \+", script)


@pytest.fixture(scope="module")
def greedy(lm):  # noqa: F811
    return play(Session(), lm, UISettings(prompt="Hello there", max_new_tokens=NEW, top_candidates=4))


@pytest.fixture(scope="module")
def beam(lm):  # noqa: F811
    return play(Session(), lm, UISettings(prompt="Hello there", mode="beam", num_beams=3, max_new_tokens=NEW))


def test_inspector_kv_chart_and_lab_name_the_live_screen_s_step(greedy, lm):  # noqa: F811
    assert greedy.step_number(SELECTED) == 6 and step_index(greedy.step_number(SELECTED)) == SELECTED
    number = greedy.step_number(greedy.step(SELECTED))
    assert t("step_of", "en", step=number, n=len(greedy.path)) == f"Step 6 of {NEW}"
    assert describe.step_caption(greedy.path[SELECTED], "en").startswith("Step 6:")
    assert lab.reads(greedy, SELECTED, "en").endswith("step 6:")
    steps, used, _, _ = describe.growth_series(greedy.events)
    assert steps == list(range(1, NEW + 1))  # the generation step, not the cache's length
    fig = viz.cache_growth(*describe.growth_series(greedy.events))
    assert list(fig.data[0].x)[SELECTED] == 6 and "step 1 = the first new token" in fig.layout.xaxis.title.text
    # the cache at step 6 holds the prompt and the five tokens chosen before it
    assert greedy.events[SELECTED].cache["tokens"] == len(greedy.prompt_ids) + SELECTED


def test_the_beam_tree_and_its_table_start_at_step_1(beam):
    beams = describe.beam_steps(beam.events[: SELECTED + 1])
    table = viz.beam_table(beams)
    assert list(table.data[0].header.values)[0] == "step"
    column = list(table.data[0].cells.values[0])
    assert column[0] == 1 and column[-1] == 6
    tree = viz.beam_tree(beams)
    xs = [x for trace in tree.data for x in (trace.x or ()) if x is not None]
    assert min(xs) == 1 and max(xs) == 6


def test_the_lessons_name_the_same_step(greedy, lm):  # noqa: F811
    result = greedy.as_result()
    steps = analysis.attention_steps(lm, result, SELECTED, 0, 0, "self")
    assert "step 6" in v_steps.attention_steps_figure(steps).layout.title.text
    assert "(step 6)" in v_steps.attention_steps_caption(steps)
    prefill = analysis.attention_steps(lm, result, 0, 0, 0, "self")
    assert "**Prefill (step 1):**" in v_steps.attention_steps_caption(prefill)
    assert "step 6" in v_lens.logit_lens_figure(analysis.logit_lens(lm, result, SELECTED), SELECTED).layout.title.text
    norms = analysis.residual_norms(result)
    assert "step 6" in v_anatomy.residual_norm_figure(norms, SELECTED).layout.title.text


@pytest.mark.parametrize("selected", [0, 1, SELECTED, NEW - 1])
def test_why_the_kv_cache_helps_speaks_of_one_step(greedy, lm, selected):  # noqa: F811
    lesson = analysis.run_lesson(lm, greedy.as_result(), selected)
    text = v_kv.kv_cost_caption(lesson["costs"]) + "\n\n" + v_kv.prefill_decode_caption(lesson["shapes"])
    keys = {int(k) for k in re.findall(r"T \+ 1 = (\d+)", text)}
    decode = max(selected, 1)  # the prefill's step has no decode row: both paragraphs read the first decode step
    assert keys == {len(greedy.prompt_ids) + decode}, text
    assert f"At step {step_number(decode)} " in text
    titles = [a.text for a in v_kv.prefill_decode_figure(lesson["shapes"]).layout.annotations]
    assert any(f"decode step {step_number(decode)}: 1 × {len(greedy.prompt_ids) + decode}" in s for s in titles)


def test_a_branch_continues_its_parents_count(greedy, lm):  # noqa: F811
    """Branch from step 6 (another token there): the branch's first new token is step 7 on the live screen,
    in the inspector, the KV chart and the lab, and its row in the branch list says it left at step 6; a
    branch of that branch keeps counting, and a link's replay of the chain counts the same."""
    session = Session()
    root = play(session, lm, greedy.settings)
    other = next(c.token_id for c in root.path[SELECTED].candidates if c.token_id != root.path[SELECTED].token_id)
    branch = play(session, lm, root.settings, parent=(root, SELECTED, [other]))
    assert branch.step_number(0) == 7 and branch.step_number(2) == 9
    meta = {"layers": lm.config.n_layers, "heads": lm.config.n_heads, "kv_heads": lm.config.n_kv_heads,
            "kind": "decoder", "name": "tiny"}
    value = frames.live_value(branch, LiveView(), meta, "en", session.branches(branch))
    assert value["first_step"] == 7 and frames.live_value(root, LiveView(), meta, "en")["first_step"] == 1
    assert [(r["number"], r["step"]) for r in value["branches"]] == [(root.number, None), (branch.number, 6)]
    ctx = Context(lm=lm, run=branch, runs=session.runs, lang="en")
    data = inspector_view.compute(ctx, Selection(step=0))
    assert inspector_view.caption(data, "en").startswith("Step 7:")
    assert "7" in inspector_view.draw(data, "en")["funnel"].value.layout.title.text
    growth = cache_view.compute(ctx, Selection(step=0))["growth"]
    assert growth[0][0] == 7 and growth[0] == list(range(7, 7 + len(branch.events)))
    assert lab.reads(branch, 0, "en").endswith("step 7:") and lab.reads(root, SELECTED, "en").endswith("step 6:")
    # the lessons count the same way (their figures read the run as a result, inside its count)
    from playground.app import views
    from playground.app.panels.lessons import view_of
    for name, words in (("steps", "Prefill (step 7)"), ("lens", "at step 7")):
        shown = views.show(view_of(name), views.context_for(view_of(name), session, lambda *a: lm), Selection(step=0))
        assert words in shown["lesson_md"].value, (name, shown["lesson_md"].value[:120])
        assert "step 7" in shown["lesson_plot1"].value.layout.title.text, name
    assert step_number(0) == 1  # nothing of the branch's count leaks out of its drawing
    again = play(session, lm, branch.settings, parent=(branch, 1, [int(branch.path[1].token_id)]))
    assert again.step_number(0) == 9  # it left the branch at the branch's step 8
    assert [r["step"] for r in session.branches(again)][-1] == 8
    # a link to the chain replays it with the same numbers
    replay = Session()
    parsed, _ = from_query(dict(parse_qsl(session.link_query(again.settings)[1:])))
    runs = [f.run for f in play_link(replay, lambda *a: lm, parsed, pace=False) if f.run is not None]
    last = runs[-1]
    assert last.stream_ids == again.stream_ids and last.step_number(0) == 9
