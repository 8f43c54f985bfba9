"""Forks that say what they are (issue 44): the badge and the history name only what ran, a lab forks the plain
run unless the visitor keeps what the run on screen has (and the page says so before the press), the precision
lab's texts agree with each other on a stacked fork, in English and 中文."""

from __future__ import annotations

import dataclasses

import pytest

from playground.app import history, views
from playground.app.experiments import BY_NAME
from playground.app.experiments import precision as precision_lab
from playground.app.experiments.base import ForkError
from playground.app.notes import render
from playground.app.play import Origin, fork_of
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.app.views import Selection
from playground.app.words import t
from tests.app.test_app_run import play

SETTINGS = UISettings(model="a", prompt="Hello there, how are you doing today", max_new_tokens=12)


def fork(session: Session, lm, experiment: str, keep: bool = False, **values):
    """`experiment`'s fork button pressed on the run on screen, played to its end."""
    exp = BY_NAME[experiment]
    button = next(a for a in exp.actions() if a.kind == "fork")
    settings, origin = fork_of(session, session.current, lm, exp, button, values, keep)
    return play(session, lm, settings, origin=origin)


WINDOW = dict(kv_window=4, kv_sink=0, kv_heavy=0, kv_dtype="", rope_scaling="")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_drafter_that_could_not_run_is_in_no_badge_and_no_label(lm, lang):
    session = Session(model="a", lang=lang)
    first = play(session, lm, dataclasses.replace(SETTINGS, lang=lang))
    asked = dataclasses.replace(first.settings, kv_window=4, draft="ngram", draft_tokens=3)  # a chain of forks' settings
    stacked = play(session, lm, asked, origin=Origin(first, "kv+speculative"))
    assert stacked.cfg.draft is None and any(n.key == "draft_dropped" for n in stacked.notes)
    drafted = render(BY_NAME["speculative"].badge(asked)[0], lang)
    window = render(BY_NAME["kv"].badge(asked)[0], lang)
    assert history.badge(stacked, lang) == window  # the window ran; the drafter did not
    assert drafted not in history.label(stacked, lang) and window in history.label(stacked, lang)
    ctx = views.context_for(views.PANELS["speculative"], session, lambda name, dtype, owner: lm)
    md = views.show(views.PANELS["speculative"], ctx, Selection())["spec_md"].value
    assert md == t("spec_plain", lang, n=stacked.number)  # the lab says it too: one token per pass


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_lab_forks_the_plain_run_and_says_so_before_the_press(lm, lang):
    session = Session(model="a", lang=lang)
    first = play(session, lm, dataclasses.replace(SETTINGS, lang=lang))
    precision = BY_NAME["precision"]
    assert history.fork_line(session, precision, False, lang) == ""  # a plain run on screen: nothing to say
    windowed = fork(session, lm, "kv", **WINDOW)
    words = render(BY_NAME["kv"].badge(windowed.settings)[0], lang)
    assert history.fork_line(session, precision, False, lang) == t("fork_from", lang, n=windowed.number, words=words,
                                                                    base=first.number)
    assert history.fork_line(session, precision, True, lang) == t("fork_kept", lang, n=windowed.number, words=words)
    int4 = fork(session, lm, "precision", weight_precision="int4")
    assert not int4.settings.kv_window and int4.cfg.kv_window is None  # the labs in order never stack
    assert int4.origin == first.number and history.badge(int4, lang) == render(
        BY_NAME["precision"].badge(int4.settings)[0], lang)
    session.pick(windowed.number)
    kept = fork(session, lm, "precision", keep=True, weight_precision="int4")  # stacking, asked for
    assert kept.settings.kv_window == 4 and kept.settings.weight_precision == "int4" and kept.origin == windowed.number


def test_a_lab_stacks_its_own_changes_as_before(lm):
    session = Session(model="a")
    play(session, lm, SETTINGS)
    once = fork(session, lm, "causal", lab_layer=0, lab_head=1)
    twice = fork(session, lm, "causal", lab_layer=1, lab_head=0)  # the causal lab adds an edit after its own
    assert len(twice.cfg.interventions) == 2 and twice.origin == once.number
    assert history.fork_line(session, BY_NAME["causal"], False, "en") == ""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_precision_texts_agree_on_a_run_that_keeps_a_cache_policy(lm, lang):
    session = Session(model="a", lang=lang)
    first = play(session, lm, dataclasses.replace(SETTINGS, lang=lang, max_new_tokens=20))
    stacked = play(session, lm, dataclasses.replace(first.settings, kv_window=2, weight_precision="int4"),
                   origin=Origin(first, "kv+precision"))
    b = precision_lab.measure(lm, stacked)["branches"][1]
    first_diff, top1 = b["first_difference"], b["top1"]
    # greedy: the texts part at the first step whose top tokens differ, and never before it
    if first_diff is None:
        assert all(top1)
    else:
        assert all(top1[:first_diff]) and not top1[first_diff]
    ctx = views.context_for(views.PANELS["precision"], session, lambda name, dtype, owner: lm)
    md = views.show(views.PANELS["precision"], ctx, Selection())["precision_md"].value
    assert t("precision_whole_cache", lang) in md


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_drafter_left_off_is_refused_with_why(lm, lang):
    session = Session(model="a", lang=lang)
    play(session, lm, dataclasses.replace(SETTINGS, lang=lang))
    with pytest.raises(ForkError) as refused:
        fork(session, lm, "speculative", draft="", draft_tokens=4)
    assert render(refused.value.args[0], lang) == t("spec_choose", lang)
    assert t("spec_off", lang) in t("spec_choose", lang)  # it names the box's own word for off
