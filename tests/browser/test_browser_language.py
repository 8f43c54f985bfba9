"""A link that names no language opens in the browser's (issue 29, item 9): a Chromium whose locale is
zh-CN (navigator.language and the Accept-Language header it sends; Playwright sets both from the context's
locale, overriding `--lang`) gets the page in 中文, an en-US one English; `?lang=en` still wins. And the example
prompt follows a language switch (issue 44, point 5), never a prompt the visitor typed."""

from __future__ import annotations

import json

import pytest

from playground.checkpoints.card import CARD_FILE
from tests.browser import test_browser as base
from tests.ui_fixtures import save_tiny_decoder

QUESTION, QUESTION_ZH = "What is the capital of France?", "法国的首都是哪里?"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    save_tiny_decoder(weights / "capital-lm")
    (weights / "capital-lm" / CARD_FILE).write_text(json.dumps({"example_prompt": QUESTION}))  # as SmolLM2's card
    with base.running_app(weights, tmp_path_factory.mktemp("log") / "server.log") as url:
        yield url


browser = base.browser


def _opened(browser, url: str, locale: str) -> tuple[str, str, str, str]:
    page = browser.new_context(viewport=base.PHONE, locale=locale).new_page()
    page.set_default_timeout(base.TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function("() => /Loaded|已加载/.test(document.querySelector('#model-status')?.innerText ?? '')")
    # the labels follow the language a moment after the model's line (wait for the state, not for seconds)
    page.wait_for_function("""() => {
      const zh = document.documentElement.lang === 'zh-CN', b = document.querySelector('#generate-btn');
      return b && b.innerText.trim() === (zh ? '生成' : 'Generate');
    }""")
    header = page.evaluate("() => navigator.language")
    out = (header, page.inner_text("#model-status"), page.evaluate("() => document.documentElement.lang"),
           page.inner_text("#generate-btn"))
    assert not errors, errors
    page.context.close()
    return out


def test_a_zh_cn_browser_opens_a_link_without_lang_in_chinese_and_lang_en_still_wins(browser, server):
    navigator, status, html_lang, button = _opened(browser, server, "zh-CN")
    assert navigator == "zh-CN"
    assert "已加载" in status and html_lang == "zh-CN" and button.strip() == "生成"
    _, status, html_lang, button = _opened(browser, server + "?lang=en", "zh-CN")
    assert "Loaded" in status and html_lang == "en" and button.strip() == "Generate"
    _, status, html_lang, button = _opened(browser, server, "en-US")
    assert "Loaded" in status and html_lang == "en" and button.strip() == "Generate"


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_the_example_prompt_follows_a_language_switch_but_a_typed_prompt_stays(browser, server, size):
    page = browser.new_context(viewport=base.SIZES[size], locale="en-US").new_page()
    page.set_default_timeout(base.TIMEOUT_MS)
    page.goto(server + "?lang=en&model=capital-lm")
    page.wait_for_function("() => /Loaded/.test(document.querySelector('#model-status')?.innerText ?? '')")
    assert page.input_value("#prompt textarea") == QUESTION
    page.click("#lang label:has-text('中文')")
    page.wait_for_function("(q) => document.querySelector('#prompt textarea').value === q", arg=QUESTION_ZH)
    page.wait_for_timeout(2000)
    page.size_name = size
    base.shot(page, "example-prompt-zh")
    page.click("#lang label:has-text('English')")
    page.wait_for_function("(q) => document.querySelector('#prompt textarea').value === q", arg=QUESTION)
    page.fill("#prompt textarea", "My own question")
    page.click("#lang label:has-text('中文')")
    page.wait_for_function("() => document.querySelector('#generate-btn').innerText.trim() === '生成'")
    page.wait_for_timeout(1000)  # the switch's model texts come after the labels
    assert page.input_value("#prompt textarea") == "My own question"
    page.context.close()
