"""“Guess the next token” for a class: a room per run, found from the run's link; three visitors guess, the
teacher reveals, every guess is scored in bits; bounded rooms, names and time; no upload ever makes a room."""

from __future__ import annotations

import dataclasses
import math
from urllib.parse import parse_qsl

import pytest

from playground.app import game
from playground.app.game import Rooms, clean_name, room_key, score_bits
from playground.app.notes import render
from playground.app.play import play
from playground.app.session import Session
from playground.app.settings import UISettings, from_query, to_query
from playground.errors import PlaygroundError

TEACHER = "teacher-tab"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def finished(lm):
    session = Session(key=TEACHER)
    settings = UISettings(model="tiny-lm", prompt="Hello", mode="sample", temperature=1.2, seed=5, max_new_tokens=8,
                          top_candidates=6)
    *_, last = play(session, lambda name, dtype, owner: lm, settings, pace=False)
    run = last.run
    return run, session.run_settings(run)


def key_of(message: PlaygroundError) -> str:
    return message.args[0].key


def test_everyone_who_opens_the_game_link_finds_the_teachers_room(finished):
    run, settings = finished
    link = to_query(dataclasses.replace(settings, game=3, lang="zh", pace_ms=200))
    opened, notes = from_query(dict(parse_qsl(link.lstrip("?"))), UISettings())
    assert not notes and opened.game == 3
    assert room_key(opened) == room_key(settings) == room_key(dataclasses.replace(settings, lang="en"))
    assert room_key(dataclasses.replace(settings, seed=6)) != room_key(settings)  # another run, another room


def test_three_visitors_guess_and_the_reveal_scores_them(finished):
    run, settings = finished
    rooms = Rooms()
    room = rooms.open(run, settings, TEACHER, index=2, shared=True)
    assert room.index == 2 and room.steps[2].number == run.step_number(2) == 3
    step = run.path[2]
    options = [o.token_id for o in room.steps[2].options]
    assert set(options) == {c.token_id for c in step.candidates} and step.token_id in options
    ranked = [c.token_id for c in sorted(step.candidates, key=lambda c: -c.prob_raw)]
    assert any([o.token_id for o in room.steps[i].options] != [c.token_id for c in sorted(
        run.path[i].candidates, key=lambda c: -c.prob_raw)] for i in room.steps)  # never the model's ranking
    picks = {"ada": ranked[0], "bo": ranked[1], "cy": ranked[-1]}
    for player, token_id in picks.items():
        rooms.guess(room.key, player, token_id, name=player.upper())
    before = game.view(rooms.find(room.key), "ada")
    assert before["guessed"] == 3 and before["players"] == 3 and not before["revealed"]
    assert "chosen" not in before and "guesses" not in before and before["mine"] == ranked[0]
    assert [o["id"] for o in before["options"]] == options == [o["id"] for o in game.view(room, "bo")["options"]]
    page = game.html(before, "en")
    assert 'data-revealed="false"' in page and "pg-game-answer" not in page and "Your guess:" in page
    with pytest.raises(PlaygroundError) as refused:
        rooms.reveal(room.key, "ada")  # only the teacher reveals
    assert key_of(refused.value) == "game_not_teacher"
    rooms.reveal(room.key, TEACHER)
    after = game.view(rooms.find(room.key), "bo")
    assert after["chosen"]["id"] == step.token_id
    scored = {g["name"]: g for g in after["guesses"]}
    raw = {c.token_id: c.prob_raw for c in step.candidates}
    for player, token_id in picks.items():
        assert scored[player.upper()]["bits"] == pytest.approx(math.log2(raw[token_id]))
        assert scored[player.upper()]["right"] == (token_id == step.token_id)
    assert scored["BO"]["you"] and not scored["ADA"]["you"]
    assert [g["name"] for g in after["guesses"]] == ["ADA", "BO", "CY"]  # the most likely guess scores best
    page = game.html(after, "zh")
    assert "模型选了" in page and page.count("<tr") >= 3 + len(options) and "比特" in page
    with pytest.raises(PlaygroundError) as late:
        rooms.guess(room.key, "dee", ranked[0])
    assert key_of(late.value) == "game_revealed"
    # the next step: hidden again, fresh guesses; the board keeps the revealed step's scores
    rooms.next(room.key, TEACHER)
    moved = game.view(rooms.find(room.key), "ada")
    assert moved["number"] == 4 and not moved["revealed"] and moved["guessed"] == 0
    assert [r["name"] for r in game.board(rooms.find(room.key), "ada")] == ["ADA", "BO", "CY"]


