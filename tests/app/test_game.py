"""“Guess the next token” for a class: a room per run a teacher opens, named by an opaque id (its link holds nothing
of the run); three visitors guess, the teacher reveals, every guess is scored in bits; rooms and players bounded per
address and for the server, abandoned rooms reclaimed first, names and time bounded; no upload ever makes a room."""

from __future__ import annotations

import dataclasses
import math
from urllib.parse import parse_qsl

import pytest

from playground.app.activities import game
from playground.app.activities.game import Rooms, clean_name, link_query, score_bits
from playground.app.notes import note, render
from playground.app.play import play
from playground.app.session import Session
from playground.app.settings import UISettings, from_query
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


def test_the_game_link_names_an_opaque_room_and_nothing_of_the_run(finished):
    run, settings = finished
    rooms = Rooms()
    room = rooms.open(run, settings, TEACHER, 2, shared=True)
    link = link_query(room)
    query = dict(parse_qsl(link.lstrip("?")))
    assert query == {"game": room.key} and len(room.key) >= 16  # no seed, prompt, model or settings: nothing to replay
    for secret in ("seed", "prompt", "Hello", "temperature", "tiny-lm"):
        assert secret not in link
    opened, notes = from_query(query, UISettings())
    assert not notes and opened.game == room.key and rooms.find(opened.game) is room  # the link opens the room
    assert room.prompt == "Hello" and room.texts == list(run.stream_texts)  # shown from what the room keeps
    # the same run again: the teacher's own room back; another teacher's room of the same run has another id
    assert rooms.open(run, settings, TEACHER, 2, shared=True) is room
    other = rooms.open(run, settings, "other-tab", 2, shared=True, address="10.0.0.9")
    assert other.key != room.key and len(rooms) == 2


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


def test_one_teacher_at_a_time_and_the_next_tab_of_the_address_takes_over_when_the_first_left(finished):
    run, settings = finished
    here = {TEACHER}
    rooms = Rooms(present=lambda key: key in here)
    room = rooms.open(run, settings, TEACHER, 1, shared=True, address="school")
    rooms.guess(room.key, "ada", room.steps[1].options[0].token_id)
    busy = rooms.open(run, settings, "other-tab", 1, shared=True, address="school")
    assert busy is not room and room.teacher == TEACHER  # a live teacher keeps the controls: the other gets its own
    with pytest.raises(PlaygroundError) as refused:
        rooms.reveal(room.key, "other-tab")
    assert key_of(refused.value) == "game_not_teacher"
    here.clear()  # the teacher's tab closed (a reload): the next tab of its address takes the room over
    assert rooms.open(run, settings, "third-tab", 5, shared=True, address="elsewhere") not in (room, busy)
    again = rooms.open(run, settings, "new-tab", 5, shared=True, address="school")
    assert again in (room, busy) and again.teacher == "new-tab"


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
    for bad in ("short", "a b c d e f g h", "x" * 65, "<script>alert(1)</script>"):
        parsed, notes = from_query({"game": bad}, UISettings())
        assert parsed.game == "" and [n.key for n in notes] == ["link_ignored"]
    session = Session()
    session.opened_from({"prompt": "Hello", "game": game.new_room_id()})
    assert not session.link_pending  # the players' pages never play a run (and a game link holds none)
    session.opened_from({"prompt": "Hello"})
    assert session.link_pending
    session = Session(key=TEACHER, runs=[run])
    room_id = game.new_room_id()
    kept = dataclasses.replace(run, settings=dataclasses.replace(run.settings, game=room_id))
    assert session.run_settings(kept).game == ""
    assert "game=" not in session.link_query(dataclasses.replace(run.settings, game=room_id, prompt="other"))


def test_one_tab_keeps_its_newest_games_only(finished):
    run, settings = finished
    rooms = Rooms()
    opened = [rooms.open(run, dataclasses.replace(settings, seed=s), TEACHER, 0, shared=True).key
              for s in range(game.MAX_TEACHER_ROOMS + 2)]
    assert len(rooms) == game.MAX_TEACHER_ROOMS
    assert [rooms.find(k) is not None for k in opened] == [False, False] + [True] * game.MAX_TEACHER_ROOMS


# --- issue 42 item 6: rooms and players per address, rooms that clean themselves --------------------------------


