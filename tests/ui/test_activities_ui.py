"""The class activities through the real Gradio app without a browser: the samples press streams "answer i of N",
then the table the app core computes for the same seeds; the page's Stop ends it with the whole answers drawn so far;
two tabs keep their own lens questions and boards."""

from __future__ import annotations

import threading
from pathlib import Path

import gradio as gr
import pytest

from playground.app.activities import lens_guess, samples
from playground.app.settings import WIDGETS, UISettings
from playground.checkpoints.loader import load_model
from playground.ui import build_app

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The Python interpreter"


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    (root / "tiny-lm").symlink_to(ROOT / "weights" / "tiny-lm")
    return build_app(root, tmp_path_factory.mktemp("uploads")).playground_handlers


def request(session: str) -> gr.Request:
    return gr.Request(session_hash=session, query_params={}, client={"host": "127.0.0.1", "port": 1})


def widgets(settings: UISettings) -> list:
    return [getattr(settings, f) for f in WIDGETS]


def generate(h, session: str, settings: UISettings):
    h.models.load(settings.model, "float32", settings.lang, request(session))
    list(h.stream.generate(request(session), 0.0, *widgets(settings)))
    return h.sessions.get(session).current


def test_the_press_streams_its_progress_then_the_core_s_table(h):
    settings = UISettings(model="tiny-lm", prompt=PROMPT, max_new_tokens=1, seed=3, lang="zh")
    frames = list(h.teacher.activities.ask_many(request("many"), 20, 4, *widgets(settings)))
    assert "第 0 个答案,共 20 个" in frames[0][0] and "第 20 个答案,共 20 个" in frames[-2][0]
    view, data = frames[-1]
    lm = load_model(ROOT / "weights" / "tiny-lm")
    greedy, *drawn = samples.sample_many(lm, settings, samples.seeds_from(3, 20), owner="page:core", key="core")
    core = samples.tally(drawn, greedy, prompt=PROMPT, model="tiny-lm", max_new_tokens=1, prediction=4)
    assert data == core.to_dict()  # what the tab keeps is the core's outcome for seeds 3 … 22
    assert view == samples.html(core, "zh")
    assert h.teacher.activities.samples_again(data, "en") == samples.html(core, "en")  # the language switch
    assert h.sessions.get("many").runs == []  # the samples are kept in no history


def test_a_bad_count_says_so_and_runs_nothing(h):
    settings = UISettings(model="tiny-lm", prompt=PROMPT, max_new_tokens=1)
    (frame,) = h.teacher.activities.ask_many(request("bad"), 51, None, *widgets(settings))
    assert "N must be a whole number from 1 to 50." in frame[0]


def test_stop_ends_the_samples_with_the_whole_answers_drawn(h):
    settings = UISettings(model="tiny-lm", prompt=PROMPT, max_new_tokens=24, seed=9)
    frames = []
    for frame in h.teacher.activities.ask_many(request("stop"), 50, None, *widgets(settings)):
        frames.append(frame)
        if "Answer 3 of 50" in frame[0]:
            h.stream.stop(0.0, request("stop"))  # the page's Stop
    view, data = frames[-1]
    assert "The samples stopped before they finished." in view
    n = len(data["seeds"])
    assert 3 <= n < 50 and data["seeds"] == list(range(9, 9 + n))
    assert sum(a["count"] for a in data["answers"]) == n
    lm = load_model(ROOT / "weights" / "tiny-lm")  # no answer cut short by the Stop: each is its seed's whole answer
    for a in data["answers"]:
        for seed in a["seeds"]:
            whole = samples.one_sample(lm, samples.sample_settings(settings, seed), owner="page:core", key="core")
            assert list(whole.token_ids) == list(a["token_ids"])
    assert h.sessions.get("stop").job_stop is None


def test_two_tabs_keep_their_own_lens_questions_and_boards(h):
    runs = {tab: generate(h, tab, UISettings(model="tiny-lm", prompt=prompt, max_new_tokens=8))
            for tab, prompt in (("ada", PROMPT), ("bo", "Python is"))}
    a = h.teacher.activities
    states = {}
    for tab, step in (("ada", 3), ("bo", 5)):
        view, state, pick, row, nxt = a.lens_ask(step, None, "en", request(tab))
        assert state["run"] == runs[tab].token and state["step"] == step and pick["maximum"] == 5
        states[tab] = state
    results = {}

    def reveal(tab: str, guess: int) -> None:
        results[tab] = a.lens_reveal(guess, states[tab], "en", request(tab))

    threads = [threading.Thread(target=reveal, args=pair) for pair in (("ada", 1), ("bo", 4))]  # both at once
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    lm = load_model(ROOT / "weights" / "tiny-lm")
    for tab, guess in (("ada", 1), ("bo", 4)):
        view, state, row = results[tab]
        answer = lens_guess.first_layer(lens_guess.lens_ranks(lm, runs[tab], state["index"]))
        assert (state["answer"], state["guess"]) == (answer, guess)
        assert state["history"] == [{"step": state["step"], "token": state["token"], "guess": guess, "answer": answer,
                                     "score": lens_guess.score(guess, answer, 4)}]
        assert row["visible"] is False
    assert results["ada"][1]["answer"] == 3 and results["ada"][1]["history"][0]["score"] == -2
    # a tab's question names its own run: another tab cannot reveal it
    view, state, row = a.lens_reveal(1, {**states["ada"]}, "en", request("bo"))
    assert "Generate a run first" in view and state["__type__"] == "update"
