"""The causal lab's app core without Gradio: forks with an edit, their links, what the edit changed, why a
token won, the head sweep and the contrast vector, on a tiny Llama saved by transformers."""

from __future__ import annotations

import dataclasses
import re
import threading
from urllib.parse import parse_qsl

import numpy as np
import pytest

from playground.analysis import attribute_step, divergence_of_runs
from playground.app import history, lab
from playground.app.experiments import causal
from playground.app.experiments.base import ForkError, compared_with
from playground.app.experiments.causal import with_edit
from playground.app.fields import MAX_EDITS
from playground.app.jobs import Progress
from playground.app.notes import error_note, render
from playground.app.play import Origin
from playground.app.session import Session
from playground.app.settings import UISettings, from_query, parse_edits, plain
from playground.app.view import Context, Selection
from playground.checkpoints.loader import load_model
from playground.generation import GenerationConfig, generate_all
from playground.interventions import Ablate, Steer, pack, unpack
from tests.app.forks import fork_edit as fork
from tests.app.forks import press
from tests.app.test_app_run import play

SETTINGS = UISettings(model="a", prompt="Hello there", max_new_tokens=10)


def said(exc: BaseException, lang: str) -> str:
    """An error's keyed words as the page says them in `lang`."""
    return render(error_note(exc), lang)


def test_a_fork_is_the_engines_run_under_the_edit_and_sits_beside_the_original(lm):
    session = Session()
    original = play(session, lm, SETTINGS)
    edited = fork(session, lm, Ablate(1, component="mlp"))
    ref = generate_all(lm, lm.tokenize(SETTINGS.prompt), GenerationConfig(
        max_new_tokens=10, top_candidates=8, interventions=(Ablate(1, component="mlp"),)))
    assert edited.generated_ids == ref.token_ids != original.generated_ids
    assert edited.cfg.interventions == (Ablate(1, component="mlp"),) and original.cfg.interventions == ()
    assert edited.origin == original.number and edited.experiment == "causal"
    assert compared_with(edited, session.runs) is original
    rows = history.branch_rows(session, edited, "en")
    assert [(r["number"], r["edit"]) for r in rows] == [(1, ""), (2, "ablate the MLP of layer 1")]
    assert history.branch_rows(session, edited, "zh")[1]["edit"] == "消融第 1 层的 MLP"
    assert history.label(edited, "en") == "run 2 · ablate the MLP of layer 1 · from run 1"


def test_forks_add_edits_and_the_link_replays_the_plain_run_then_the_edited_one(lm):
    session = Session()
    play(session, lm, SETTINGS)
    fork(session, lm, Ablate(0, head=1))
    twice = fork(session, lm, Steer(1, np.linspace(-1, 1, lm.config.d_model).astype(np.float32), scale=2.0))
    assert [type(iv).__name__ for iv in parse_edits(twice.settings.edits)] == ["Ablate", "Steer"]
    assert history.label(twice, "en").startswith("run 3 · steer after block 1") and "from run 2" in history.label(
        twice, "en")  # the edit this fork added, not the one it inherited
    query = session.link_query()  # the run on screen's
    params = dict(parse_qsl(query.lstrip("?")))
    settings, notes = from_query(params)
    assert notes == [] and unpack(params["edits"]) == twice.cfg.interventions
    assert plain(settings).edits == ""
    again = Session()
    first = play(again, lm, plain(settings))
    second = play(again, lm, settings, origin=Origin(first, "causal"))
    assert second.generated_ids == twice.generated_ids and first.generated_ids == session.runs[0].generated_ids
    assert compared_with(second, again.runs) is first


def test_a_broken_edits_parameter_is_ignored_with_a_note(lm):
    settings, notes = from_query({"model": "a", "prompt": "Hi", "edits": "not-a-packed-list"})
    assert settings.edits == "" and len(notes) == 1 and "edits" in notes[0] and "open the edit again" in notes[0]


