"""Issue 44 item 5, seen in real Chromium at 1440×900 and 400×850, in English and 中文: projector mode makes the
candidates' percentages as large as the stream's type; the three-temperature runs are named by their temperature in
the run history."""

from __future__ import annotations

import pytest

from tests.browser import test_browser as base
from tests.browser.test_browser import SIZES, assert_fits, new_page, open_app, open_tab, shot, wait_state

pytestmark = pytest.mark.browser
server, browser = base.server, base.browser
PROMPT = "The Python interpreter"
TAB = {"en": "Class tools", "zh": "课堂工具"}
CASES = [(size, lang) for size in SIZES for lang in ("en", "zh")]
IDS = [f"{size}-{lang}" for size, lang in CASES]


@pytest.fixture(params=CASES, ids=IDS)
def sized(request, browser):
    size, lang = request.param
    pg = new_page(browser, SIZES[size])
    pg.size_name, pg.lang = f"{size}-{lang}", lang
    yield pg
    assert not pg.js_errors, f"the page raised: {pg.js_errors}"
    pg.context.close()


def font_px(pg, selector: str) -> float:
    return pg.eval_on_selector(selector, "e => parseFloat(getComputedStyle(e).fontSize)")


def test_projector_mode_makes_the_candidates_percentages_big(sized, server):
    pg = sized
    open_app(pg, server, model="tiny-lm", prompt=PROMPT, max_new_tokens=8, top_candidates=5, lang=pg.lang,
             projector=1)
    pg.wait_for_selector(".pg-cands .pg-bar em")
    stream = font_px(pg, "#token-stream")
    number = font_px(pg, ".pg-cands .pg-bar em")
    assert number >= 20 and number >= 0.85 * stream, (number, stream)  # read from the back of the room, as the stream
    assert "%" in pg.inner_text(".pg-cands .pg-bar em")
    pg.locator(".pg-cands").scroll_into_view_if_needed()
    assert_fits(pg)
    shot(pg, "projector-candidates", element=".pg-cands")


def test_the_three_temperature_runs_are_named_by_their_temperature_in_the_history(sized, server):
    pg = sized
    open_app(pg, server, model="tiny-lm", prompt=PROMPT, max_new_tokens=8, seed=5, lang=pg.lang)
    open_tab(pg, TAB[pg.lang])
    pg.click("#sbs-run-btn")
    pg.wait_for_selector("#temperature-compare-view .pg-sbs-col >> nth=2", timeout=base.TIMEOUT_MS)
    wait_state(pg, "done")
    suffix = " (side by side)" if pg.lang == "en" else "(温度并排对比)"
    pg.wait_for_function("(s) => [...document.querySelectorAll('#run-history .pg-run')]"
                         ".filter(b => b.innerText.includes(s)).length === 3", arg=suffix)
    labels = pg.eval_on_selector_all("#run-history .pg-run", "els => els.map(e => e.innerText)")
    assert [label.split(" · ")[1] for label in labels[:3]] == [f"T = {t}{suffix}" for t in ("1.5", "0.8", "0.3")]
    assert suffix not in labels[3]  # the link's own run stays plain
    pg.locator("#run-history").scroll_into_view_if_needed()
    assert_fits(pg)
    shot(pg, "history-temperatures", element="#run-history")
