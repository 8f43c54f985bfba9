"""The app core's Session without Gradio: one source for the current run, the step, the view, the language
and the link, whatever order a visitor switches models, branches, opens links and changes language."""

from __future__ import annotations

import dataclasses
import itertools
from urllib.parse import parse_qsl

import numpy as np
import pytest

from playground.app import history
from playground.app.play import Origin
from playground.app.session import MAX_RUNS_PER_SESSION, Session
from playground.app.settings import UISettings, from_query, parse_branches
from playground.checkpoints.loader import load_model
from tests.app.forks import press
from tests.app.test_app_run import play
from tests.ui_fixtures import save_tiny_decoder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("w")
    return {"a": load_model(save_tiny_decoder(root / "a")), "b": load_model(save_tiny_decoder(root / "b", seed=1))}


def other_token(run, step: int) -> int:
    return next(c.token_id for c in run.path[step].candidates if c.token_id != run.path[step].token_id)


def test_selecting_a_step_only_takes_steps_of_the_current_run(models):
    session = Session()
    old = play(session, models["a"], UISettings(model="a", prompt="Hi", max_new_tokens=4))
    run = play(session, models["a"], UISettings(model="a", prompt="Yo", max_new_tokens=4))
    assert session.step() == 3  # following the newest token
    assert session.select(run.token, 1) and session.step() == 1 and session.selected_step == 1
    for token, step in ((old.token, 2), (run.token, 4), (run.token, -1), (run.token, True), (run.token, "2")):
        assert not session.select(token, step)
    assert session.step() == 1
    play(session, models["a"], UISettings(model="a", prompt="Hey", max_new_tokens=3))
    assert session.selected_step is None and session.step() == 2  # a new run is followed from its end


def test_the_view_is_kept_by_the_session_and_used_by_the_next_run(models):
    session = Session()
    session.set_view("self", 0, "group:1")
    run = play(session, models["a"], UISettings(model="a", prompt="Hi", max_new_tokens=2))
    assert session.view.head == "group:1" and run.live_layer == 0
    assert run.path[0].capture.attention["self"][0] is not None  # layer 0 recorded, as the view asks


def test_a_session_keeps_its_last_runs_and_says_which_left(models):
    session = Session()
    count = MAX_RUNS_PER_SESSION + 2
    runs = [play(session, models["a"], UISettings(model="a", prompt=f"p{i}", max_new_tokens=1)) for i in range(count)]
    assert session.runs == runs[-MAX_RUNS_PER_SESSION:] and session.current is runs[-1]
    assert [r.number for r in runs] == list(range(1, count + 1)) and session.run(1) is None and session.gone == 2
    assert history.gone(session, "en") == f"Runs 1–2 left the list: a tab keeps its last {MAX_RUNS_PER_SESSION} runs."
    assert "第 1–2 次运行已移出列表" in history.gone(session, "zh")
    assert [e.number for e in history.entries(session, "en")] == [r.number for r in reversed(runs[2:])]
    assert session.pick(1) is None and session.current is runs[-1]  # gone: nothing changes


