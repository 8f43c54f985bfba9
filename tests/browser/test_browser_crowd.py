"""Visitors who find the shared batch full are told their place in line, then run: real Chromium, the
real SmolLM2, an app started with one batch row (`--max-rows 1`), tabs at 1440×900 in English and
at 400×850 in 中文."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.browser import test_browser as base
from tests.browser.test_browser import DESKTOP, PHONE, new_page, shot, tokens, wait_state
from tests.browser.test_browser_paths import smollm2_copy

pytestmark = [pytest.mark.browser, pytest.mark.slow]
browser = base.browser

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def one_row_server(tmp_path_factory):
    """The real model behind an app whose batch holds a single sequence: a second visitor must wait."""
    weights = smollm2_copy(tmp_path_factory)
    with base.running_app(weights, tmp_path_factory.mktemp("log") / "one-row.log", "--max-rows", "1") as url:
        yield url


def link(server: str, **params) -> str:
    return server + "?" + urlencode({"model": MODEL, **params})


def test_visitors_who_find_the_batch_full_see_their_place_in_line_then_their_runs(browser, one_row_server):
    first = new_page(browser, DESKTOP)
    first.size_name = "desktop"
    second = new_page(browser, PHONE)
    second.size_name = "phone"
    third = new_page(browser, DESKTOP)
    third.size_name = "desktop"
    pages = (first, second, third)
    state = "document.querySelector('#gen-status')?.dataset.state"  # the status line's state, in the page
    try:
        # Slow motion holds the row at least 300 × 0.3 s = 90 s, however fast the machine: without it the story once
        # ended by itself on CI before the third visitor arrived, and the third found one run ahead, not two.
        first.goto(link(one_row_server, prompt="Tell me a long story about a lighthouse keeper.",
                        max_new_tokens=300, repetition_penalty=1.2, pace_ms=300))
        first.wait_for_function(f"() => {state} === 'running'", timeout=300_000)
        second.goto(link(one_row_server, prompt="What is the capital of France?", max_new_tokens=24, lang="zh"))
        second.wait_for_function(f"() => {state} === 'waiting'", timeout=120_000)
        status = second.inner_text("#gen-status")
        assert "排在第 1 位" in status and "最多" in status, status  # its place, and the longest wait in seconds
        shot(second, "crowd-waiting-zh")
        third.goto(link(one_row_server, prompt="Name a colour.", max_new_tokens=8))
        # The status read in the same poll that saw 'waiting', so a state that changes between two reads can't mislead
        status = third.wait_for_function(f"() => {state} === 'waiting' && document.querySelector('#gen-status').innerText",
                                         timeout=120_000).json_value()
        assert "number 2 in line" in status, status
        shot(third, "crowd-waiting")
        first.click("#stop-btn")  # the row frees: the second starts, the third moves up, then runs
        # (on a slow machine the story may have ended by itself before the Stop: the row frees either way)
        assert wait_state(first, "stopped", "done")
        third.wait_for_function("() => /number 1 in line/.test(document.querySelector('#gen-status')?.innerText)"
                                " || ['running', 'done'].includes(document.querySelector('#gen-status')?.dataset.state)",
                                timeout=300_000)
        for page in (second, third):
            page.wait_for_function(f"() => ['done', 'stopped'].includes({state})", timeout=300_000)
        assert "Paris" in "".join(tokens(second)), tokens(second)
        assert tokens(third)
        assert not any(page.js_errors for page in pages)
    finally:
        for page in pages:
            page.context.close()