def test_one_addresss_51_tabs_cannot_stop_another_addresss_teacher(finished):
    """Row 5: one client's 51 tabs (four rooms each: 204 asks, more than the server's 200 rooms) open games; a
    teacher at another address still opens one, and the client holds at most its address's share."""
    run, settings = finished
    rooms = Rooms()
    refused = []
    for tab in range(51):
        for seed in range(game.MAX_TEACHER_ROOMS):
            try:
                rooms.open(run, dataclasses.replace(settings, seed=seed), f"tab-{tab}", 0, shared=True,
                           address="203.0.113.7")
            except PlaygroundError as exc:
                refused.append(key_of(exc))
    assert len(rooms) == game.MAX_ADDRESS_ROOMS and set(refused) == {"game_address_full"}
    assert "close the tabs" in render(note("game_address_full", n=game.MAX_ADDRESS_ROOMS))
    room = rooms.open(run, settings, "the-teacher", 0, shared=True, address="198.51.100.20")
    assert rooms.find(room.key) is room and room.teacher == "the-teacher"


def test_205_sessions_of_one_address_cannot_lock_a_student_out_and_a_class_behind_one_address_plays(finished):
    """Row 6: one client joins in 205 fresh sessions; a student at another address joins and guesses, and 30
    students behind one school address all join and guess."""
    run, settings = finished
    clock = Clock()
    rooms = Rooms(clock=clock)
    room = rooms.open(run, settings, TEACHER, 1, shared=True, address="school-gateway")
    refused = 0
    for i in range(205):
        try:
            rooms.join(room.key, f"bot-{i}", address="203.0.113.7")
        except PlaygroundError as exc:
            assert key_of(exc) == "game_address_players"
            refused += 1
    assert refused == 205 - game.MAX_ADDRESS_PLAYERS
    pick = room.steps[1].options[0].token_id
    rooms.guess(room.key, "student", pick, "Ada", address="198.51.100.20")
    for i in range(30):
        rooms.guess(room.key, f"pupil-{i}", pick, f"P{i}", address="school-gateway")
    seen = game.view(room, "student", clock.now)
    assert seen["guessed"] == 31 and seen["players"] == game.MAX_ADDRESS_PLAYERS + 31 and seen["mine"] == pick


def test_a_full_room_makes_way_for_a_newcomer_by_dropping_the_player_gone_longest(finished):
    run, settings = finished
    clock = Clock()
    rooms = Rooms(clock=clock, max_players=3)
    room = rooms.open(run, settings, TEACHER, 1, shared=True)
    pick = room.steps[1].options[0].token_id
    for who in ("a", "b", "c"):
        rooms.guess(room.key, who, pick, address=who)
        clock.now += 1
    with pytest.raises(PlaygroundError) as full:
        rooms.join(room.key, "d", address="d")
    assert key_of(full.value) == "game_room_full"
    clock.now += game.PRESENT_SECONDS
    rooms.find(room.key, "b"), rooms.find(room.key, "c")  # b and c tick; a's page is gone
    rooms.join(room.key, "d", address="d")
    assert set(room.names) == {"b", "c", "d"} and "a" not in room.guesses[1]


def test_a_room_whose_teacher_left_and_nobody_ticks_is_reclaimed_before_a_refusal(finished):
    run, settings = finished
    clock = Clock()
    here = {"t0", "t1", "t2"}
    rooms = Rooms(present=lambda key: key in here, clock=clock, max_rooms=3)
    opened = [rooms.open(run, dataclasses.replace(settings, seed=i), f"t{i}", 0, shared=True, address=f"a{i}")
              for i in range(3)]
    with pytest.raises(PlaygroundError) as full:
        rooms.open(run, settings, "late", 0, shared=True, address="b")
    assert key_of(full.value) == "game_full"
    here.discard("t1")  # t1's tab closed ...
    clock.now += game.ABANDONED_SECONDS - 1
    rooms.find(opened[0].key, "t0"), rooms.find(opened[2].key, "t2")
    with pytest.raises(PlaygroundError):  # ... but its room was touched within the last minutes: still refused
        rooms.open(run, settings, "late", 0, shared=True, address="b")
    clock.now += 2  # nobody touched t1's room for ABANDONED_SECONDS: it goes first, the others stay
    rooms.find(opened[0].key, "t0"), rooms.find(opened[2].key, "t2")
    late = rooms.open(run, settings, "late", 0, shared=True, address="b")
    assert rooms.find(opened[1].key) is None and rooms.find(late.key) is late
    assert rooms.find(opened[0].key) is opened[0] and rooms.find(opened[2].key) is opened[2]