def test_a_room_only_for_models_offered_to_everyone_and_finished_runs(finished, lm):
    run, settings = finished
    rooms = Rooms()
    for kwargs, key in (({"shared": False}, "game_private_model"),):
        with pytest.raises(PlaygroundError) as refused:
            rooms.open(run, settings, TEACHER, 0, **kwargs)
        assert key_of(refused.value) == key
    session = Session(key="t2")
    *_, last = play(session, lambda name, dtype, owner: lm, UISettings(prompt="Hi", max_new_tokens=3, top_candidates=0),
                    pace=False)
    with pytest.raises(PlaygroundError) as none:
        rooms.open(last.run, session.run_settings(last.run), "t2", 0, shared=True)
    assert key_of(none.value) == "game_no_candidates" and "Candidates per step" in render(none.value.args[0])
    assert len(rooms) == 0


def test_one_teacher_at_a_time_and_the_next_one_takes_over_when_the_first_left(finished):
    run, settings = finished
    here = {TEACHER}
    rooms = Rooms(present=lambda key: key in here)
    room = rooms.open(run, settings, TEACHER, 1, shared=True)
    rooms.guess(room.key, "ada", room.steps[1].options[0].token_id)
    with pytest.raises(PlaygroundError) as busy:
        rooms.open(run, settings, "other-tab", 1, shared=True)
    assert key_of(busy.value) == "game_has_teacher"
    here.clear()  # the teacher's tab closed: the same run's next teacher takes the room over, guesses and all
    again = rooms.open(run, settings, "other-tab", 5, shared=True)
    assert again is room and room.teacher == "other-tab" and room.guesses[1]


def test_rooms_are_bounded_in_number_players_names_and_time(finished):
    run, settings = finished
    clock = Clock()
    rooms = Rooms(clock=clock, max_rooms=2, max_players=2, idle_seconds=60)
    first = rooms.open(run, settings, TEACHER, 0, shared=True)
    rooms.open(run, dataclasses.replace(settings, seed=1), TEACHER, 0, shared=True)
    with pytest.raises(PlaygroundError) as full:
        rooms.open(run, dataclasses.replace(settings, seed=2), TEACHER, 0, shared=True)
    assert key_of(full.value) == "game_full"
    rooms.join(first.key, "a", "<img src=x onerror=alert(1)>" + "x" * 50)
    rooms.join(first.key, "b")
    with pytest.raises(PlaygroundError) as crowded:
        rooms.join(first.key, "c")
    assert key_of(crowded.value) == "game_room_full"
    assert len(first.names["a"]) == game.MAX_NAME and first.names["b"] == "#2"
    page = game.html(game.view(first, "a"), "en")
    rooms.reveal(first.key, TEACHER)
    assert "<img" not in game.html(game.view(first, "a"), "en") and "<img" not in page
    clock.now += 61  # idle rooms go
    assert rooms.find(first.key) is None and len(rooms) == 0
    with pytest.raises(PlaygroundError) as gone:
        rooms.guess(first.key, "a", 1)
    assert key_of(gone.value) == "game_gone"


def test_names_and_scores():
    assert clean_name("  Ada \n Lovelace\x00 ") == "Ada Lovelace" and clean_name(None) == ""
    assert score_bits(1.0) == 0.0 and score_bits(0.5) == -1.0 and score_bits(0.1) == pytest.approx(-3.3219, abs=1e-4)
    assert math.isfinite(score_bits(0.0))


def test_the_game_field_of_a_link(finished):
    run, settings = finished
    for bad in ("-1", "abc", "99999", "2.5"):
        parsed, notes = from_query({"game": bad}, UISettings())
        assert parsed.game == 0 and [n.key for n in notes] == ["link_ignored"]
    session = Session()
    session.opened_from({"prompt": "Hello", "game": "3"})
    assert not session.link_pending  # the players' pages never play the run they guess
    session.opened_from({"prompt": "Hello", "game": "0"})
    assert session.link_pending
    session = Session(key=TEACHER, runs=[run])
    assert session.run_settings(dataclasses.replace(run, settings=dataclasses.replace(run.settings, game=4))).game == 0
    assert "game=" not in session.link_query(dataclasses.replace(run.settings, game=4, prompt="other"))


def test_one_tab_keeps_its_newest_games_only(finished):
    run, settings = finished
    rooms = Rooms()
    opened = [rooms.open(run, dataclasses.replace(settings, seed=s), TEACHER, 0, shared=True).key
              for s in range(game.MAX_TEACHER_ROOMS + 2)]
    assert len(rooms) == game.MAX_TEACHER_ROOMS
    assert [rooms.find(k) is not None for k in opened] == [False, False] + [True] * game.MAX_TEACHER_ROOMS
