"""The cache-reuse lab in real Chromium at 1440×900 and 400×850, in English and 中文: CacheBlend measured on the run on
screen (its caption and four figures, the r slider redrawing which tokens are recomputed), prefix reuse of a second
prompt, that prompt forked as a branch beside the run, then that branch forked to decode from its blended prompt
cache, whose copied link replays it in a new tab. Screenshots go to test-artifacts/."""

from __future__ import annotations

import pytest

from tests.browser import test_browser as base
from tests.browser.test_browser import (
    assert_fits,
    decoder_name,
    new_page,
    open_app,
    open_tab,
    shot,
    tokens,
    wait_state,
    wait_text,
)
from tests.browser.test_browser_lab import branch_rows, fork_and_watch, link_of, set_slider

pytestmark = pytest.mark.browser
server, browser, page = base.server, base.browser, base.page
PROMPT = "A first part about cats. A second one, on dogs and birds. Which is it?"
WORDS = {
    "en": {"tab": "Cache reuse", "ready": "Choose how to cut", "chunks": "every 16 tokens", "done": "Naive reuse loses",
           "r50": "r = 50 %", "prefix": "positions", "same": "the same", "blended": "decoded from a blended prompt cache",
           "badge": "CacheBlend: every 16 tokens, r = 50 %"},
    "zh": {"tab": "缓存复用", "ready": "选择如何切成片段", "chunks": "每 16 个 token", "done": "直接复用的损失",
           "r50": "r = 50%", "prefix": "个位置中的", "same": "完全相同", "blended": "从混合后的提示词缓存解码",
           "badge": "CacheBlend:每 16 个 token,重算 r = 50%"},
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_cacheblend_prefix_reuse_and_a_fork(page, browser, server, lang):
    w = WORDS[lang]
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=16, pace_ms=60, lang=lang)
    open_tab(page, w["tab"])
    wait_text(page, "#reuse-md", w["ready"])
    assert "R_{n−m}" in page.inner_text("#reuse-intro")
    page.locator("#reuse-chunks label", has_text=w["chunks"]).click()
    page.click("#reuse-blend-btn")
    wait_text(page, "#reuse-md", w["done"])
    for plot in ("#reuse-quality-plot", "#reuse-positions-plot", "#reuse-layers-plot", "#reuse-rotation-plot"):
        page.wait_for_selector(f"{plot} .js-plotly-plot", state="visible")
    set_slider(page, "reuse-r", 50)
    wait_text(page, "#reuse-md", w["r50"])
    assert_fits(page)
    shot(page, f"reuse-blend-{lang}")
    page.fill("#reuse-ending textarea", "Which is louder?")
    page.click("#reuse-prefix-btn")
    wait_text(page, "#reuse-prefix-md", w["prefix"])
    assert w["same"] in page.inner_text("#reuse-prefix-md")
    fork_and_watch(page, "#reuse-fork-btn")
    assert len(branch_rows(page)) == 2
    open_tab(page, w["tab"])
    wait_text(page, "#reuse-md", w["ready"])  # the branch on screen: its own prompt, not measured yet
    assert_fits(page)
    shot(page, f"reuse-fork-{lang}")
    # The branch again, decoding from its prompt's CacheBlend cache (every 16 tokens, r = 50 %): a third run.
    fork_and_watch(page, "#reuse-blend-fork-btn")
    assert len(branch_rows(page)) == 3 and w["badge"] in branch_rows(page)[-1]
    open_tab(page, w["tab"])
    wait_text(page, "#reuse-md", w["blended"])
    assert_fits(page)
    shot(page, f"reuse-blend-fork-{lang}")
    blended = tokens(page)
    link = link_of(page)
    assert "cache_blend=tokens%3A16%4050" in link
    other = new_page(browser, page.viewport_size)
    other.goto(link)  # nothing pressed: the plain run, then the blended one beside it
    other.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current .pg-edit")
    wait_state(other, "done")
    assert tokens(other) == blended and len(branch_rows(other)) == 2
    other.context.close()
