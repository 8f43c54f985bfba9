"""In real Chromium at 1440×900 and 400×850, in English and 中文: the page fits itself to the model and the run on
screen — the layer and head sliders read the model's range before any run."""

from __future__ import annotations

import pytest

from tests.browser import test_browser as base
from tests.browser.test_browser import decoder_name, open_app, open_tab

pytestmark = pytest.mark.browser
server, browser, page = base.server, base.browser, base.page
LANGS = ("en", "zh")


def slider_top(pg, selector: str) -> int:
    pg.wait_for_selector(f"{selector} input[type=range]", state="attached")
    return int(float(pg.get_attribute(f"{selector} input[type=range]", "max")))


@pytest.mark.parametrize("lang", LANGS)
def test_the_layer_and_head_sliders_read_the_models_range_before_any_run(page, server, lang):
    from playground import load_model
    from playground.app.words import t

    config = load_model(base.REPO / "weights" / decoder_name(), device="cpu", dtype="float32").config
    open_app(page, server, model=decoder_name(), lang=lang)
    assert page.locator("#token-stream [data-step]").count() == 0  # no run yet
    open_tab(page, t("tab_attention", lang))
    page.wait_for_function("(n) => document.querySelector('#att-layer input[type=range]')?.max === String(n)",
                           arg=config.n_layers - 1)
    assert slider_top(page, "#att-head") == config.n_heads - 1
    open_tab(page, t("tab_lab", lang))
    assert slider_top(page, "#lab-layer") == config.n_layers - 1
    assert slider_top(page, "#lab-head") == config.n_heads - 1
    assert config.n_layers - 1 > 1 and config.n_heads - 1 > 1  # a range the old 0–1 did not have


def shown_count(pg, selector: str) -> int:
    return pg.eval_on_selector_all(selector, "els => els.filter(e => e.getClientRects().length > 0).length")


@pytest.mark.parametrize("lang", LANGS)
def test_one_switch_hides_the_chat_templates_opening_in_the_stream_and_side_by_side(page, server, lang):
    from playground.app.words import t

    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=4, lang=lang)
    assert not page.locator("#hide-system").is_visible()  # no chat template: no switch
    open_app(page, server, model="tiny-chat", prompt="hi there", max_new_tokens=4, lang=lang)
    switch = page.locator("#hide-system")
    assert switch.is_visible() and not switch.is_checked()
    base.wait_text(page, ".pg-sys-switch", t("hide_system", lang))
    opening = shown_count(page, "#token-stream .tok.sys")
    typed = page.eval_on_selector_all("#token-stream .tok.prompt:not(.sys)", "els => els.map(e => e.textContent)")
    assert opening > 0 and "".join(typed).replace("␣", " ").startswith("hi there")
    switch.check()
    page.wait_for_function("() => document.querySelector('#token-stream .tok.sys').getClientRects().length === 0")
    assert shown_count(page, "#token-stream .tok.prompt:not(.sys)") == len(typed)  # the typed text stays
    assert shown_count(page, "#token-stream .tok.gen") == 4
    base.shot(page, f"hide-system-{lang}", element="#token-output")
    page.click("#teacher-tab-button")  # Class tools: temperature side by side, with the same switch on
    page.click("#sbs-run-btn")
    page.wait_for_function("() => document.querySelectorAll('#temperature-compare-view .pg-sbs-col').length === 3",
                           timeout=180_000)
    assert page.locator("#temperature-compare-view .pg-sys").count() == 3
    assert shown_count(page, "#temperature-compare-view .pg-sys") == 0
    switch.uncheck()  # off: the opening is back in both
    assert shown_count(page, "#temperature-compare-view .pg-sys") == 3
    assert shown_count(page, "#token-stream .tok.sys") == opening


@pytest.mark.parametrize("lang", LANGS)
def test_a_long_run_of_a_base_model_keeps_its_answer_in_view(page, server, lang):
    """A base model goes on after its answer (Gemma 3 under a question-and-answer prompt writes more questions):
    the stream grows below the answer's first line instead of scrolling it out of its box (before, the box followed
    the newest token and the answer left it at the top)."""
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=96, lang=lang)
    box = page.evaluate("""() => { const s = document.querySelector('#token-stream');
        const f = s.querySelector('.tok.gen[data-step="0"]').getBoundingClientRect(), r = s.getBoundingClientRect();
        return {overflow: s.scrollHeight - s.clientHeight, first: [f.top, f.bottom], box: [r.top, r.bottom]}; }""")
    assert box["overflow"] > 40, box  # the run is longer than its box
    assert box["box"][0] - 1 <= box["first"][0] and box["first"][1] <= box["box"][1] + 1, box  # the answer's start
    if page.size_name == "desktop":
        assert base.in_view(page, "#token-stream")
    base.shot(page, f"long-answer-{lang}", element="#token-output")
