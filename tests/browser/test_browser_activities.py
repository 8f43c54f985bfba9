"""The class activities in real Chromium at 1440×900 and 400×850, in English and 中文: "Is it a database?" samples
the page's question N times (its table's answers, counts and probabilities equal to the app core's own run of the
same seeds, opened from a link that names them), and "Which layer knows?" asks a step, takes a guess and reveals the
logit lens (the answer, the score and the board as the core computes them); two visitors at once keep their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.app.activities import lens_guess, samples
from playground.app.settings import UISettings
from playground.checkpoints.loader import load_model
from tests.browser import test_browser as base
from tests.browser.test_browser import REPO, assert_fits, new_page, open_app, open_tab, shot, wait_text

pytestmark = pytest.mark.browser
server, browser, page = base.server, base.browser, base.page
PROMPT = "The Python interpreter"
TAB = {"en": "Class tools", "zh": "课堂工具"}
HEAD = {"en": "20 answers from tiny-lm (each at most 1 tokens, temperature 1): {d} different.",
        "zh": "tiny-lm 的 20 个答案(每个最多 1 个 token,温度 1):{d} 种不同。"}


@pytest.fixture(scope="module")
def core_outcome():
    """What the app core draws for the link's seeds (3, 4, … 22) on the shipped tiny-lm: the numbers the page must
    show."""
    lm = load_model(Path(REPO) / "weights" / "tiny-lm")
    widgets = UISettings(model="tiny-lm", prompt=PROMPT, max_new_tokens=1)
    greedy, *drawn = samples.sample_many(lm, widgets, samples.seeds_from(3, 20), owner="page:test", key="test")
    return samples.tally(drawn, greedy, prompt=PROMPT, model="tiny-lm", max_new_tokens=1)


def open_tools(pg, lang: str) -> None:
    open_tab(pg, TAB[lang])
    pg.wait_for_selector("#samples-run-btn")


def ask_many(pg, n: int, prediction: int | None) -> None:
    pg.fill("#samples-n input", str(n))
    if prediction is not None:
        pg.fill("#samples-guess input", str(prediction))
    pg.click("#samples-run-btn")
    pg.wait_for_selector(f"#many-samples-view .pg-samples[data-n='{n}']")


def rows(pg) -> list[tuple[str, int, str]]:
    """(token ids, count, the probability as shown) of each row of the table."""
    return [tuple(r) for r in pg.eval_on_selector_all("#many-samples-view .pg-samples > .pg-samples-scroll tbody tr", """trs => trs.map(tr =>
        [tr.dataset.ids, +tr.dataset.count, tr.children[2].innerText])""")]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_same_question_sampled_twenty_times_shows_the_core_s_answers_and_probabilities(page, server, lang,
                                                                                             core_outcome):
    # a link names the prompt, a seed and one token per answer: the samples use seeds 3 … 22, so anyone who opens it
    # sees the same table
    open_app(page, server, model="tiny-lm", prompt=PROMPT, max_new_tokens=1, seed=3, lang=lang)
    open_tools(page, lang)
    ask_many(page, 20, 4)
    o = core_outcome
    expected = [(".".join(str(i) for i in a.token_ids), a.count, samples._pct(a.prob)) for a in o.answers]
    assert rows(page) == expected
    assert expected[:3] == [("370", 3, "5.2%"), ("291", 2, "9.1%"), ("456", 2, "7.4%")]
    view = page.inner_text("#many-samples-view")
    assert HEAD[lang].format(d=len(o.answers)) in view
    assert (f"You predicted 4 different answers; {len(o.answers)} came." if lang == "en"
            else f"你预测会有 4 种不同的答案;实际出现了 {len(o.answers)} 种。") in view
    greedy = page.locator("#many-samples-view .pg-samples-greedy")
    assert float(greedy.get_attribute("data-logprob")) == pytest.approx(o.greedy.logprob, abs=1e-5)
    assert greedy.get_attribute("data-count") == "0" and "␣will" in greedy.inner_text()
    page.click("#many-samples-view .pg-samples-seeds summary")
    assert ", ".join(str(s) for s in range(3, 23)) in page.inner_text("#many-samples-view .pg-samples-seeds code")
    # the other language redraws the same outcome in its words
    other = "zh" if lang == "en" else "en"
    page.click(f"#lang label:has-text('{'中文' if other == 'zh' else 'English'}')")
    wait_text(page, "#many-samples-view", HEAD[other].format(d=len(o.answers)))
    assert rows(page) == expected
    page.click(f"#lang label:has-text('{'中文' if lang == 'zh' else 'English'}')")
    wait_text(page, "#many-samples-view", HEAD[lang].format(d=len(o.answers)))
    assert_fits(page)
    shot(page, f"many-samples-{lang}", element="#many-samples")


def test_the_class_s_guesses_in_the_game_stand_beside_the_samples(page, server, browser):
    """The game played on the answer's first token, then the same question sampled: the class's guess beside how
    many samples began with it (English at 1440×900, 中文 on a phone)."""
    lang = "zh" if page.size_name == "phone" else "en"
    # a run of its own per size: the same run at the same address would be the first size's room, taken over with
    # its guesses (a teacher's reload keeps the class's guesses)
    seed = 3 if lang == "en" else 4
    open_app(page, server, model="tiny-lm", prompt=PROMPT, mode="sample", seed=seed, max_new_tokens=4, lang=lang)
    page.click("#token-stream [data-step='0']")  # the game plays the step on screen: the answer's first token
    open_tools(page, lang)
    page.click("#game-start-btn")
    page.wait_for_function("() => (document.querySelector('#game-link textarea')?.value ?? '').includes('?game=')")
    page.wait_for_selector("#game-view .pg-game[data-step='1']", timeout=10_000)
    player = new_page(browser, base.DESKTOP)
    try:
        player.goto(page.input_value("#game-link textarea"))
        player.wait_for_selector("#game-choice input[type=radio]")
        guessed = player.locator("#game-choice label").nth(1)
        guessed_text = guessed.inner_text().strip()
        guessed.click()
        player.click("#game-guess-btn")
        wait_text(player, "#game-view", "Your guess")
        assert not player.js_errors, player.js_errors
    finally:
        player.context.close()
    ask_many(page, 20, None)
    table = page.wait_for_selector("#many-samples-view .pg-samples-class[data-players='1']")
    row = table.query_selector("tbody tr")
    assert row.query_selector(".pg-samples-answer").inner_text().strip() == guessed_text
    first = row.get_attribute("data-id")
    began = sum(count for ids, count, _ in rows(page) if ids.split(".")[0] == first)
    assert int(row.get_attribute("data-began")) == began and f"{began} / 20" in row.inner_text()
    assert ("The class's predictions" if lang == "en" else "全班的预测") in table.inner_text()
    assert_fits(page)
    shot(page, f"many-samples-class-{lang}", element="#many-samples")


def test_a_count_past_the_bound_is_one_line_and_nothing_runs(page, server):
    lang = "zh" if page.size_name == "phone" else "en"
    open_app(page, server, model="tiny-lm", prompt=PROMPT, max_new_tokens=2, lang=lang)
    open_tools(page, lang)
    page.fill("#samples-n input", "51")
    page.click("#samples-run-btn")
    wait_text(page, "#many-samples-view", "N must be a whole number from 1 to 50." if lang == "en"
              else "N 必须是 1 到 50 之间的整数。")
    assert page.locator("#many-samples-view .pg-samples").count() == 0


def set_guess(pg, value: int) -> None:
    box = pg.locator("#lens-pick input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def lens_answer(pg) -> dict[str, str]:
    pg.wait_for_selector("#lens-guess-view .pg-lens-guess[data-revealed='true']")
    a = pg.locator("#lens-guess-view .pg-lens-answer")
    return {k: a.get_attribute(f"data-{k}") for k in ("answer", "guess", "score")}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_which_layer_knows_asks_a_step_scores_the_guess_and_keeps_a_board(page, server, lang):
    open_app(page, server, model="tiny-lm", prompt=PROMPT, max_new_tokens=8, lang=lang)
    open_tools(page, lang)
    page.fill("#lens-at input", "3")
    page.click("#lens-ask-btn")
    page.wait_for_selector("#lens-guess-view .pg-lens-guess[data-step='3'][data-revealed='false']")
    assert page.inner_text("#lens-guess-view .pg-lens-text") == "The Python interpreter will be↵"
    assert page.locator("#lens-pick input[type=range]").get_attribute("max") == "5"  # 4 blocks, then "never"
    set_guess(page, 1)
    page.click("#lens-reveal-btn")
    assert lens_answer(page) == {"answer": "3", "guess": "1", "score": "-2"}  # tests/app: steps 1–8 → 4 2 3 4 1 2 2 4
    ranks = page.eval_on_selector_all("#lens-guess-view .pg-lens-ranks li", "ls => ls.map(l => +l.dataset.rank)")
    assert len(ranks) == 5 and lens_guess.first_layer(ranks) == 3 and ranks[-1] == 1
    assert not page.locator("#lens-pick").is_visible()  # answered: the next step is asked from the top
    page.click("#lens-next-btn")
    page.wait_for_selector("#lens-guess-view .pg-lens-guess[data-step='4'][data-revealed='false']")
    set_guess(page, 4)
    page.click("#lens-reveal-btn")
    assert lens_answer(page) == {"answer": "4", "guess": "4", "score": "0"}
    board = page.locator("#lens-guess-view .pg-lens-board")
    assert (board.get_attribute("data-steps"), board.get_attribute("data-mean")) == ("2", "-1.0000")
    assert board.inner_text() == ("Your board: steps played 2 · mean score -1.00 · exactly right 1." if lang == "en"
                                  else "你的成绩:2 步,平均得分 -1.00,完全猜对 1 次。")
    assert_fits(page)
    shot(page, f"lens-guess-{lang}", element="#lens-guess")


def test_two_visitors_at_once_keep_their_own_samples_and_boards(browser, server):
    a, b = new_page(browser, base.DESKTOP), new_page(browser, base.PHONE)
    try:
        open_app(a, server, model="tiny-lm", prompt=PROMPT, max_new_tokens=8, seed=3, lang="en")
        open_app(b, server, model="tiny-lm", prompt="Python is", max_new_tokens=8, seed=40, lang="zh")
        open_tools(a, "en")
        open_tools(b, "zh")
        for pg, n in ((a, 12), (b, 9)):  # both pressed before either ends: each samples its own question
            pg.fill("#samples-n input", str(n))
            pg.click("#samples-run-btn")
        for pg, n, first in ((a, 12, 3), (b, 9, 40)):
            pg.wait_for_selector(f"#many-samples-view .pg-samples[data-n='{n}']")
            pg.click("#many-samples-view .pg-samples-seeds summary")
            seeds = pg.inner_text("#many-samples-view .pg-samples-seeds code")
            assert seeds == ", ".join(str(s) for s in range(first, first + n))
            assert sum(r[1] for r in rows(pg)) == n
        for pg, step in ((a, 2), (b, 5)):
            pg.fill("#lens-at input", str(step))
            pg.click("#lens-ask-btn")
            pg.wait_for_selector(f"#lens-guess-view .pg-lens-guess[data-step='{step}']")
        for pg, guess in ((a, 2), (b, 0)):
            set_guess(pg, guess)
            pg.click("#lens-reveal-btn")
        assert lens_answer(a) == {"answer": "2", "guess": "2", "score": "0"}
        assert lens_answer(b)["guess"] == "0"
        assert a.locator("#lens-guess-view .pg-lens-board").get_attribute("data-steps") == "1"
        assert b.locator("#lens-guess-view .pg-lens-board").get_attribute("data-steps") == "1"
        assert "你的成绩" in b.inner_text("#lens-guess-view") and "Your board" in a.inner_text("#lens-guess-view")
        assert not a.js_errors and not b.js_errors
    finally:
        a.context.close()
        b.context.close()