def test_lineage_branches_and_the_link_of_a_chain_of_branches(models):
    session = Session()
    settings = UISettings(model="a", prompt="Hello", max_new_tokens=8)
    root = play(session, models["a"], settings)
    t1 = other_token(root, 3)
    first = play(session, models["a"], root.settings, parent=(root, 3, [t1]))
    t2 = other_token(first, 2)
    second = play(session, models["a"], first.settings, parent=(first, 2, [t2]))
    assert session.lineage(second) == [(3, [t1]), (2, [t2])] and session.lineage(root) == []
    rows = session.branches(second)
    assert [(r["number"], r["parent"], r["step"], r["current"]) for r in rows] == [
        (1, None, None, False), (2, 1, 4, False), (3, 2, 7, True)]  # as people count: 3 + 1, then 4 + 2 + 1
    assert rows[0]["shared"] + rows[0]["diverges"] + rows[0]["rest"] == "".join(root.stream_texts)
    query = session.link_query()
    parsed, notes = from_query(dict(parse_qsl(query[1:])))
    assert notes == [] and parse_branches(parsed.branches) == [(3, [t1]), (2, [t2])]
    assert dataclasses.replace(parsed, branches="") == dataclasses.replace(settings, branches="")
    # replaying the link's run and branches gives the same tokens
    replay = Session()
    run = play(replay, models["a"], parsed)
    for step, ids in parse_branches(parsed.branches):
        run = play(replay, models["a"], run.settings, parent=(run, step, ids))
    assert run.stream_ids == second.stream_ids

    assert [history.label(r, "en") for r in (root, first, second)] == [
        "run 1", "run 2 · branch at step 4 · from run 1", "run 3 · branch at step 7 · from run 2"]
    again = play(session, models["a"], settings)  # Generate again: the same tokens as the root, a run of its own
    assert again.origin is None and session.branches(again) == [] and len(session.branches(second)) == 3
    assert [e.label for e in history.entries(session, "en")][:2] == ["run 4", "run 3 · branch at step 7 · from run 2"]


def test_a_link_names_the_seed_a_sampling_run_drew(models):
    session = Session()
    widgets = UISettings(model="a", prompt="Hello", mode="sample", seed=None, max_new_tokens=6)
    run = play(session, models["a"], widgets)
    assert run.cfg.seed is not None and run.settings.seed is None
    parsed = from_query(dict(parse_qsl(session.link_query()[1:])))[0]
    assert parsed.seed == run.cfg.seed and parsed.mode == "sample"
    again = play(Session(), models["a"], parsed)
    assert again.generated_ids == run.generated_ids
    # a branch of it samples with the same seed, so the link replays the branch too
    at = min(2, len(run.path) - 1)  # a drawn seed may end the run early (the end token)
    branch = play(session, models["a"], run.settings, parent=(run, at, [other_token(run, at)]))
    assert branch.cfg.seed == run.cfg.seed
    replay_settings = from_query(dict(parse_qsl(session.link_query()[1:])))[0]
    tab = Session()
    replay = play(tab, models["a"], replay_settings)
    step, ids = parse_branches(replay_settings.branches)[0]
    assert play(tab, models["a"], replay.settings, parent=(replay, step, ids)).stream_ids == branch.stream_ids
    # a new press draws a new seed; a typed seed pins it
    assert play(session, models["a"], widgets).cfg.seed != run.cfg.seed
    pinned = dataclasses.replace(widgets, seed=5)
    assert play(session, models["a"], pinned).cfg.seed == play(session, models["a"], pinned).cfg.seed == 5


def test_the_link_is_always_the_link_of_the_run_on_screen(models):
    session = Session()
    settings = UISettings(model="a", prompt="Hello", max_new_tokens=6)
    root = play(session, models["a"], settings)
    branch = play(session, models["a"], root.settings, parent=(root, 2, [other_token(root, 2)]))
    assert "branches" in session.link_query()
    other = play(session, models["a"], dataclasses.replace(settings, prompt="Something else"))
    assert "branches" not in session.link_query() and "Something+else" in session.link_query()
    assert session.pick(branch.number) is branch and session.selected_step is None  # picked: from its newest token
    assert "branches" in session.link_query() and "Something" not in session.link_query()
    assert session.current is branch and session.runs[-1] is other
    session.leave()  # another model picked: nothing on screen, the history stays
    assert session.current is None and len(session.runs) == 3 and session.link_query() == ""
    widgets = dataclasses.replace(settings, prompt="typed", kv_window=8)
    assert from_query(dict(parse_qsl(session.link_query(widgets)[1:])))[0] == dataclasses.replace(
        settings, prompt="typed")  # nothing on screen: the widgets' plain run


