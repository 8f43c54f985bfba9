"""The Causal lab's handlers without a browser: a fork streams like every run and lands in the link, the
tab's panels draw at the selected step, the sweep reports its progress and stops on request."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from playground.app.experiments import EXPERIMENTS
from playground.app.settings import UISettings
from playground.interventions import Ablate, unpack
from tests.ui.test_ui import app, h, open_link, request, run, values, weights  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("h")
SETTINGS = UISettings(prompt="The Python interpreter", max_new_tokens=10)


def press(h, action: str, session: str, **widgets) -> list:  # noqa: F811
    """An experiment's button pressed on the page, its widgets holding `widgets`: every frame it yields."""
    experiment, button = next((e, a) for e in EXPERIMENTS for a in e.actions() if a.name == action)
    handler = h.experiments.fork if button.kind == "fork" else h.experiments.job
    return list(handler(experiment, button, widgets, request(session)))


def lab_panels(h, session: str, side: str = "shown", versus: bool = False) -> dict:  # noqa: F811
    """The Lab tab opened and drawn: its texts' values and its figures' and sliders' updates, by short name."""
    h.sessions.get(session).deep_tab = "lab"
    out = h.views.control("lab", {"lab_versus": versus, "lab_run": side}, request(session))
    short = {k.removeprefix("lab_"): v for k, v in out.items()}
    return {k: v["value"] if k in ("md", "attr_md") else v for k, v in short.items()}


def test_a_fork_streams_draws_its_panels_and_replays_from_its_link(h):  # noqa: F811
    _, original = run(h, SETTINGS, "lab")
    frames = press(h, "lab_ablate_head", "lab", lab_layer=1, lab_head=3)
    session = h.sessions.get("lab")
    fork = session.current
    assert fork is not original and fork.cfg.interventions == (Ablate(1, head=3),) and len(frames) >= 2
    live, notes, _, _ = frames[-1]  # the line under the fork button last
    assert [b["edit"] for b in live["branches"]] == ["", "ablate head 1.3"]
    session.deep_tab = "lab"
    out = lab_panels(h, "lab")
    assert "ablate head 1.3" in out["md"] and "KL" in out["md"] and out["div"]["visible"] is True
    assert "parts sum to" in out["attr_md"] and out["head"]["maximum"] == 3
    query = h.stream.link(request("lab"), *values(SETTINGS))
    params = dict(parse_qsl(query[1:]))
    assert unpack(params["edits"]) == (Ablate(1, head=3),)
    replay = open_link(h, "lab-replay", **params)
    again = h.sessions.get("lab-replay")
    assert [r.settings.edits == "" for r in again.runs] == [True, False] and len(replay) >= 2
    assert again.current.generated_ids == fork.generated_ids
    assert again.runs[0].generated_ids == original.generated_ids
    # A new press of Generate starts clean, whatever the link carried.
    _, plain = run(h, UISettings(**{**SETTINGS.__dict__, "edits": params["edits"]}), "lab-replay")
    assert plain.cfg.interventions == () and plain.generated_ids == original.generated_ids


def test_the_sweep_reports_progress_then_its_result(h):  # noqa: F811
    run(h, SETTINGS, "sweep")
    frames = press(h, "lab_sweep", "sweep", lab_layer=0)
    assert frames[0] == "head 0 of 4" and frames[-1] == ""  # the first pass's progress at once; then the lab draws it
    panels = lab_panels(h, "sweep")
    md, plot = panels["sweep_md"]["value"], panels["sweep_plot"]
    assert "loses" in md and plot["visible"] is True and "Stopped" not in md


def test_steering_measures_the_vector_then_forks(h):  # noqa: F811
    run(h, SETTINGS, "steer")
    frames = press(h, "lab_steer", "steer", lab_positive="I love this", lab_negative="I hate this", lab_steer_layer=1,
                   lab_scale=4.0)
    session = h.sessions.get("steer")
    assert type(session.current.cfg.interventions[0]).__name__ == "Steer" and frames[-1][0]["status"]["state"] == "done"
    steer_md = lab_panels(h, "steer")["steer_md"]["value"]  # kept on the steered run, shown while it is on screen
    assert "norm" in steer_md and "typically" in steer_md
    empty = press(h, "lab_steer", "steer", lab_positive="", lab_negative="I hate this", lab_steer_layer=1,
                  lab_scale=4.0)
    assert len(empty) == 1 and "Type both prompts" in empty[0][3]


def test_a_fork_keeps_the_selected_step_and_every_lab_result_names_its_run(h):  # noqa: F811
    _, original = run(h, SETTINGS, "keep")
    h.stream.select_step([original.token, 3])
    frames = press(h, "lab_ablate_head", "keep", lab_layer=1, lab_head=3)
    session = h.sessions.get("keep")
    fork = session.current
    assert fork is not original and session.selected_step == 3 and session.step() == 3
    assert all(f[0]["selected"] == 3 for f in frames)  # the live screen opens the fork at the step on screen
    session.deep_tab = "lab"
    panels = lab_panels(h, "keep")
    md, attr_md = panels["md"], panels["attr_md"]
    token = fork.path[3].token_text
    assert f"In run {fork.number} (ablate head 1.3), step 4" in attr_md and token in attr_md
    assert f"In run {fork.number} (ablate head 1.3), step 4" in md
    press(h, "lab_sweep", "keep", lab_layer=0)
    sweep_md = lab_panels(h, "keep")["sweep_md"]["value"]
    assert f"In run {fork.number} (ablate head 1.3), step 4" in sweep_md
    session.lang = "zh"
    assert f"第 {fork.number} 次运行(消融第 1 层第 3 个头),第 4 步" in lab_panels(h, "keep")["attr_md"]
    # a fork from the newest token keeps following the newest token
    h.stream.select_step([fork.token, len(fork.path) - 1])
    session.selected_step = None
    session.lang = "en"
    frames = press(h, "lab_ablate_mlp", "keep", lab_layer=0)
    assert session.selected_step is None and frames[-1][0]["selected"] is None
    label = f"In run {session.current.number} (ablate head 1.3; ablate the MLP of layer 0), step {len(session.current.path)}"
    assert label in lab_panels(h, "keep")["attr_md"]