def test_too_many_edits_are_refused_in_the_visitors_language(lm):
    full = UISettings(model="a", prompt="Hi", edits=pack((Ablate(0, head=0),) * MAX_EDITS))
    with pytest.raises(ForkError) as refused:
        with_edit(full, lm, Ablate(0, head=0))
    assert "最多" in said(refused.value, "zh") and "at most" in said(refused.value, "en")


def test_divergence_attribution_and_sweep_are_the_analyses_of_the_two_runs(lm):
    session = Session()
    original = play(session, lm, SETTINGS)
    edit = Ablate(0, head=2)
    edited = fork(session, lm, edit)
    div = lab.divergence_of(lm, original, edited)
    ref = generate_all(lm, lm.tokenize(SETTINGS.prompt), GenerationConfig(max_new_tokens=10, interventions=(edit,)))
    expect = divergence_of_runs(lm, original.as_result(), ref)
    np.testing.assert_array_equal(div.kl, expect.kl)
    assert div.first_difference == expect.first_difference and len(div.kl) == 10
    text = lab.step_summary(div, 3, original.path[3].token_text, "en")
    assert f"KL {div.kl[3]:.4f} nats" in text and f"rank {int(div.rank[3]) + 1}" in text
    # Why this token: the edited run's own model, its parts summing to its logit.
    why = lab.why(lm, edited, 4, versus=False)
    assert why.heads[0, 2] == 0.0  # the ablated head writes nothing
    assert why.total == pytest.approx(why.logit, rel=1e-4, abs=1e-4)
    versus = lab.why(lm, edited, 4, versus=True)
    assert versus.versus_id not in (None, edited.path[4].token_id)
    same = attribute_step(lm, ref, 4)
    assert why.logit == pytest.approx(same.logit, rel=1e-5, abs=1e-5)
    # The sweep at a step: one ablation per head of the layer, ranked, and stoppable.
    calls = []
    sweep = lab.sweep(lm, original, 5, 1, progress=lambda d, n: calls.append((d, n)))
    assert calls == [(h + 1, lm.config.n_heads) for h in range(lm.config.n_heads)]
    assert not np.isnan(sweep.logprob_drop).any() and sweep.order[0] == int(np.argmax(sweep.logprob_drop))
    stopped = lab.sweep(lm, original, 5, 1, progress=lambda d, n: d < 2)
    assert np.isnan(stopped.logprob_drop).sum() == lm.config.n_heads - 2
    np.testing.assert_allclose(stopped.logprob_drop[:2], sweep.logprob_drop[:2], rtol=0, atol=1e-9)


def test_the_sweep_as_a_job_is_one_pass_a_slice_and_stops_with_the_heads_done(lm):
    session = Session()
    original = play(session, lm, SETTINGS)
    whole = lab.sweep(lm, original, 5, 1)
    stop = threading.Event()
    work = lab.sweep_work(lm, original, 5, 1, stop)
    assert next(work) == Progress("heads", 0, lm.config.n_heads)  # the plain pass
    assert next(work) == Progress("heads", 1, lm.config.n_heads)  # head 0 ablated
    assert next(work) == Progress("heads", 2, lm.config.n_heads)
    stop.set()
    stopped = next(work)
    assert np.isnan(stopped.logprob_drop).sum() == lm.config.n_heads - 2
    np.testing.assert_allclose(stopped.logprob_drop[:2], whole.logprob_drop[:2], rtol=0, atol=1e-9)
    done = list(lab.sweep_work(lm, original, 5, 1, threading.Event()))
    np.testing.assert_array_equal(done[-1].logprob_drop, whole.logprob_drop)


def test_the_sweep_cost_counts_attention_over_every_pair(lm):
    """One pass over T tokens: the weight products per token plus 4·h·d_h·L·T² for Q·Kᵀ and weights·V."""
    c = lm.config
    single = lab.pass_flops(lm, 1)
    assert lab.pass_flops(lm, 100) - 100 * single == pytest.approx(4 * c.n_heads * c.head_dim * c.n_layers * (100**2 - 100))