def test_a_fork_knows_its_origin_and_its_family(models):
    """A fork records the run it came from when it is made; the branch comparison is that family, never runs found
    again by comparing settings (a repeat of the same request is a run of its own)."""
    session = Session()
    settings = UISettings(model="a", prompt="Hello there", max_new_tokens=6)
    root = play(session, models["a"], settings)
    windowed = press(session, models["a"], "kv", "kvlab_fork", kv_window=4)
    assert (windowed.origin, windowed.experiment, windowed.changes) == (root.number, "kv", {"kv_window": 4})
    repeat = play(session, models["a"], settings)  # the same request again
    assert repeat.origin is None and session.family(windowed) == [root, windowed] and session.family(repeat) == [repeat]
    both = press(session, models["a"], "precision", "precision_fork", run=windowed, keep=True,  # stacked on purpose
                 weight_precision="int8")
    assert both.origin == windowed.number and both.changes == {"weight_precision": "int8"}
    assert history.label(both, "en") == "run 4 · int8 weights · from run 2"  # what this fork added
    assert history.badge(both, "en") == "window 4 · int8 weights"  # everything that is not plain
    assert history.badge(both, "zh") == "窗口 4 · int8 权重" and history.badge(root, "en") == ""
    assert [r["number"] for r in session.branches(both)] == [1, 2, 4]
    again = play(session, models["a"], settings, origin=Origin(root, "causal"))  # a fork that changed nothing
    assert again.changes == {} and history.label(again, "en") == "run 5 · from run 1"


def test_a_links_run_is_taken_once(models):
    session = Session()
    session.opened_from({"model": "a", "prompt": "Hi"})
    assert session.link_names("prompt") and not session.link_names("chat")
    assert session.take_link_run() and not session.take_link_run()
    session.opened_from({"model": "a", "prompt": "  "})
    assert not session.take_link_run()


STEPS = ("switch", "branch", "link", "language")


@pytest.mark.parametrize("order", list(itertools.permutations(STEPS)), ids="-".join)
def test_every_order_of_switch_branch_link_and_language_leaves_one_consistent_state(models, order):
    """Whatever the order, the session's current run is the newest, the step on screen is one of its steps,
    branches compare runs of one model and prompt only, and the link reproduces what is on screen."""
    session = Session()
    widgets = UISettings(model="a", prompt="Hello", max_new_tokens=6)
    play(session, models["a"], widgets)
    for action in order:
        run = session.current
        if action == "switch":  # another model: a plain run of it (the widgets follow the model)
            name = "b" if widgets.model == "a" else "a"
            widgets = dataclasses.replace(widgets, model=name)
            play(session, models[name], widgets)
            assert session.current.branch_of is None and session.branches(session.current) == []
        elif action == "branch":
            step = min(2, len(run.path) - 1)
            session.select(run.token, step)
            play(session, models[run.settings.model], run.settings, parent=(run, step, [other_token(run, step)]))
            assert session.current.branch_of == (run.number, step) and session.selected_step is None
        elif action == "link":  # a new tab from this tab's link replays what it showed
            query = session.link_query()
            tab = Session()
            tab.opened_from(dict(parse_qsl(query[1:])))
            assert tab.take_link_run()
            parsed = from_query(tab.link)[0]
            replay = play(tab, models[parsed.model], parsed)
            for step, ids in parse_branches(parsed.branches):
                replay = play(tab, models[parsed.model], replay.settings, parent=(replay, step, ids))
            assert replay.stream_ids == run.stream_ids and replay.prompt_ids == run.prompt_ids
        else:
            session.lang = "zh" if session.lang == "en" else "en"
            widgets = dataclasses.replace(widgets, lang=session.lang)
        current = session.current
        assert current is session.runs[-1] and session.step() in range(len(current.path))
        for row in session.branches(current):
            other = session.run(row["number"])
            assert other.settings.model == current.settings.model and other.prompt_ids == current.prompt_ids
        assert from_query(dict(parse_qsl(session.link_query()[1:])))[0].lang == session.lang


