"""Speculative decoding's page half without Gradio: a run forked with a drafter (an early layer, prompt lookup, a
second loaded model by name), its View's checks against the engine's own records, the live screen's marks, the
settings' link round trip and what a link that cannot be used says, in English and 中文."""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import parse_qsl

import pytest

from playground.app import history, views
from playground.app.experiments import speculative as speculative_lab
from playground.app.experiments.base import ForkError
from playground.app.notes import render
from playground.app.play import play as play_press
from playground.app.play import play_link
from playground.app.session import Session
from playground.app.settings import UISettings, from_query, generation_kwargs, plain
from playground.app.views import Selection
from playground.app.words import t
from playground.checkpoints.loader import load_model
from playground.generation import GenerationConfig
from playground.generation.engine import generate_all
from tests.app.forks import press
from tests.app.test_app_run import play
from tests.ui_fixtures import save_tiny_decoder

SETTINGS = UISettings(model="a", prompt="Hello there, how are you? Hello there, how", max_new_tokens=14)
CJK = re.compile(r"[\u4e00-\u9fff]")
VIEW = views.PANELS["speculative"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("w")
    return {"a": load_model(save_tiny_decoder(root / "a")), "b": load_model(save_tiny_decoder(root / "b", seed=1))}


def show(lm, session: Session, step: int | None = None) -> dict:
    ctx = views.context_for(VIEW, session, lambda name, dtype, owner: lm)
    return views.show(VIEW, ctx, Selection(step=step))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_early_layer_drafts_the_model_s_own_greedy_text_and_the_lab_shows_each_check(models, lang):
    lm = models["a"]
    session = Session(model="a", lang=lang)
    first = play(session, lm, dataclasses.replace(SETTINGS, lang=lang))
    drafted = press(session, lm, "speculative", "spec_fork", draft="layer:1", draft_tokens=3)
    assert [s.token_id for s in drafted.path] == [s.token_id for s in first.path]  # greedy: the model's own tokens
    ref = generate_all(lm, list(first.prompt_ids), GenerationConfig(**generation_kwargs(drafted.settings)))
    assert ref.token_ids == [s.token_id for s in drafted.path]
    spec = ref.speculation
    rows = speculative_lab.checks(lm, drafted)
    drafted_rows = [r for r in rows if "draft" in r]
    # every checked draft is a row (drafts after a rejection in the same pass are never checked)
    assert len(drafted_rows) <= spec["proposed"] and sum(r["accepted"] for r in drafted_rows) == spec["accepted"]
    totals = speculative_lab.totals(drafted)
    assert (totals["proposed"], totals["accepted"], totals["passes"]) == (spec["proposed"], spec["accepted"],
                                                                          spec["target_passes"])
    # the live screen marks each kept draft, replaced draft and bonus token
    marks = [entry[5] if len(entry) > 5 else "" for entry in drafted.compact]
    assert marks == [r["kind"] if r["kind"] in ("accepted", "rejected", "bonus") else "" for r in rows]
    rejected = [r for r in drafted_rows if not r["accepted"]]
    step = rejected[0]["step"] if rejected else drafted_rows[0]["step"]
    slots = show(lm, session, step)
    md = slots["spec_md"].value
    assert md.startswith(t("spec_head", lang, n=drafted.number, drafter=t("spec_layer", lang, k="1"), k=3,
                           accepted=spec["accepted"], proposed=spec["proposed"], rate=spec["acceptance_rate"],
                           per_pass=spec["tokens_per_pass"], passes=spec["target_passes"], tokens=len(rows)))
    assert t("spec_rule_greedy", lang) in md and str(first.number) in md.split(t("spec_rule_greedy", lang))[1]
    assert bool(CJK.search(md)) == (lang == "zh")
    so_far = drafted.events[step].speculation["totals"]  # the running rate at the selected step, as the engine kept it
    assert t("spec_so_far", lang, step=step + 1, accepted=so_far["accepted"], proposed=so_far["proposed"],
             rate=so_far["accepted"] / so_far["proposed"], passes=so_far["target_passes"]) in md
    fig = slots["spec_checks"].value
    assert list(fig.data[0].y) == pytest.approx([r["q"] for r in drafted_rows])  # q(x) per drafted token
    assert list(fig.data[1].y) == pytest.approx([r["p"] for r in drafted_rows])  # p(x)
    assert [r["edit"] for r in history.branch_rows(session, drafted, lang)] == [
        "", t("spec_words", lang, drafter=t("spec_layer", lang, k="1"))]


def test_sampling_with_an_early_layer_shows_coins_and_the_residual_of_a_rejection(models):
    lm = models["a"]
    session = Session(model="a")
    base = dataclasses.replace(SETTINGS, mode="sample", seed=5, temperature=1.0, max_new_tokens=24)
    play(session, lm, base)
    drafted = press(session, lm, "speculative", "spec_fork", draft="layer:1", draft_tokens=4)
    rows = [r for r in speculative_lab.checks(lm, drafted) if "draft" in r]
    assert rows and all(r["coin"] is not None for r in rows)
    assert all(r["accepted"] == (r["coin"] < r["accept"]) for r in rows)  # kept exactly when the coin falls below
    assert all(r["accept"] == pytest.approx(min(1.0, r["p"] / r["q"])) for r in rows)
    rejected = [r for r in rows if not r["accepted"]]
    assert rejected, "a sampled draft of a one-layer lens should be rejected somewhere in 24 tokens"
    slots = show(lm, session, rejected[0]["step"])
    assert slots["spec_residual"].visible
    md = slots["spec_md"].value
    assert t("spec_rule_sample", "en") in md and "rejected" in md and "coin" in md
    coins = slots["spec_checks"].value.data[3]
    assert list(coins.y) == pytest.approx([r["coin"] for r in rows])


def test_a_second_model_drafts_by_name_and_a_missing_one_is_a_note(models):
    session = Session(model="a")
    lookup = lambda name, dtype, owner: models[name]  # noqa: E731 - the catalog of this test
    frames = list(play_press(session, lookup, dataclasses.replace(SETTINGS, draft="model:b"), pace=False))
    run = frames[-1].run
    assert run.cfg.draft is models["b"] and run.finish_reason == "length"
    assert "model b" in render(speculative_lab.drafter(run.settings.draft), "en")
    alone = list(play_press(Session(model="a"), lookup, dataclasses.replace(SETTINGS, draft="model:nope"), pace=False))
    assert [n.key for n in alone[-1].run.notes][:1] == ["draft_model_missing"]
    assert "nope" in alone[-1].notes[0] and alone[-1].run.cfg.draft is None


def test_the_link_replays_the_plain_run_then_the_drafted_one(models):
    lm = models["a"]
    source = Session(model="a")
    first = play(source, lm, SETTINGS)
    drafted = press(source, lm, "speculative", "spec_fork", draft="ngram", draft_tokens=2)
    params = dict(parse_qsl(source.link_query().lstrip("?")))
    assert (params["draft"], params["draft_tokens"]) == ("ngram", "2")
    settings, notes = from_query(params)
    assert notes == [] and plain(settings).draft == ""
    session = Session(model="a")
    runs = [out.run for out in play_link(session, lambda *a: lm, settings, pace=False) if out.run.finish_reason]
    assert [r.settings.draft for r in runs] == ["", "ngram"] and runs[1].origin == runs[0].number
    assert [[s.token_id for s in r.path] for r in runs] == [[s.token_id for s in r.path] for r in (first, drafted)]
    for bad in ("layer:0", "tree", "model:"):
        got, notes = from_query({"model": "a", "draft": bad})
        assert got.draft == "" and [n.key for n in notes] == ["link_ignored"] and CJK.search(render(notes[0], "zh"))
    with pytest.raises(ForkError):
        press(source, lm, "speculative", "spec_fork", run=first, draft="", draft_tokens=4)


def test_a_run_without_a_draft_says_how_to_start(models):
    session = Session(model="a")
    play(session, models["a"], SETTINGS)
    slots = show(models["a"], session)
    assert slots["spec_md"].value == t("spec_plain", "en", n=1) and slots["spec_checks"].visible is False