def test_a_steering_text_is_one_bounded_pass(lm):
    """Round 4, row 4: two 8,100-token texts held the torch thread for minutes. Each text is now one pass
    within the lab's per-pass budget, refused over it with the limit in tokens."""
    limit = lab.steer_tokens(lm)
    assert lab.pass_flops(lm, limit) <= lab.PASS_FLOPS
    assert limit == lm.config.max_positions or lab.pass_flops(lm, limit + 1) > lab.PASS_FLOPS
    long = "Hello " * 8100
    with pytest.raises(lab.LabError, match=f"at most {limit} tokens"):
        lab.contrast(lm, long, "Goodbye", 1)
    with pytest.raises(lab.LabError) as refused:
        lab.contrast(lm, "Hello", long, 1)
    assert "最多" in said(refused.value, "zh")


def test_the_sweep_is_bounded_by_the_request_budget(lm):
    session = Session()
    run = play(session, lm, SETTINGS)
    need = lab.sweep_cost(lm, run, 5)
    with pytest.raises(lab.LabError, match="floating-point operations"):
        lab.sweep(lm, run, 5, 0, cap=need / 2)
    assert lab.sweep(lm, run, 5, 0, cap=need).layer == 0


def test_a_contrast_vector_is_shown_against_the_residuals_typical_norm(lm):
    vector = lab.contrast(lm, "Hello", "Goodbye", 1)
    assert vector.norm == pytest.approx(float(vector.vector.norm()), rel=1e-6) and vector.typical_norm > 0
    text = lab.vector_summary(vector, 4.0)
    assert f"norm **{vector.norm:.1f}**" in text and f"{4 * vector.norm / vector.typical_norm:.0%}" in text
    with pytest.raises(lab.LabError) as refused:
        lab.contrast(lm, "Hello", " ", 1)
    assert "两个提示词" in said(refused.value, "zh")


def test_edits_are_described_in_both_languages():
    assert render(lab.describe(Ablate(23, head=4)), "en") == "ablate head 23.4"
    assert render(lab.describe(Ablate(23, head=4)), "zh") == "消融第 23 层第 4 个头"
    assert render(lab.describe(Steer(10, [3.0, 4.0], scale=4)), "en") == "steer after block 10: 4 × a vector of norm 5"
    assert lab.describe_edits("garbage", "en") == ""


@pytest.mark.slow
def test_the_lab_lessons_numbers_are_what_smollm2_does(smollm2_dir, one_thread):
    """Every number the lab's lesson states, measured again on the real SmolLM2 with the page's own path
    (a run, a fork with the edit, the lab's analyses), so the page stays true."""
    from playground.app.words import t

    lm = load_model(smollm2_dir)
    session = Session()
    settings = UISettings(model="smollm2", prompt="What is the capital of France?", chat=True, max_new_tokens=12)
    original = play(session, lm, settings)
    assert original.as_result().text == "The capital of France is Paris."
    step = [s.token_text for s in original.path].index(" Paris")
    why = lab.why(lm, original, step, versus=False)
    assert round(why.logit, 2) == 13.67
    assert (round(float(why.mlps[27]), 2), round(float(why.heads[23, 4]), 2), round(float(why.mlps[28]), 2),
            round(float(why.heads[29, 1]), 2)) == (2.99, 2.81, 2.73, 2.28)
    ranked = sorted([(float(why.heads[i, h]), f"h{i}.{h}") for i in range(30) for h in range(9)]
                    + [(float(why.mlps[i]), f"m{i}") for i in range(30)], reverse=True)
    assert [name for _, name in ranked[:4]] == ["m27", "h23.4", "m28", "h29.1"]
    one = fork(session, lm, Ablate(23, head=4))
    assert one.as_result().text == original.as_result().text
    div = lab.divergence_of(lm, original, one)
    assert (round(float(div.original_prob[step]), 3), round(float(div.prob[step]), 3)) == (0.951, 0.634)
    assert round(float(div.kl[step]), 2) == 0.35 and div.first_difference is None
    sweep = lab.sweep(lm, original, step, 23)
    assert sweep.order[0] == 4 and round(float(sweep.logprob_drop[4]), 2) == 0.41
    assert np.delete(sweep.logprob_drop, 4).max() < 0.01
    nine = play(session, lm, dataclasses.replace(
        settings, edits=pack(tuple(Ablate(23, head=h) for h in range(9)))))
    assert nine.as_result().text.startswith("The capital of France is Tokyo, also known as the City")
    vector = lab.contrast(lm, "I love you", "I hate you", 10)
    assert (round(vector.norm, 1), round(vector.typical_norm)) == (24.6, 143)
    day = dataclasses.replace(settings, prompt="Tell me about your day", max_new_tokens=20)
    plain_day = play(session, lm, day)
    assert plain_day.as_result().text == "It's a pleasure to share my day with you. I'm a bit of a bit of a"
    steered = fork(session, lm, vector.steer(4.0))
    assert steered.as_result().text == "I'm delighted to know that!"
    assert f"{4 * vector.relative:.0%}" == "69%"
    eight = fork(session, lm, vector.steer(8.0), run=plain_day)
    assert eight.as_result().text.startswith("Science,\n\nScience,")
    lesson = t("lesson_lab_text", "en")
    for stated in ("13.67", "+2.99", "+2.81", "+2.73", "+2.28", "0.951", "0.634", "0.41 nats", "0.35 nats", "24.6", "143",
                   "69%", "Tokyo, also known as the City", "I'm delighted to know that!", "scale 8", "Science, Science"):
        assert stated in lesson