def test_finished_runs_keep_their_recorded_arrays_within_the_budgets(tmp_path):
    """Round 4, row 2: two long runs on a many-head upload held +800 MiB until their tab went. The oldest
    runs' recorded arrays are freed first, per tab and for the server; a row asked for later is computed
    through the engine and equals the recorded one."""
    from playground.app.session import Sessions

    lm = load_model(save_tiny_decoder(tmp_path / "m"))
    sessions = Sessions()
    first, second = sessions.get("a"), sessions.get("b")
    settings = UISettings(model="m", prompt="Hello there", max_new_tokens=12)
    old = play(first, lm, settings)
    recorded = old.attention_row(lm, "self", lm.config.n_layers - 1, 5)
    newer = play(second, lm, settings)
    size, record = old.capture_bytes(), old.record_bytes()
    assert size > 0 and newer.capture_bytes() == size
    both = old.kept_bytes() + newer.kept_bytes()
    assert sessions.enforce_memory(per_session=both, server=both) == both  # within both: nothing freed
    assert sessions.enforce_memory(per_session=both, server=both - 1) == both - size  # the older run's arrays go
    assert old.captures_dropped and old.capture_bytes() == 0 and not newer.captures_dropped
    again = old.attention_row(lm, "self", lm.config.n_layers - 1, 5)  # computed through the engine now
    np.testing.assert_allclose(again, recorded, rtol=0, atol=1e-6)
    assert old.compact and len(old.path) == 12 and old.record_bytes() == record  # the run itself stays
    kept = old.kept_bytes()  # its record and the whole-run map that answered the row
    assert sessions.enforce_memory(per_session=newer.kept_bytes() - 1, server=10 * both) == kept + newer.record_bytes()
    assert newer.captures_dropped  # a tab over its own share


def test_over_budget_even_without_arrays_the_oldest_runs_leave_the_history(tmp_path):
    """Issue 42, row 3: what a run keeps besides its arrays (its record) is counted too. A visitor's tabs together
    (a class behind one address) stay within the visitor's budget: their arrays go first, then their oldest runs,
    never the run on screen; another visitor's runs are not touched."""
    from playground.app.session import Sessions

    lm = load_model(save_tiny_decoder(tmp_path / "m"))
    sessions = Sessions()
    sessions.visitor_of = lambda key: "school" if key.startswith("pupil") else key
    settings = UISettings(model="m", prompt="Hello there", max_new_tokens=12)
    pupils = [sessions.get(f"pupil{i}") for i in range(2)]
    runs = [play(tab, lm, settings) for tab in pupils for _ in range(3)]
    teacher = play(sessions.get("teacher"), lm, settings)
    records = [r.record_bytes() for r in runs]
    assert all(r.capture_bytes() > 0 for r in runs) and len(set(records)) == 1  # equal runs: equal records
    budget = sum(records[1:])  # every array must go, and one run's record
    kept = sessions.enforce_memory(per_session=10**9, per_visitor=budget, server=10**9)
    assert pupils[0].runs == runs[1:3] and pupils[1].runs == runs[3:]  # the oldest run left its history
    assert pupils[0].gone == 1 and all(r.captures_dropped for r in runs)
    assert not teacher.captures_dropped and kept == budget + teacher.kept_bytes()
    sessions.enforce_memory(per_session=10**9, per_visitor=0, server=10**9)  # nothing fits: the runs on screen stay
    assert pupils[0].runs == [runs[2]] and pupils[1].runs == [runs[5]] and sessions.get("teacher").runs == [teacher]


def test_the_newest_selection_wins_when_two_arrive_out_of_order(tmp_path):
    """Two quick arrow presses are two requests that may arrive in either order; the page counts them."""
    lm = load_model(save_tiny_decoder(tmp_path / "m"))
    session = Session()
    run = play(session, lm, UISettings(model="m", prompt="Hello", max_new_tokens=6))
    assert session.select(run.token, 2, order=2)
    assert not session.select(run.token, 3, order=1)  # the older press, arriving late
    assert session.selected_step == 2
    assert session.select(run.token, 4)  # a caller without a count is taken as it comes
    assert session.select(run.token, 1, order=3) and session.selected_step == 1


