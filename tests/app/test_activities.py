"""The class activities' cores on the shipped tiny-lm: "Is it a database?" (one question sampled N times through the
page's press, its distinct answers counted with the model's probability of each) and "Which layer knows?" (the first
layer whose logit lens ranks a step's chosen token first, a guess scored)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import torch

from playground.app.activities import lens_guess, samples
from playground.app.notes import error_line
from playground.app.play import play
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.checkpoints.loader import load_model
from playground.errors import PlaygroundError

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The Python interpreter"


@pytest.fixture(scope="module")
def tiny():
    return load_model(ROOT / "weights" / "tiny-lm")


def ask_many(lm, seeds, max_new_tokens: int, prompt: str = PROMPT) -> samples.Outcome:
    widgets = UISettings(model="tiny-lm", prompt=prompt, max_new_tokens=max_new_tokens, mode="beam", temperature=0.2,
                         top_k=3, top_p=0.5, repetition_penalty=1.5)  # the page's knobs are not the activity's
    greedy, *drawn = samples.sample_many(lm, widgets, seeds, owner="page:class", key="class")
    return samples.tally(drawn, greedy, prompt=prompt, model="tiny-lm", max_new_tokens=max_new_tokens)


def model_logprobs(lm, prompt_ids: list[int], ids: tuple[int, ...]) -> float:
    """Σ log p(token | the tokens before it), from one teacher-forced pass of the model (no engine, no sampler)."""
    stream = list(prompt_ids) + list(ids)
    with torch.inference_mode():
        logp = torch.log_softmax(lm.logits(torch.tensor([stream[:-1]]))[0].double(), dim=-1)
    return float(sum(logp[len(prompt_ids) - 1 + i, t] for i, t in enumerate(ids)))


# --- "Is it a database?" ------------------------------------------------------------------------------------------


def test_twenty_one_token_answers_come_as_often_as_the_model_s_probabilities_say(tiny):
    seeds = samples.seeds_from(3, 20)
    assert seeds == list(range(3, 23))
    o = ask_many(tiny, seeds, max_new_tokens=1)
    assert o.n == 20 and sum(a.count for a in o.answers) == 20
    assert sorted(s for a in o.answers for s in a.seeds) == seeds  # every seed once, under the answer it drew
    with torch.inference_mode():
        probs = torch.softmax(tiny.logits(torch.tensor([tiny.tokenize(PROMPT)]))[0, -1].double(), dim=-1)
    for a in o.answers:  # the probability shown is the model's own (temperature 1, nothing cut)
        (token,) = a.token_ids
        assert a.prob == pytest.approx(float(probs[token]), rel=1e-5)
    assert o.greedy.token_ids == (int(probs.argmax()),) == (597,) and o.greedy.text == " will"
    assert o.greedy.seed is None and o.greedy.logprob == pytest.approx(math.log(float(probs[597])), rel=1e-5)
    top = o.answers[0]  # the most frequent answer first; the greedy one marked wherever it is
    assert top.count == max(a.count for a in o.answers)
    assert [a.greedy for a in o.answers].count(True) == (1 if any(a.token_ids == (597,) for a in o.answers) else 0)
    # what these seeds draw from tiny-lm (the engine's sampler, one generator per seed)
    assert [(a.token_ids, a.count) for a in o.answers][:3] == [((370,), 3), ((291,), 2), ((456,), 2)]


def test_a_longer_answer_s_probability_is_the_sum_of_its_tokens_log_probabilities(tiny):
    o = ask_many(tiny, [11, 12, 11], max_new_tokens=5)
    assert [a.count for a in o.answers] == [2, 1]  # the same seed draws the same answer again
    assert o.answers[0].seeds == [11, 11]
    prompt_ids = tiny.tokenize(PROMPT)
    for a in [*o.answers]:
        assert len(a.token_ids) == 5
        assert a.logprob == pytest.approx(model_logprobs(tiny, prompt_ids, a.token_ids), abs=1e-4)
    assert o.greedy.logprob == pytest.approx(model_logprobs(tiny, prompt_ids, o.greedy.token_ids), abs=1e-4)
    assert o.greedy.text == " will be\nassignment"
    assert o.greedy.logprob > max(a.logprob for a in o.answers)  # here greedy's answer is likelier than any sampled


def test_the_count_is_bounded_and_said_in_both_languages():
    assert samples.check_count(None) == samples.DEFAULT_SAMPLES == 20
    assert samples.check_count(50) == 50 and samples.check_count("7") == 7
    for bad in (0, 51, 2.5, "many", -1):
        with pytest.raises(PlaygroundError) as err:
            samples.check_count(bad)
        assert error_line(err.value, "en", "samples") == "N must be a whole number from 1 to 50."
        assert error_line(err.value, "zh", "samples") == "N 必须是 1 到 50 之间的整数。"
    assert samples.check_prediction("", 20) is None is samples.check_prediction(0, 20)  # an empty number box
    assert samples.check_prediction(3, 20) == 3
    with pytest.raises(PlaygroundError):
        samples.check_prediction(21, 20)


def test_drawn_seeds_are_different_and_a_stop_ends_the_samples(tiny):
    seeds = samples.draw_seeds(50)
    assert len(set(seeds)) == 50 and all(0 <= s < 2**31 for s in seeds)
    stop = threading.Event()
    widgets = UISettings(model="tiny-lm", prompt=PROMPT, max_new_tokens=2)
    got = []
    for s in samples.sample_many(tiny, widgets, [1, 2, 3, 4], owner="page:s", key="s", stop=stop):
        got.append(s)
        if len(got) == 2:
            stop.set()
    assert len(got) == 2  # the greedy answer and one sample, then nothing


def test_the_table_shows_counts_probabilities_the_prediction_and_the_seeds(tiny):
    o = ask_many(tiny, samples.seeds_from(3, 20), max_new_tokens=1)
    o.prediction = 1
    words = samples.html(o, "en")
    assert f'data-n="20" data-distinct="{len(o.answers)}"' in words
    assert f"You predicted 1 different answers; {len(o.answers)} came." in words
    assert 'data-count="3"' in words and "3 / 20" in words and "␣that" in words and "␣will" in words
    assert ", ".join(str(s) for s in range(3, 23)) in words
    zh = samples.html(samples.Outcome.from_dict(o.to_dict()), "zh")  # the state the page keeps, drawn again
    assert f"tiny-lm 的 20 个答案(每个最多 1 个 token,温度 1):{len(o.answers)} 种不同。" in zh
    assert "贪心" in zh and "<script" not in samples.html(
        samples.tally([samples.Sample(1, (5,), "<script>", -1.0)], samples.Sample(None, (5,), "<script>", -1.0),
                      prompt="x", model="m", max_new_tokens=1), "en")


def test_the_class_s_game_guesses_for_the_first_token_are_shown_beside_the_samples(tiny):
    """The game played on the question's first step: each token the class guessed, how many guessed it, how many
    samples began with it and the model's probability, which is the samples' own (one token each: the same number)."""
    from playground.app.activities.game import Rooms

    session = Session(key="class")
    *_, last = play(session, lambda *a: tiny, UISettings(model="tiny-lm", prompt=PROMPT, max_new_tokens=4), pace=False)
    rooms = Rooms()
    room = rooms.open(last.run, session.run_settings(last.run), "class", 0, shared=True)
    ranked = sorted(room.steps[0].options, key=lambda o: -o.prob)
    for player, option in (("ada", ranked[0]), ("bo", ranked[0]), ("cy", ranked[1])):
        rooms.guess(room.key, player, option.token_id)
    question = UISettings(model="tiny-lm", prompt=PROMPT)
    assert rooms.first_guesses("someone-else", question) == []  # only the teacher's own rooms
    assert rooms.first_guesses("class", UISettings(model="tiny-lm", prompt="Another question")) == []
    guesses = rooms.first_guesses("class", question)
    assert [(g["token_id"], g["players"]) for g in guesses] == [(ranked[0].token_id, 2), (ranked[1].token_id, 1)]
    o = ask_many(tiny, samples.seeds_from(11, 20), max_new_tokens=1)
    o = samples.tally([samples.Sample(s, a.token_ids, a.text, a.logprob) for a in o.answers for s in a.seeds],
                      o.greedy, prompt=PROMPT, model="tiny-lm", max_new_tokens=1, class_guesses=guesses)
    for g in guesses:
        came = [a for a in o.answers if a.token_ids == (g["token_id"],)]
        assert o.began_with(g["token_id"]) == sum(a.count for a in came)
        for a in came:  # the game's probability of the token is the one the samples were drawn with
            assert a.prob == pytest.approx(g["prob"], rel=1e-5)
    words = samples.html(samples.Outcome.from_dict(o.to_dict()), "en")
    top = guesses[0]
    assert 'class="pg-samples-class" data-players="3"' in words
    assert f'data-id="{top["token_id"]}" data-players="2" data-began="{o.began_with(top["token_id"])}"' in words
    assert "The class&#x27;s predictions" in words and "2 / 3" in words
    assert "全班的预测" in samples.html(o, "zh") and "pg-samples-class" not in samples.html(
        samples.tally([samples.Sample(1, (5,), "x", -1.0)], o.greedy, prompt=PROMPT, model="tiny-lm",
                      max_new_tokens=1), "en")  # no game on the question: no such table


# --- "Which layer knows?" -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def greedy_run(tiny):
    session = Session(key="lens")
    *_, last = play(session, lambda *a: tiny, UISettings(model="tiny-lm", prompt=PROMPT, max_new_tokens=8), pace=False)
    return last.run


def test_the_lens_answer_is_the_first_layer_that_ranks_the_chosen_token_first(tiny, greedy_run):
    run = greedy_run
    assert [s.token_text for s in run.path] == [" will", " be", "\n", "a", "ssignment", " to", " a", " group"]
    answers = []
    for index, step in enumerate(run.path):
        ranks = lens_guess.lens_ranks(tiny, run, index)
        assert len(ranks) == tiny.config.n_layers + 1 == 5
        assert ranks[-1] == 1  # greedy: the model's own output ranks its choice first
        # the ranks, from the recorded residual through the model's own final norm and head
        residual = torch.from_numpy(step.capture.residual)
        with torch.inference_mode():
            logits = tiny.model.unembed(residual[None])[0]
        assert ranks == [int((row > row[step.token_id]).sum()) + 1 for row in logits]
        answers.append(lens_guess.first_layer(ranks))
    assert answers == [4, 2, 3, 4, 1, 2, 2, 4]
    assert lens_guess.first_layer([3, 2, 5]) is None


def test_a_guess_is_scored_by_the_layers_it_is_off_and_the_board_keeps_the_mean(tiny, greedy_run):
    run = greedy_run
    q = lens_guess.ask(run, lens_guess.index_for(run, 3, None), tiny.config.n_layers)
    assert (q["step"], q["token"], q["before"], q["layers"]) == (3, "\n", "The Python interpreter will be", 4)
    state = lens_guess.reveal(q, 1, lens_guess.lens_ranks(tiny, run, q["index"]))
    assert (state["answer"], state["guess"], state["history"][-1]["score"]) == (3, 1, -2)
    assert lens_guess.reveal(state, 3, [1, 1, 1, 1, 1]) is state  # revealed: the first guess stays
    nxt = {**lens_guess.ask(run, lens_guess.index_for(run, 5, None), 4), "history": state["history"]}
    state = lens_guess.reveal(nxt, 1, lens_guess.lens_ranks(tiny, run, nxt["index"]))
    assert state["answer"] == 1 and lens_guess.board(state["history"]) == {"steps": 2, "mean": -1.0, "right": 1}
    assert lens_guess.score(5, None, 4) == 0 and lens_guess.score(0, None, 4) == -5  # "never" is layer L + 1
    words = lens_guess.html(state, "en")
    assert 'data-answer="1" data-guess="1" data-score="0"' in words
    assert "Your board: steps played 2 · mean score -1.00 · exactly right 1." in words
    zh = lens_guess.html(state, "zh")
    assert "lens 第一次把它排在第一是在第 1 层。你的猜测:第 1 层。得分:0。" in zh
    with pytest.raises(PlaygroundError):
        lens_guess.reveal(lens_guess.ask(run, 0, 4), 6, [1] * 5)  # beyond "never"


def test_the_lens_needs_a_finished_run_with_its_residual_stream(tiny, greedy_run):
    with pytest.raises(PlaygroundError) as err:
        lens_guess.index_for(None, 0, None)
    assert error_line(err.value, "zh", "lens").startswith("请先生成一次运行")
    assert lens_guess.index_for(greedy_run, 0, None) == 7 and lens_guess.index_for(greedy_run, 0, 2) == 2
    assert lens_guess.index_for(greedy_run, 99, None) == 7  # past the end: the last step
