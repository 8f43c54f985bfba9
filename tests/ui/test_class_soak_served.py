"""The class soak's own game round against a served app (issue 42's 60-minute tool run reads the game's outputs by
place: a slot added to the game once shifted them, and every round of an hour's soak failed unseen)."""

from __future__ import annotations

import random
import time

import httpx
import pytest

from playground.tools import loadtest_class
from playground.tools.loadtest_page import Page, Visitor
from tests.ui_fixtures import save_tiny_decoder, served_app


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with served_app(weights, tmp_path_factory.mktemp("uploads"), concurrency=1) as served:
        yield served


def test_a_teachers_round_opens_a_room_a_student_joins_by_its_link_and_guesses(app):
    demo, url = app
    parser = loadtest_class.arguments()
    loadtest_class.add_arguments(parser)
    parser.set_defaults(**loadtest_class.DEFAULTS)
    args = parser.parse_args(["--model", "tiny-lm", "--other-model", "tiny-lm", "--clients", "2",
                              "--think-seconds", "0"])
    day = loadtest_class.ClassDay(args)
    student = day.visitors(Page.read(url))[0]
    teacher = Visitor(day.page, args.clients, "tiny-lm", "tiny-lm", args.max_new_tokens, address=loadtest_class.SCHOOL)
    with httpx.Client(headers=teacher.headers()) as client:
        teacher.open(client)
        assert teacher.generate(client, mode="greedy")  # the run the game is made of
        started = teacher.predict(client, day.events.start, [0, url, "en"])
        room = loadtest_class.room_of(started)
        assert room, loadtest_class.view_of(started)[:300]  # the link on the page names the room
        assert 'data-step="' in loadtest_class.view_of(started)
        day.board.move(room)
        with httpx.Client(headers=student.headers()) as own:
            student.open(own)
            student.play_game(own, random.Random(0))  # joins by `?game=<room>`, reads the options, guesses
        assert student.errors == []
        revealed = teacher.predict(client, day.events.reveal, [None, "en"])
        assert 'data-revealed="true"' in loadtest_class.view_of(revealed)
        assert 'data-players="1"' in loadtest_class.view_of(revealed)  # the student's guess reached the room
        day.game_round(teacher, client, time.perf_counter(), random.Random(1))  # a whole round: start, reveal, next
    assert day.errors == [] and teacher.errors == []