def test_a_picked_run_is_read_by_the_lessons_again(models):
    """A run picked from the history is the lessons' run: what it recorded is still there (only the passes made
    from it are made again); once the memory budget freed it, the logit lens says so in words, never the library's
    advice to a script."""
    from playground.app import lessons
    from playground.app.words import t

    lm = models["a"]
    session = Session()
    first = play(session, lm, UISettings(model="a", prompt="Hello", max_new_tokens=5))
    play(session, lm, UISettings(model="a", prompt="Hello there", max_new_tokens=5))
    assert first.analysis is None and not first.maps  # not on screen: its derived passes are let go
    assert session.pick(first.number) is first
    lens = lessons.show("lens", lm, session.current, None, lessons.Inputs(), "en")
    assert "step 5" in lens.caption and len(lens.figures) == 2
    first.drop_captures()  # the memory budget freed its recorded arrays
    for lang in ("en", "zh"):
        gone = lessons.show("lens", lm, first, None, lessons.Inputs(), lang)
        assert gone.caption == t("lesson_lens_no_residual", lang) and gone.figures == []


def test_a_running_run_keeps_its_recorded_arrays_within_the_budgets_while_it_records(tmp_path, monkeypatch):
    """Issue 42's class soak: 35 minutes in, the runs kept 1,091 MiB against the server's 1,024 MiB, because the
    budget was kept only when a run ended: the arrays of runs still recording passed it. Now the budget is kept
    again each time a run has recorded `BUDGET_CHECK_BYTES` more: a run's older steps' arrays go while it runs
    (its newest step's stay, the live screen draws them), and a freed row is computed again, equal."""
    from playground.app import play as play_module
    from playground.app.session import Sessions

    lm = load_model(save_tiny_decoder(tmp_path / "m"))
    settings = UISettings(model="m", prompt="Hello there", max_new_tokens=24)
    solo = play(Session(key="solo"), lm, settings)
    steps = [sum({id(a): a.nbytes for a in _arrays_of(e, solo.path[t])}.values()) for t, e in enumerate(solo.events)]
    assert solo.recorded_bytes() == sum(steps)  # the count kept as steps came equals a count of every array
    step_bytes = max(steps)  # the first (it reads the prompt), then rows growing with the context

    sessions = Sessions()
    budget = 4 * step_bytes
    limit = budget + solo.record_bytes()  # its record (never freed while it runs) and four steps' arrays
    monkeypatch.setattr(play_module, "BUDGET_CHECK_BYTES", step_bytes)
    held = []

    def keep() -> None:
        held.append(sessions.enforce_memory(per_session=limit, server=limit))

    tab = sessions.get("a")
    frames = list(play_module.play(tab, lambda *a: lm, settings, pace=False, keep_within_budget=keep))
    run = frames[-1].run
    assert run.generated_ids == solo.generated_ids and len(held) >= 8
    assert max(held) <= limit + step_bytes  # over by at most one check's worth, and never for long
    assert run.captures_dropped and run.recorded_bytes() <= budget
    held = {id(a): a.nbytes for t, e in enumerate(run.events) for a in _arrays_of(e, run.path[t])}
    assert sum(held.values()) == run.recorded_bytes()  # what its path still holds is counted: nothing kept unseen
    layer = lm.config.n_layers - 1
    assert run.path[-1].capture.attention is not None  # the newest step drawn live kept its row
    np.testing.assert_allclose(run.attention_row(lm, "self", layer, 3), solo.attention_row(lm, "self", layer, 3),
                               rtol=0, atol=1e-6)  # a freed row, computed through the engine


def _arrays_of(event, step) -> list[np.ndarray]:
    found = [event.attention, event.residual, event.prompt_attention, step.capture.attention, step.capture.residual]
    out, stack = [], found
    while stack:
        value = stack.pop()
        if isinstance(value, np.ndarray):
            out.append(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return out