def test_the_lab_on_an_encoder_decoder(tmp_path):
    """The same path on the seq2seq family: a fork of the decoder, its divergence, attribution and sweep."""
    from tests.ui_fixtures import save_tiny_seq2seq

    lm = load_model(save_tiny_seq2seq(tmp_path / "s.safetensors"))
    session = Session()
    original = play(session, lm, UISettings(model="s", prompt="March 5", max_new_tokens=6))
    edited = fork(session, lm, Ablate(0, head=1))
    div = lab.divergence_of(lm, original, edited)
    assert len(div.kl) == len(original.path) and (div.kl >= 0).all()
    why = lab.why(lm, edited, 2, versus=True)
    assert why.cross_heads is not None and why.total == pytest.approx(why.logit, rel=1e-4, abs=1e-4)
    assert not np.isnan(lab.sweep(lm, original, 2, 0).logprob_drop).any()


def test_an_edit_that_keeps_the_text_still_shows_beside_the_original(lm):
    session = Session()
    original = play(session, lm, SETTINGS)
    same = fork(session, lm, Steer(1, [0.0] * lm.config.d_model, scale=1.0))  # a zero vector changes nothing
    assert same.generated_ids == original.generated_ids
    assert [(r["number"], bool(r["edit"])) for r in history.branch_rows(session, same, "en")] == [(1, False), (2, True)]