def _guessed_room(finished, players: tuple[str, ...]) -> tuple[Rooms, game.Room, Clock]:
    """A room at step 1 where each of `players` guessed the first option, on a clock of the test's own."""
    run, settings = finished
    clock = Clock()
    rooms = Rooms(clock=clock)
    room = rooms.open(run, settings, TEACHER, 1, shared=True)
    pick = room.steps[1].options[0].token_id
    for who in players:
        rooms.guess(room.key, who, pick, who)
    return rooms, room, clock


def test_guessed_counts_the_players_still_in_the_room(finished):
    rooms, room, clock = _guessed_room(finished, ("ada", "bo", "cy"))
    rooms.join(room.key, "dee", "dee")
    assert game.html(game.view(room, TEACHER, clock.now), "en").count("3 of 4 guessed") == 1
    clock.now += game.PRESENT_SECONDS / 2
    rooms.find(room.key, "ada"), rooms.find(room.key, "dee")  # their pages tick; bo's and cy's tabs closed
    clock.now += game.PRESENT_SECONDS / 2 + 1
    assert "1 of 2 guessed" in game.html(game.view(room, TEACHER, clock.now), "en")


def test_a_player_whose_tab_closed_leaves_at_once_and_their_guess_stays_for_the_reveal(finished):
    rooms, room, clock = _guessed_room(finished, ("ada", "bo"))
    version = room.version
    rooms.leave("bo")  # bo's tab closed a moment later: not PRESENT_SECONDS later
    assert room.version > version and "1 of 1 guessed" in game.html(game.view(room, TEACHER, clock.now), "en")
    rooms.leave("nobody")  # a tab that never played changes no room
    assert room.version == version + 1
    rooms.reveal(room.key, TEACHER)
    assert sorted(g["name"] for g in game.view(room, TEACHER, clock.now)["guesses"]) == ["ada", "bo"]


def test_the_chat_template_s_opening_is_folded_and_the_teacher_s_page_hides_the_run_from_the_blank(finished):
    run, settings = finished
    rooms = Rooms()
    room = rooms.open(run, settings, TEACHER, 2, shared=True)
    assert game.fold(room) == ("", "Hello")  # no chat template: nothing to fold
    room.settings = dataclasses.replace(room.settings, chat=True)
    room.prompt = "<s>system: Be brief & kind.</s><s>user: Hello</s><s>assistant: "
    assert game.fold(room) == ("<s>system: Be brief & kind.</s><s>user: ", "Hello</s><s>assistant: ")
    rooms.join(room.key, "ada", "Ada")
    for lang in ("en", "zh"):
        player = game.html(rooms.view(room, "ada"), lang)
        folded = player.index('<details class="pg-game-template">')
        assert player.index("Be brief &amp; kind.") > folded and "<details open" not in player  # folded, escaped
        assert player.index("Hello&lt;/s&gt;") < player.index('class="pg-game-blank"')  # the typed text stays out
        assert "<style" not in player and 'href="?lang=' + lang + '"' in player  # a player: the full playground's link
        teacher = game.html(rooms.view(room, TEACHER), lang)
        # the teacher's own page: the live screen hides the played step's token and everything after it
        assert '#token-stream > [data-step="2"] ~ *' in teacher and "#run-history" in teacher
        assert 'href="?lang=' not in teacher
    rooms.reveal(room.key, TEACHER)
    assert "<style" not in game.html(rooms.view(room, TEACHER))  # after the reveal the whole run shows again
    gone = game.html(None, "zh", "gone", alone=True)
    assert 'href="?lang=zh"' in gone and "打开完整的演练场" in gone


