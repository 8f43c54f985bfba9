"""The teacher's tools in real Chromium at 1440×900 and 400×850, in English and 中文: the prompt's tokens as it is
typed (a Chinese prompt spelled in UTF-8 bytes, on the shipped byte-level model and on the real SmolLM2), three
temperatures side by side, an exported run that reopens by its link in a fresh browser, the class game played by
three visitors in three browsers and scored at the reveal, and `app.py --default-model`."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from urllib.parse import parse_qsl, urlparse

import pytest

from tests.browser import test_browser as base
from tests.browser import test_browser_paths as paths
from tests.browser.test_browser import (
    DESKTOP,
    PHONE,
    REPO,
    assert_fits,
    new_page,
    open_app,
    open_tab,
    shot,
    tokens,
    wait_state,
    wait_text,
)

pytestmark = pytest.mark.browser
server, browser, page, desktop = base.server, base.browser, base.page, base.desktop
smollm2_server = paths.smollm2_server
QUESTION = "中国的首都是哪里?"
PROMPT = "The Python interpreter"
TAB = {"en": "Class tools", "zh": "课堂工具"}


def open_tools(pg, lang: str) -> None:
    open_tab(pg, TAB[lang])
    pg.wait_for_selector("#game-view .pg-game")


def ids(pg) -> list[int]:
    """The generated tokens' ids, as the live screen's titles say them."""
    titles = pg.eval_on_selector_all("#token-stream .tok.gen", "els => els.map(e => e.title)")
    return [int(re.search(r"id (\d+)", title).group(1)) for title in titles]


def in_sight(pg, name: str) -> None:
    """A screenshot of what the window shows now (not the whole page): what a visitor sees without scrolling."""
    base.ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(base.ARTIFACTS / f"{name}-{pg.size_name}.png"))


def tokens_view(pg) -> str:
    return pg.inner_text("#prompt-tokens")


# --- the prompt's tokens ----------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_prompt_s_tokens_follow_the_typing_and_spell_chinese_in_bytes(page, server, lang):
    open_app(page, server, model="tiny-lm", lang=lang)
    page.fill("#prompt textarea", QUESTION)
    page.wait_for_selector("#prompt-tokens .pg-ptoks[data-count='25']")
    words = tokens_view(page)
    assert ("<0xE5> <0x9B> <0xBD> = 国, 3 UTF-8 bytes" if lang == "en" else "<0xE5> <0x9B> <0xBD> = 国,3 个 UTF-8 字节") in words
    assert page.locator("#prompt-tokens .pg-ptok.byte").count() == 24  # the question mark is ASCII, a text token
    assert page.get_attribute("#prompt-tokens .pg-ptok[data-i='3']", "title").startswith(
        "id 162 · " if lang == "en" else "编号 162 · ")
    page.click("#prompt textarea")
    page.keyboard.press("End")
    page.keyboard.type("北京", delay=40)  # typed key by key: the view waits for the pause, then follows
    page.wait_for_selector("#prompt-tokens .pg-ptoks[data-count='31']")
    assert "= 京" not in tokens_view(page)  # two characters in words at once, the rest and why one click away
    page.click("#prompt-tokens summary")
    assert "= 京" in tokens_view(page) and ("UTF-8 bytes (a Chinese character takes 3)" in tokens_view(page)
                                            or "一个汉字占 3 个字节" in tokens_view(page))
    if page.size_name == "desktop":
        page.click("#prompt-tokens summary")
        assert base.in_view(page, "#generate-btn")  # the view never pushes the buttons off the first screen
    assert_fits(page)
    shot(page, f"prompt-tokens-{lang}", element="#sidebar-top")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_typed_tokens_come_first_with_a_legend_and_the_template_folded(page, server, lang):
    open_app(page, server, model="tiny-chat", lang=lang)
    assert page.is_checked("#chat input")  # a model with a chat template: the view shows what the template adds
    page.fill("#prompt textarea", "hi there")
    page.wait_for_function("() => [...document.querySelectorAll('#prompt-tokens .pg-ptok b')].map(e => e.textContent)"
                           ".join('').includes('hi␣there')")  # the typed prompt's view (on main too)
    first = page.eval_on_selector_all("#prompt-tokens .pg-ptok", "els => els.filter(e => e.checkVisibility())"
                                                                  ".map(e => e.querySelector('b').textContent)")
    assert "".join(first) == "hi␣there"  # the visitor's own tokens first, and only they in sight
    head = page.inner_text("#prompt-tokens .pg-ptok-head")
    assert head.startswith("What the model reads: " if lang == "en" else "模型读到的:")
    assert ("Yours first (8):" if lang == "en" else "先是你输入的(8 个):") in head
    assert ("␣ = a space · ↵ = a new line" if lang == "en" else "␣ = 空格 · ↵ = 换行") in head
    fold = page.locator("#prompt-tokens details.pg-ptok-template")
    assert fold.get_attribute("open") is None
    assert fold.locator("summary").inner_text().startswith("The chat template adds " if lang == "en" else "对话模板在它们前后加了 ")
    top = page.eval_on_selector("#prompt-tokens .pg-ptok-typed .pg-ptok", "e => e.getBoundingClientRect().top")
    assert 0 <= top < page.viewport_size["height"]  # beside the prompt box, in view
    fold.locator("summary").click()  # opened: the template's pale tokens in the model's order, a gap for the typed
    assert page.locator("#prompt-tokens .pg-ptok-template .pg-ptok.template").first.is_visible()
    assert ("your 8 tokens" if lang == "en" else "你的 8 个 token") in fold.inner_text()
    if page.size_name == "desktop":
        fold.locator("summary").click()
        assert base.in_view(page, "#generate-btn")  # the view never pushes the buttons off the first screen
    assert_fits(page)
    shot(page, f"prompt-tokens-typed-first-{lang}", element="#sidebar-top")


@pytest.mark.slow
def test_smollm2_reads_a_chinese_question_in_byte_tokens_split_across_tokens(page, smollm2_server):
    lang = "zh" if page.size_name == "phone" else "en"
    page.goto(smollm2_server + f"?model=SmolLM2-135M-Instruct&lang={lang}")
    page.wait_for_function("() => /Loaded|已加载/.test(document.querySelector('#model-status')?.innerText ?? '')",
                           timeout=300_000)
    assert page.is_checked("#chat input")  # the instruct model's default: the view shows the chat template too
    page.fill("#prompt textarea", QUESTION)
    page.wait_for_selector("#prompt-tokens .pg-ptok.byte")  # the question's view (the example prompt's has none)
    words = tokens_view(page)
    expected = ("<0xE5> <0x9B> <0xBD> = 国, 3 UTF-8 bytes in 2 tokens" if lang == "en"
                else "<0xE5> <0x9B> <0xBD> = 国,3 个 UTF-8 字节,分在 2 个 token 里")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # the chat template's tokens, folded after the typed ones: opened, and opened again if the view was drawn anew
    # meanwhile (once in a CI rehearsal a redraw after the click folded it again)
    for _ in range(3):
        page.click("#prompt-tokens details.pg-ptok-template summary")
        try:
            page.wait_for_function("() => document.querySelector('#prompt-tokens details.pg-ptok-template')?.open"
                                   " && document.querySelector('#prompt-tokens').innerText.includes('<|im_start|>')",
                                   timeout=5_000)
            break
        except PlaywrightTimeout:
            continue
    words = tokens_view(page)
    assert expected in words and "<0xE5><0x9B>" in words and "<|im_start|>" in words
    assert page.locator("#prompt-tokens .pg-ptok.template").count() > 0  # the template's own tokens, pale
    page.uncheck("#chat input")  # what the model reads without the template
    page.wait_for_function("() => !document.querySelector('#prompt-tokens .pg-ptok.special')")
    assert page.get_attribute("#prompt-tokens .pg-ptoks", "data-count") == "16"
    assert_fits(page)
    shot(page, f"prompt-tokens-smollm2-{lang}", element="#sidebar-top")


# --- temperature side by side ----------------------------------------------------------------------------


def test_three_temperatures_side_by_side(page, server):
    lang = "zh" if page.size_name == "phone" else "en"
    open_app(page, server, model="tiny-lm", prompt=PROMPT, max_new_tokens=16, seed=5, lang=lang)
    open_tools(page, lang)
    page.click("#sbs-run-btn")
    page.wait_for_selector("#temperature-compare-view .pg-sbs-col >> nth=2", timeout=base.TIMEOUT_MS)
    wait_state(page, "done")
    columns = page.locator("#temperature-compare-view .pg-sbs-col")
    assert [columns.nth(i).get_attribute("data-temperature") for i in range(3)] == ["0.3", "0.8", "1.5"]
    entropy = [float(columns.nth(i).get_attribute("data-entropy")) for i in range(3)]
    assert entropy[0] < entropy[2]  # a hotter sampler draws from flatter distributions
    head = page.inner_text("#temperature-compare-view .pg-sbs-head")
    assert ("Seed 5 for all three runs" if lang == "en" else "三次运行共用种子 5") in head
    assert page.locator("#temperature-compare-view .pg-sbs-col .tok").count() > 3 * 8  # shaded tokens in each
    boxes = [columns.nth(i).bounding_box() for i in range(3)]
    if page.size_name == "phone":  # stacked, one above the other
        assert boxes[0]["x"] == boxes[1]["x"] and boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"]
    else:  # side by side
        assert boxes[0]["y"] == boxes[1]["y"] == boxes[2]["y"] and boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
    assert len(tokens(page)) >= 1  # the last run streamed in the live screen and stays there
    assert_fits(page)
    shot(page, f"temperature-side-by-side-{lang}", element="#temperature-compare")


# --- export a run -----------------------------------------------------------------------------------------


def test_an_exported_run_reopens_by_its_link_in_a_fresh_browser(page, server, browser):
    lang = "zh" if page.size_name == "desktop" else "en"
    open_app(page, server, model="tiny-lm", prompt=PROMPT, mode="sample", temperature=1.1, seed=11,
             max_new_tokens=12, lang=lang)
    shown = ids(page)
    open_tools(page, lang)
    with page.expect_download() as download:
        page.click("#export-json-btn")
    assert download.value.suggested_filename.startswith("tiny-lm-run-")
    record = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert [s["id"] for s in record["steps"]] == shown and [s["step"] for s in record["steps"]] == list(range(1, 13))
    assert all(s["candidates"] and set(s["candidates"][0]["probs"]) == set(record["stages"]) for s in record["steps"])
    link = record["link"]
    assert urlparse(link).netloc == urlparse(server).netloc and dict(parse_qsl(urlparse(link).query))["seed"] == "11"
    wait_text(page, "#export-md", link)
    with page.expect_download() as download:
        page.click("#export-csv-btn")
    table = Path(download.value.path()).read_text(encoding="utf-8")
    assert download.value.suggested_filename.endswith(".csv") and f"# link: {link}" in table
    shot(page, f"export-run-{lang}", element="#export-run")
    fresh = new_page(browser, PHONE if page.size_name == "phone" else DESKTOP)  # a browser of its own
    try:
        fresh.goto(link)
        wait_state(fresh, "done")
        assert ids(fresh) == shown and tokens(fresh) == tokens(page)
        assert not fresh.js_errors
    finally:
        fresh.context.close()


# --- the class game ---------------------------------------------------------------------------------------


PLAYERS = (("Ada", DESKTOP, "zh"), ("Bo", PHONE, "en"), ("Cy", PHONE, "zh"))


def test_three_visitors_play_the_game_and_the_reveal_scores_them(desktop, server, browser):
    teacher = desktop
    open_app(teacher, server, model="tiny-lm", prompt=PROMPT, mode="sample", seed=3, max_new_tokens=12)
    chosen = tokens(teacher)[3]
    teacher.click("#token-stream [data-step='3']")  # the step on screen is the step played
    wait_text(teacher, ".pg-stepbar", "Step 4 of 12")
    open_tools(teacher, "en")
    teacher.click("#game-start-btn")
    teacher.wait_for_function("() => (document.querySelector('#game-link textarea')?.value ?? '').includes('?game=')")
    link = teacher.input_value("#game-link textarea")
    # the link names the room only: no seed, prompt or settings that would replay the run and show the hidden token
    assert list(dict(parse_qsl(urlparse(link).query))) == ["game"] and "seed=" not in link and "prompt=" not in link
    assert teacher.is_visible("#game-reveal-btn") and not teacher.is_visible("#game-player")
    players = []
    try:
        for i, (name, size, lang) in enumerate(PLAYERS):
            player = new_page(browser, size)
            player.size_name = "phone" if size is PHONE else "desktop"
            players.append(player)
            player.goto(link + ("&lang=zh" if lang == "zh" else ""))
            player.wait_for_selector("#game-choice input[type=radio]")
            assert player.locator("#token-stream [data-step]").count() == 0  # the run is not played on their screens
            assert player.is_visible("#game-player") and not player.is_visible("#game-start-btn")
            blank = player.inner_text("#game-view .pg-game-blank").strip()
            assert blank == "?"  # the chosen token is hidden
            player.fill("#game-name input, #game-name textarea", name)
            pick = player.locator("#game-choice input[type=radio]").nth(i)
            for _ in range(3):  # a click the link's scroll to the game moved away from (a loaded CI machine): again
                player.locator("#game-choice label").nth(i).click()
                if pick.is_checked():
                    break
            assert pick.is_checked(), "the pick never took"
            player.click("#game-guess-btn")
            wait_text(player, "#game-view", "你的猜测" if lang == "zh" else "Your guess")
        wait_text(teacher, "#game-view", "3 of 3 guessed")
        in_sight(players[1], "game-guessing")  # a phone opening the link lands on the game
        teacher.click("#game-reveal-btn")
        for player, (_, _, lang) in zip(players, PLAYERS):
            wait_text(player, "#game-view", "每个猜测的得分" if lang == "zh" else "Every guess, scored")
            rows = player.eval_on_selector_all(
                "#game-view .pg-game-guesses tbody tr", "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText))")
            assert sorted(r[0] for r in rows) == ["Ada", "Bo", "Cy"]
            bits = [float(r[3]) for r in rows]
            assert bits == sorted(bits, reverse=True) and all(b <= 0 for b in bits)
            for _, _, prob, score in rows:  # the score is log2 of the model's probability of the guess
                if not prob.startswith("<"):
                    assert abs(float(score) - math.log2(float(prob.rstrip("%")) / 100)) < 0.1
            answer = player.inner_text("#game-view .pg-game-blank").strip()
            assert answer == chosen.replace(" ", "␣").strip() or answer.replace("␣", " ") == chosen
            assert player.locator("#game-view tr.you").count() == 1
            assert not player.is_enabled("#game-choice input[type=radio] >> nth=0")  # no guess after the reveal
            assert_fits(player)
        for player, (_, _, lang) in zip(players[:2], PLAYERS):
            shot(player, f"game-reveal-{lang}", element="#game")
        shot(teacher, "game-teacher", element="#game")
        teacher.click("#game-next-btn")  # the room moves on: every page follows
        for player, (_, _, lang) in zip(players, PLAYERS):
            wait_text(player, "#game-view .pg-game-head", "第 5 步" if lang == "zh" else "Step 5")
            assert player.inner_text("#game-view .pg-game-blank").strip() == "?"
            assert player.is_enabled("#game-choice input[type=radio] >> nth=0")
            assert not player.js_errors, player.js_errors
        late = players[0]  # a link to a room that is not (or no longer) on the server: one line, in the page's language
        late.goto(server + "?game=NoSuchRoom12345&lang=zh")
        wait_text(late, "#game-view", "服务器上没有这个游戏")
        assert late.locator("#game-choice input[type=radio]").count() == 0
    finally:
        for player in players:
            player.context.close()


# --- app.py --default-model ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_weights(tmp_path_factory) -> Path:
    weights = tmp_path_factory.mktemp("weights")
    for name in base.DEFAULTS:
        shutil.copytree(REPO / "weights" / name, weights / name)
    return weights


@pytest.mark.parametrize(("size", "lang"), [(DESKTOP, "en"), (PHONE, "zh")], ids=["desktop-en", "phone-zh"])
def test_every_new_page_opens_on_the_default_model(browser, default_weights, tmp_path, size, lang):
    with base.running_app(default_weights, tmp_path / "app.log", "--default-model", "tiny-seq2seq") as url:
        pg = new_page(browser, size)
        pg.size_name = "phone" if size is PHONE else "desktop"
        try:
            pg.goto(url + f"?lang={lang}")
            wait_text(pg, "#model-status", "tiny-seq2seq")
            assert "tiny-seq2seq" in pg.input_value("#model-select input")
            assert "March 5, 2021" in pg.input_value("#prompt textarea")  # its example prompt came with it
            shot(pg, f"default-model-{lang}")
            assert not pg.js_errors
        finally:
            pg.context.close()
    log = tmp_path / "missing.log"
    with base.running_app(default_weights, log, "--default-model", "no-such-model") as url:
        pg = new_page(browser, size)
        try:
            pg.goto(url)
            wait_text(pg, "#model-status", "tiny-lm")
        finally:
            pg.context.close()
    said = [line for line in log.read_text().splitlines() if "--default-model" in line]
    assert len(said) == 1 and "no-such-model is not a model offered here" in said[0] and "pages open on tiny-lm" in said[0]
