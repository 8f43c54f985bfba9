"""The precision what-if's page half without Gradio: a run forked with int8 / int4 / bfloat16 weights, its View's
numbers against the library's own comparison and the page's runs, the setting's link round trip and the lenient
pass, in English and 中文."""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import parse_qsl

import pytest

from playground.analysis.precision import compare_precisions
from playground.app import history, views
from playground.app.describe import format_bytes
from playground.app.experiments import precision as precision_lab
from playground.app.experiments.base import ForkError
from playground.app.experiments.precision import lowered as has_precision
from playground.app.notes import render
from playground.app.play import play_link, start_run
from playground.app.session import Session
from playground.app.settings import UISettings, from_query, generation_kwargs, plain, to_query
from playground.app.views import Selection
from playground.app.words import t
from playground.checkpoints.loader import load_model
from playground.generation import GenerationConfig
from tests.app.forks import press
from tests.app.test_app_run import play
from tests.ui_fixtures import save_tiny_decoder

SETTINGS = UISettings(model="a", prompt="Hello there, how are", max_new_tokens=12)
CJK = re.compile(r"[\u4e00-\u9fff]")
VIEW = views.PANELS["precision"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return load_model(save_tiny_decoder(tmp_path_factory.mktemp("w") / "a"))


def show(lm, session: Session) -> dict:
    ctx = views.context_for(VIEW, session, lambda name, dtype, owner: lm)
    return views.show(VIEW, ctx, Selection(step=session.selected_step))


def forked(lm, precision: str, lang: str = "en"):
    session = Session(model="a", lang=lang)
    reference = play(session, lm, dataclasses.replace(SETTINGS, lang=lang))
    branch = press(session, lm, "precision", "precision_fork", weight_precision=precision)
    return session, reference, branch


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_int4_branch_is_compared_with_float32_token_by_token(lm, lang):
    session, reference, branch = forked(lm, "int4", lang)
    assert branch.settings.weight_precision == "int4" and branch.cfg.weight_precision == "int4"
    report = compare_precisions(lm, list(reference.prompt_ids), GenerationConfig(**generation_kwargs(SETTINGS)),
                                ["float32", "int4"]).to_dict()
    ref, b = report["branches"]
    # the library's own runs are the page's runs, token for token
    assert report["reference_ids"] == [s.token_id for s in reference.path]
    assert b["token_ids"] == [s.token_id for s in branch.path] and b["simulated"]
    slots = show(lm, session)
    md = slots["precision_md"].value
    assert md.startswith(t("precision_head", lang, n=branch.number, precision="int4",
                           how=t("precision_simulated", lang, compute=b["compute"]),
                           against=t("precision_against", lang, n=reference.number)))
    assert t("precision_kl", lang, kl=b["mean_kl"], agree=b["agreement"]) in md
    assert format_bytes(b["weight_bytes_per_token"]) in md and format_bytes(ref["weight_bytes_per_token"]) in md
    assert b["weight_bytes_per_token"] * 4 < ref["weight_bytes_per_token"]
    assert bool(CJK.search(md)) == (lang == "zh")
    steps = slots["precision_steps"].value
    assert list(steps.data[0].y) == pytest.approx(b["kl"]) and len(b["kl"]) == len(reference.path)
    flips = [i for i, same in enumerate(b["top1"]) if not same]
    assert (len(steps.data) == 2) == bool(flips)
    layers = slots["precision_layers"].value
    assert len(layers.data[0].y) == lm.config.n_layers + 1 and list(layers.data[0].y) == pytest.approx(b["residual_error"])
    if b["first_difference"] is not None:
        assert t("precision_parted", lang, step=b["first_difference"] + 1, token="", reference="")[:6] in md
    words = t("precision_words", lang, precision="int4")
    assert [r["edit"] for r in history.branch_rows(session, branch, lang)] == ["", words]
    assert history.badge(branch, lang) == words and history.badge(reference, lang) == ""


def test_a_plain_run_and_float32_are_not_a_comparison(lm):
    session = Session(model="a")
    play(session, lm, SETTINGS)
    slots = show(lm, session)
    assert slots["precision_md"].value == t("precision_plain", "en", n=1) and slots["precision_steps"].visible is False
    with pytest.raises(ForkError, match="other than float32"):
        press(session, lm, "precision", "precision_fork", weight_precision="float32")
    with pytest.raises(ForkError):
        press(session, lm, "precision", "precision_fork", weight_precision="int3")


def test_the_link_replays_float32_then_the_precision_run(lm):
    source, reference, branch = forked(lm, "int8")
    params = dict(parse_qsl(source.link_query().lstrip("?")))
    assert params["weight_precision"] == "int8"
    settings, notes = from_query(params)
    assert notes == [] and has_precision(settings) and plain(settings).weight_precision == ""
    session = Session(model="a")
    session.opened_from(params, notes, settings)
    runs = [out.run for out in play_link(session, lambda *a: lm, settings, pace=False) if out.run.finish_reason]
    assert [r.settings.weight_precision for r in runs] == ["", "int8"] and runs[1].origin == runs[0].number
    assert [[s.token_id for s in r.path] for r in runs] == [[s.token_id for s in r.path] for r in (reference, branch)]
    assert show(lm, session)["precision_md"].value.split(" measured")[0] == \
        show(lm, source)["precision_md"].value.split(" measured")[0]  # the speed is measured again: the rest is the same
    assert "weight_precision" not in to_query(SETTINGS)


def test_an_unusable_precision_in_a_link_or_a_config_is_a_note(lm):
    settings, notes = from_query({"model": "a", "weight_precision": "int3"})
    assert [n.key for n in notes] == ["link_ignored"] and settings.weight_precision == ""
    assert CJK.search(render(notes[0], "zh"))
    from playground.app.limits import lenient

    done = lenient(GenerationConfig(weight_precision="fp8"), lm, 4)
    assert [n.key for n in done.notes] == ["precision_bad"] and done.cfg.weight_precision is None
    assert "weight_precision" not in generation_kwargs(SETTINGS)
    run, _ = start_run(Session(model="a"), lm, dataclasses.replace(SETTINGS, weight_precision="bfloat16"))
    assert run.cfg.weight_precision == "bfloat16"


def test_the_comparison_runs_as_slices_of_one_step_or_pass_each_between_other_visitors_work(lm):
    """The View reruns both precisions: as a job it must not hold the torch thread for the whole comparison
    (no click holds the server). Its compute is a generator of slices, at least one per decoding step of each
    rerun, and a served job interleaves them with another visitor's work."""
    from playground.app.serving import Server
    session, reference, branch = forked(lm, "int8")
    precision_lab._MEASURED.clear()
    ctx = views.context_for(VIEW, session, lambda name, dtype, owner: lm)
    work = views.slices(VIEW, ctx, Selection(step=session.selected_step))
    count = 0
    while True:
        try:
            next(work)
        except StopIteration as done:
            data = done.value
            break
        count += 1
    steps = len(reference.path)
    assert count >= 2 * steps  # the float32 and the int8 reruns, one step per slice (and the passes after)
    precision_lab._MEASURED.clear()
    assert data["branches"][1]["kl"] == precision_lab.measure(lm, branch)["branches"][1]["kl"]  # the same numbers

    order: list[str] = []

    def other():
        for _ in range(3):
            order.append("other")
            yield None

    def mine():
        work = views.slices(VIEW, ctx, Selection(step=session.selected_step))
        while True:
            try:
                next(work)
            except StopIteration:
                return
            order.append("view")
            yield None

    precision_lab._MEASURED.clear()
    server = Server(call=lambda fn: fn())
    first = server.submit_job(mine(), owner="me")
    second = server.submit_job(other(), owner="you")
    list(first.stream()), list(second.stream())
    assert "other" in order and order.index("other") < len(order) - 3  # the other visitor ran before the view ended