def test_patching_from_another_prompt_forks_the_run_with_that_prompt_s_residual(lm):
    from playground.analysis.steering import residual_after
    from playground.app import views
    from playground.app.views import Selection
    from playground.interventions import Patch

    session = Session(model="a")
    original = play(session, lm, SETTINGS)
    other = "Hallo there"  # one character changed: the same number of tokens, positions aligned
    other_ids = lm.tokenize(other)
    assert len(other_ids) == len(original.prompt_ids)
    last = lab.patch_from_prompt(lm, original, other, 1, len(other_ids) - 1)
    assert isinstance(last, Patch) and (last.layer, last.position) == (1, len(other_ids) - 1)
    np.testing.assert_allclose(last.value, residual_after(lm, other_ids, 1)[-1].numpy(), rtol=1e-6)
    early = lab.patch_from_prompt(lm, original, other, 0, -1)  # -1: where the prompts differ ("e" / "a")
    assert early.position == 1
    np.testing.assert_allclose(early.value, residual_after(lm, other_ids, 0)[1].numpy(), rtol=1e-6)
    forked = press(session, lm, "causal", "lab_patch", run=original, lab_patch_prompt=other, lab_patch_layer=0,
                   lab_patch_position=-1)
    ref = generate_all(lm, original.prompt_ids, GenerationConfig(max_new_tokens=10, top_candidates=8,
                                                                 interventions=(early,)))
    assert forked.generated_ids == ref.token_ids and compared_with(forked, session.runs) is original
    assert "patch the residual after block 0 at position 1" in lab.describe_edits(forked.settings.edits, "en")
    shown = views.show(views.PANELS["lab"], views.context_for(views.PANELS["lab"], session, lambda *a: lm),
                       Selection(step=0))
    assert shown["lab_div"].visible and f"Compared with run {original.number}" in shown["lab_md"].value
    assert shown["lab_patch_position"].maximum == len(original.prompt_ids) - 1
    summary = lab.patch_summary(lm, original, early, other)
    assert forked.results["patch"] == summary  # kept on the run the patch made (the lab shows it while it is on screen)
    assert "position 1" in summary and "“e”" in summary and "“a”" in summary
    # Its own prompt's residual put back in place changes nothing.
    same = lab.patch_from_prompt(lm, original, SETTINGS.prompt, 1, -1)
    assert same.position == len(original.prompt_ids) - 1  # no difference: the last position
    assert fork(session, lm, same, run=original).generated_ids == original.generated_ids


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_patching_refuses_prompts_that_do_not_line_up_in_the_visitor_s_language(lm, lang):
    from playground.app.words import t

    run = play(Session(), lm, SETTINGS)
    n = len(run.prompt_ids)
    with pytest.raises(lab.LabError) as refused:
        lab.patch_from_prompt(lm, run, "Hi", 0, -1)
    assert said(refused.value, lang) == t("lab_patch_length", lang, run=n, other=len(lm.tokenize("Hi")))
    for other, layer, position, key in (("  ", 0, 0, "lab_patch_empty"), ("Hallo there", 9, 0, "lab_patch_layer_bad"),
                                        ("Hallo there", 0, n, "lab_patch_position_bad")):
        with pytest.raises(lab.LabError) as refused:
            lab.patch_from_prompt(lm, run, other, layer, position)
        assert said(refused.value, lang) == t(key, lang, last=lm.config.n_layers - 1 if layer == 9 else n - 1)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_lab_names_the_head_that_adds_most_to_the_token_on_screen(lm, lang):
    """The lab's line (which the guided path reads and sets its sliders to) names the head with the largest direct
    attribution to the token chosen at the step on screen, with its run and step, and carries it for the page."""
    session = Session()
    run = play(session, lm, SETTINGS)
    for step in (2, None):  # a clicked token, and the newest
        at = run.step(step)
        heads = attribute_step(lm, lab.as_result(run), at).heads
        layer, head = np.unravel_index(np.argmax(heads), heads.shape)  # the argmax, computed here
        assert lab.key_head(attribute_step(lm, lab.as_result(run), at)) == (layer, head)
        data = causal.compute(Context(lm=lm, run=run, runs=session.runs, lang=lang), Selection(step=step))
        line = causal.draw(data, lang)["lab_key_md"].value
        mark = re.search(r'data-run="(\d+)" data-layer="(\d+)" data-head="(\d+)"', line)
        assert mark and tuple(map(int, mark.groups())) == (run.number, layer, head)
        assert f"{layer}.{head}" in line and f"{heads[layer, head]:+.2f}" in line
        assert lab.reads(run, at, lang) in line
        if lang == "zh":
            assert "贡献最大" in line
    # an edited run's own attribution: the head it ablated adds nothing, so another one is named
    edited = fork(session, lm, Ablate(int(layer), head=int(head)))
    data = causal.compute(Context(lm=lm, run=edited, runs=session.runs, lang=lang), Selection(step=None))
    assert (data["key"]["layer"], data["key"]["head"]) != (layer, head)
