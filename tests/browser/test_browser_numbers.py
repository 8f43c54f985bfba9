"""Issue 36 point 5, seen on the page in real Chromium: a figure's SVG download is named after what it shows and
keeps its byte-token labels; the seed box shows only when sampling."""

from __future__ import annotations

import html

import pytest

from tests.browser import test_browser as base
from tests.browser.test_browser import decoder_name, open_app, open_tab, wait_text

pytestmark = pytest.mark.browser
server, browser, page, desktop = base.server, base.browser, base.page, base.desktop


def test_the_candidates_svg_is_named_for_its_step_and_keeps_byte_token_labels(desktop, server):
    page = desktop
    # tiny-lm's 4th token after this prompt has a byte-token candidate, " <0xE2><0x80>" (two bytes of a character)
    open_app(page, server, model=decoder_name(), prompt="中国的首都是", chat="false", max_new_tokens=8,
             top_candidates=10)
    page.click("#token-stream [data-step='3']")
    # the live candidates say what such a token is (hovered: its row's title)
    wait_text(page, ".pg-stepbar", "Step 4")
    spelled = page.locator(".pg-ctable tr", has_text="<0xE2><0x80>").first
    assert "UTF-8 bytes" in spelled.get_attribute("title")
    open_tab(page, "Candidates & beams")
    wait_text(page, "#funnel-plot", "Step 4")
    plot = page.locator("#funnel-plot .js-plotly-plot")
    ticks = plot.locator(".ytick text").evaluate_all("(els) => els.map((e) => e.textContent)")
    assert any("<0xE2><0x80>" in t for t in ticks), ticks
    plot.hover()
    with page.expect_download() as download:
        plot.locator(".pg-svg-btn").click()
    saved = download.value
    assert saved.suggested_filename.startswith("transformer-playground-step-4-") and saved.suggested_filename.endswith(
        ".svg"), saved.suggested_filename
    text = html.unescape(open(saved.path(), encoding="utf-8").read())
    assert all(t in text for t in ticks), [t for t in ticks if t not in text]


def test_the_seed_box_shows_only_when_sampling(page, server):
    open_app(page, server, model=decoder_name())
    seed = page.locator("#seed")
    for mode, shown in (("Greedy", False), ("Beam search", False), ("Sampling", True), ("Greedy", False)):
        page.locator("#mode").get_by_text(mode, exact=True).click()
        page.wait_for_function("([shown]) => !!document.querySelector('#seed')?.offsetParent === shown", arg=[shown])
    assert seed.count() <= 1


def test_plotly_s_toolbar_speaks_chinese_on_a_chinese_page(desktop, server):
    page = desktop
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=4)
    open_tab(page, "Candidates & beams")
    wait_text(page, "#funnel-plot", "Step 4")
    plot = page.locator("#funnel-plot .js-plotly-plot")
    plot.hover()
    titles = lambda: plot.locator(".modebar-btn[data-title]").evaluate_all(  # noqa: E731
        "(bs) => bs.map((b) => b.getAttribute('data-title'))")
    assert "Download plot as a PNG" in titles()
    page.get_by_text("中文", exact=True).click()
    wait_text(page, "#generate-btn", "生成")
    page.wait_for_function("() => [...document.querySelectorAll('#funnel-plot .modebar-btn[data-title]')]"
                           ".every((b) => !/[A-Za-z]{3}/.test(b.getAttribute('data-title').replace(/SVG|PNG/g, '')))")
    # Plotly redraws its toolbar when the figure updates and our SVG button joins it a moment later: wait for both
    # buttons in one toolbar rather than reading twice (two reads once saw two different toolbars)
    page.wait_for_function("() => { const t = [...document.querySelectorAll('#funnel-plot .modebar-btn[data-title]')]"
                           ".map((b) => b.getAttribute('data-title'));"
                           " return t.includes('下载为 PNG 图片') && t.includes('下载为 SVG'); }", timeout=10_000)
    page.get_by_text("English", exact=True).click()
    page.wait_for_function("() => [...document.querySelectorAll('#funnel-plot .modebar-btn')]"
                           ".some((b) => b.getAttribute('data-title') === 'Download plot as a PNG')")


def test_the_streams_prompt_label_follows_the_language_switch(page, server):
    """The label before the prompt's tokens stayed "prompt" after a switch to 中文, until the next run."""
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=4)
    assert page.inner_text("#token-stream .pg-part").strip().lower() == "prompt"
    page.get_by_text("中文", exact=True).click()
    page.wait_for_function("() => document.querySelector('#token-stream .pg-part')?.innerText.trim() === '提示词'")
    page.get_by_text("English", exact=True).click()
    page.wait_for_function("() => document.querySelector('#token-stream .pg-part')?.innerText.trim().toLowerCase()"
                           " === 'prompt'")


def test_on_a_phone_generate_brings_the_token_stream_into_view(browser, server):
    """On a phone the settings sit above the live screen: after Generate the tokens streamed below the fold."""
    phone = base.new_page(browser, base.PHONE)
    try:
        open_app(phone, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=24)
        phone.evaluate("() => window.scrollTo(0, 0)")
        base.generate_and_wait(phone)
        top = phone.evaluate("() => document.querySelector('#token-stream').getBoundingClientRect().top")
        assert 0 <= top < phone.viewport_size["height"] * 0.6, top
        assert not phone.js_errors, phone.js_errors
    finally:
        phone.context.close()