def test_patching_on_the_page_forks_a_branch_with_its_divergence_and_its_link_replays_it(h):  # noqa: F811
    _, original = run(h, SETTINGS, "patch")
    other = "The Python interpretes"  # one character changed: the positions line up
    frames = press(h, "lab_patch", "patch", lab_patch_prompt=other, lab_patch_layer=1,
                   lab_patch_position=-1)  # -1: the last position, where they differ
    last = len(original.prompt_ids) - 1
    assert f"position {last}: this run's “r” gets what “s”" in frames[0][3]  # what goes where, before the fork
    session = h.sessions.get("patch")
    fork = session.current
    assert fork is not original and type(fork.cfg.interventions[0]).__name__ == "Patch"
    live = frames[-1][0]
    assert [b["edit"] for b in live["branches"]] == ["", f"patch the residual after block 1 at position {last}"]
    panels = lab_panels(h, "patch")
    assert f"Compared with run {original.number}" in panels["md"] and panels["div"]["visible"] is True
    params = dict(parse_qsl(h.stream.link(request("patch"), *values(SETTINGS))[1:]))
    open_link(h, "patch-replay", **params)
    assert h.sessions.get("patch-replay").current.generated_ids == fork.generated_ids
    refused = press(h, "lab_patch", "patch", lab_patch_prompt="Short", lab_patch_layer=1, lab_patch_position=-1)
    assert len(refused) == 1 and "same number of tokens" in refused[0][3] and session.current is fork


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_press_that_cannot_run_says_why_under_its_button(h, lang):  # noqa: F811
    from playground.app.describe import inert
    from playground.app.words import t

    session = f"said-{lang}"
    assert press(h, "spec_fork", session, draft="", draft_tokens=4)[-1][3] == t("spec_needs_run", "en")
    h.sessions.get(session).lang = lang
    run(h, UISettings(prompt="The Python interpreter", max_new_tokens=6, lang=lang), session)
    refused = press(h, "spec_fork", session, draft="", draft_tokens=4)  # the Drafter box left off
    assert len(refused) == 1 and refused[0][3] == inert(t("spec_choose", lang))
    kept = h.experiments.fork_lines(request(session))
    assert all(v == "" for v in kept[::2])  # a plain run on screen: no lab has anything to keep


@pytest.mark.parametrize("name", ["tiny-lm", "tiny-seq2seq"])
def test_loading_a_model_fits_the_layer_and_head_sliders_before_any_run(h, name):  # noqa: F811
    """Before the first run, the All heads tab's and the labs' layer and head sliders read the model's range
    (before, 0–1 until a view was drawn for a run)."""
    from playground.app import views
    from playground.ui.models import LOAD_SLOTS

    session = f"fit-{name}"
    out = h.models.load(name, "float32", "en", request(session))
    assert h.sessions.get(session).current is None  # no run yet
    config = h.models.model_for(name, "float32", session).config
    tops = {n: u["maximum"] for n, u in out.items() if isinstance(u, dict) and "maximum" in u}
    assert tops["att_layer"] == tops["lab_layer"] == tops["lab_steer_layer"] == tops["lab_patch_layer"] == max(
        1, config.n_layers - 1)
    assert tops["att_head"] == tops["lab_head"] == max(1, config.n_heads - 1)
    assert set(tops) == set(views.model_sliders()) and set(tops) <= set(LOAD_SLOTS)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_after_a_fork_the_open_labs_words_name_the_new_run_at_once(h, lang):  # noqa: F811
    """After a fork (or any run), before the lab's redraw (queued behind model work on a busy machine), its words
    say it reads the new run, and nothing of the previous run stays: before, they named the previous run for
    15–47 s on a busy machine."""
    from playground.app.words import t

    session_name = f"reading-{lang}"
    _, original = run(h, SETTINGS, session_name)
    session = h.sessions.get(session_name)
    session.lang = lang
    drawn = lab_panels(h, session_name)
    assert t("lab_reads", lang, n=original.number, step=10) in drawn["key_md"]["value"]  # run 1's words
    press(h, "lab_ablate_head", session_name, lab_layer=1, lab_head=3)
    fork = session.current
    said = h.views.reading(request(session_name))
    texts = {k: u["value"] for k, u in said.items() if isinstance(u, dict) and isinstance(u.get("value"), str)}
    assert texts["lab_md"] == t("view_pending", lang, n=fork.number)
    assert all(str(original.number) not in v for v in texts.values()), texts  # no word of run 1 left
    assert said["lab_attr"]["visible"] is False and said["lab_div"]["visible"] is False
    session.deep_tab = "none"  # Class tools open: no view to name it in
    assert h.views.reading(request(session_name)) == {}
