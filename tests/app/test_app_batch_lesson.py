"""The lesson on the shared batch, without Gradio: a page run through the process's server finds its own steps
(live while it streams, and at the selected token once finished), in English and 中文; beside other requests
it is row r of n; the figure builders draw exactly the history's rows and times."""

from __future__ import annotations

import dataclasses
import re
import types

import pytest

import playground
from playground.app import batch_lesson, lessons, serving, views
from playground.app.panels.lessons import VIEWS as LESSON_VIEWS
from playground.app.play import play
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.app.views import Selection
from playground.app.words import t
from playground.generation import GenerationConfig
from playground.generation.batch import CHUNK, Scheduler
from playground.generation.plan import plan
from playground.viz import shared_batch as v_batch
from tests.hf_tiny import save_small_llama
from tests.ui_fixtures import save_tiny_decoder

CJK = re.compile(r"[\u4e00-\u9fff]")
VIEW = LESSON_VIEWS["serving"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return playground.load_model(save_tiny_decoder(tmp_path_factory.mktemp("w") / "a"))


def _page_run(lm, lang: str, tokens: int = 6) -> Session:
    session = Session(model="a", lang=lang)
    for _ in play(session, lambda name, dtype, owner: lm, UISettings(model="a", prompt="Hello there",
                                                                      max_new_tokens=tokens, lang=lang), pace=False):
        pass
    return session


def _show(lm, session: Session, step: int | None):
    ctx = views.context_for(VIEW, session, lambda name, dtype, owner: lm)
    return views.show(VIEW, ctx, Selection(step=step))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_finished_page_run_finds_its_steps_in_the_server_s_history(lm, lang):
    session = _page_run(lm, lang)
    run = session.current
    assert not run.running and len(run.path) == 6
    data = batch_lesson.compute(run, 2)
    # alone on the server: one prompt pass then five decoding steps, row 1 of 1 each; the third token came
    # out of its third pass
    assert data["state"] == "ok" and data["steps_in"] == 6 and (data["row"], data["rows"]) == (1, 1)
    assert data["kind"] == "decode" and data["produced"] == 1
    seats = serving.batch_history(run.token).seats(run.token)
    assert data["step"] == seats[2].step == seats[0].step + 2
    kinds = [column[0][0] for column in data["timeline"]["cells"] if any(cell[1] for cell in column)]
    assert kinds == ["prefill"] + ["decode"] * 5
    assert data["weight_bytes"] == data["avg_bytes"] > 4 * lm.parameter_count - 1
    slots = _show(lm, session, 2)
    md = slots["lesson_md"].value
    assert slots["lesson_plot1"].visible and slots["lesson_plot2"].visible
    if lang == "zh":
        assert "**第 1 行，共 1 行**" in md and CJK.search(slots["lesson_plot1"].value.layout.title.text)
        # the server's batch step and the run's own step are told apart (issue 36: "step 263 of the batch"
        # beside "Step 8 of 8")
        assert f"你的运行的第 3 步（共 6 步）是服务器的第 {data['step']} 个批次步" in md
    else:
        assert "**row 1 of 1**" in md and "point of batching" in md
        assert f"Your run's step 3 of 6 was the server's batch step {data['step']}," in md
        assert "your run numbers only its own tokens" in md
    assert (data["run_step"], data["run_steps"]) == (3, 6)
    assert md == lessons.show("serving", lm, run, 2, lessons.Inputs(), lang).caption


def test_while_the_run_streams_the_lesson_shows_its_newest_step(lm):
    session = Session(model="a")
    seen = []
    for frame in play(session, lambda name, dtype, owner: lm,
                      UISettings(model="a", prompt="Hello there", max_new_tokens=24), pace=False):
        run = frame.run
        if run is not None and run.running and run.events:
            data = batch_lesson.compute(run, None)
            seen.append(data["state"] == "ok" and data["step"] == data["timeline"]["steps"][-1])
            slots = _show(lm, session, None)
            assert t("lesson_after_run", "en") not in slots["lesson_md"].value and slots["lesson_plot1"].visible
    assert seen and all(seen)


def test_the_lesson_is_picked_by_its_own_name_in_both_languages():
    assert [t(f"lesson_{n}", lang) for n in lessons.LESSONS if n == "serving" for lang in ("en", "zh")] == [
        "The shared batch", "共享批次"]


def test_a_run_the_server_no_longer_keeps_says_so(lm):
    stranger = types.SimpleNamespace(token="never-served", events=[object()])
    data = batch_lesson.compute(stranger, None)
    assert data["state"] == "not_kept" and batch_lesson.figures(data) == []
    assert "512" in batch_lesson.caption(data) and batch_lesson.compute(None, None)["state"] == "no_run"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_small_llama(directory)
    return playground.load_model(directory)


def test_beside_others_the_visitor_is_row_r_of_n_and_shares_the_weights(small, one_thread):
    def planned(ids, tokens):
        return dataclasses.replace(plan(small, ids, GenerationConfig(max_new_tokens=tokens)), eos_ids=[])

    scheduler = Scheduler(small, max_rows=16, max_prefills=4)
    scheduler.submit(planned([5, 9, 23], 6), tag="other")
    scheduler.step()
    scheduler.submit(planned([(3 * i) % 90 + 2 for i in range(CHUNK + 2)], 3), tag="mine")
    scheduler.submit(planned([4, 4], 8), tag="third")
    while scheduler.busy():
        scheduler.step()
    run = types.SimpleNamespace(token="mine", events=[object()] * 3, step_number=lambda i: i + 1)  # a Run's numbers
    first = batch_lesson.compute(run, 0, find=lambda tag: scheduler.history)
    # its first token came from its prompt's second chunk (2 tokens), at step 3: row 2 of 3
    assert (first["step"], first["row"], first["rows"], first["kind"], first["chunk"]) == (3, 2, 3, "prefill", 2)
    assert first["produced"] == 3 and first["tokens"] == 1 + 2 + 1
    weights = first["weight_bytes"]
    assert first["avg_bytes"] == pytest.approx(weights / 3)  # each of its 3 tokens shared a pass with two others
    text = batch_lesson.caption(first)
    assert "**row 2 of 3**" in text and v_batch.format_bytes(weights / 3) in text
    assert "Your run's step 1 of 3 was the server's batch step 3," in text
    last = batch_lesson.compute(run, 99, find=lambda tag: scheduler.history)
    assert (last["step"], last["row"], last["rows"], last["kind"]) == (5, 2, 3, "decode")
    figures = batch_lesson.figures(last)
    assert len(figures) == 2


def test_the_timeline_figure_colours_each_row_by_kind_and_owner():
    timeline = {"steps": [7, 8, 9], "ms": [1.0, 2.0, 3.0], "cells": [
        [("decode", False, False, False, 1)],
        [("decode", False, False, False, 1), ("prefill", True, True, False, 32)],
        [("decode", False, False, True, 1), ("decode", True, False, True, 1)],
    ]}
    fig = v_batch.batch_timeline_figure(timeline, selected=8)
    heat = fig.data[0]
    codes = {key: i + 1 for i, key in enumerate(v_batch.COLOURS)}
    assert list(heat.x) == [7, 8, 9] and list(heat.y) == [1, 2]
    assert [list(row) for row in heat.z] == [
        [codes[("decode", False)]] * 3, [0, codes[("prefill", True)], codes[("decode", True)]]]
    markers = {trace.name: (list(trace.x), list(trace.y)) for trace in fig.data[1:] if trace.x[0] is not None}
    assert markers == {"joined": ([8], [2]), "left": ([9, 9], [1, 2])}
    assert heat.customdata[1][1] == "step 8, row 2 of 2: you, a prompt chunk of 32 tokens"
    assert [(s.x0, s.x1) for s in fig.layout.shapes] == [(7.5, 8.5)]


def test_the_step_time_figure_draws_the_measured_medians_and_the_visitor_s_steps():
    fig = v_batch.step_time_figure([[1, 2.0, 5], [4, 3.5, 2]], [[1, 2.1], [4, 3.4]], (4, 3.4), lang="zh")
    median, yours, this = fig.data
    assert list(median.x) == [1, 4] and list(median.y) == [2.0, 3.5] and list(median.customdata) == [5, 2]
    assert list(yours.x) == [1, 4] and list(this.y) == [3.4]
    assert CJK.search(fig.layout.title.text) and CJK.search(fig.layout.xaxis.title.text)