def test_the_room_plays_which_layer_knows_and_scores_every_guess_by_the_layers_it_is_off(finished, lm):
    """The teacher turns the step played into "Which layer knows?": the token is shown, the room guesses a layer,
    the reveal shows the lens's ranks and scores each guess as `lens_guess` does; the room keeps a board of it."""
    from playground.app.activities import lens_guess

    run, settings = finished
    rooms = Rooms()
    room = rooms.open(run, settings, TEACHER, 2, shared=True)
    layers = lm.config.n_layers
    ranks = lens_guess.lens_ranks(lm, run, 2)
    answer = lens_guess.first_layer(ranks)
    token = room.steps[2].options[0].token_id
    with pytest.raises(PlaygroundError) as early:
        rooms.guess_layer(room.key, "ada", 1)  # the step asks for a token until the teacher asks for a layer
    assert key_of(early.value) == "game_pick_one"
    with pytest.raises(PlaygroundError) as refused:
        rooms.ask_layer(room.key, "ada", ranks)
    assert key_of(refused.value) == "game_not_teacher"
    rooms.ask_layer(room.key, TEACHER, ranks)
    with pytest.raises(PlaygroundError) as wrong_kind:
        rooms.guess(room.key, "ada", token)
    assert key_of(wrong_kind.value) == "game_pick_one"
    with pytest.raises(PlaygroundError) as out_of_range:
        rooms.guess_layer(room.key, "ada", layers + 2)
    assert key_of(out_of_range.value) == "acts_lens_pick"
    right = layers + 1 if answer is None else answer
    picks = {"ada": right, "bo": 0, "cy": layers + 1}
    for player, layer in picks.items():
        rooms.guess_layer(room.key, player, layer, name=player.upper())
    before = game.view(rooms.find(room.key), "bo")
    chosen = room.option(2, room.steps[2].chosen).text
    assert before["question"] == "layer" and before["token"] == chosen and before["guessed"] == 3
    assert before["mine"] == 0 and "answer" not in before and "ranks" not in before and "guesses" not in before
    assert [o["id"] for o in before["options"]] == list(range(layers + 2))
    page = game.html(before, "en")
    assert f'data-layers="{layers}"' in page and "Your guess: the embedding (layer 0)." in page
    assert 'class="pg-game-blank shown"' in page and "pg-lens-ranks" not in page  # the token shows, not the answer
    rooms.reveal(room.key, TEACHER)
    after = game.view(rooms.find(room.key), "bo")
    assert after["answer"] == answer and after["ranks"] == ranks
    scored = {g["name"]: g["score"] for g in after["guesses"]}
    assert scored == {p.upper(): lens_guess.score(layer, answer, layers) for p, layer in picks.items()}
    assert scored["ADA"] == 0 and after["guesses"][0]["name"] == "ADA"
    board = {r["name"]: r for r in after["board"]}
    assert board["ADA"]["right"] == 1 and board["BO"]["mean"] == scored["BO"] and board["BO"]["you"]
    for lang, said in (("en", "The logit lens first ranks"), ("zh", "logit lens 第一次把")):
        page = game.html(after, lang)
        assert said in page and page.count('class="pg-lens-ranks"') == 1 and page.count("<li") >= layers + 1
    # the next step asks for a token again; the layer board stays
    rooms.next(room.key, TEACHER)
    moved = game.view(rooms.find(room.key), "ada")
    assert moved["question"] == "token" and not moved["revealed"] and "token" not in moved
    kept = game.layer_board(rooms.find(room.key), "ada")
    assert [(r["name"], r["mean"]) for r in kept] == sorted(((n, float(x)) for n, x in scored.items()),
                                                            key=lambda r: (-r[1], r[0]))


def test_a_room_taken_over_after_a_layer_question_plays_the_token_game_hidden_again(finished, lm):
    """A teacher asked "Which layer knows?" and closed the tab; the next tab of the address starts a game on the same
    run and step: it gets the room, and it plays the token game, the run hidden from the blank (it showed the token
    and the whole run, as a layer question does)."""
    from playground.app.activities import lens_guess

    run, settings = finished
    here = {TEACHER}
    rooms = Rooms(present=lambda key: key in here)
    room = rooms.open(run, settings, TEACHER, 2, shared=True, address="school")
    rooms.ask_layer(room.key, TEACHER, lens_guess.lens_ranks(lm, run, 2))
    here.clear()
    again = rooms.open(run, settings, "new-tab", 2, shared=True, address="school")
    v = game.view(again, "new-tab")
    assert again is room and v["question"] == "token" and not v["revealed"] and v["number"] == 3
    assert 'data-step="2"' in game.hiding_css(v)
