"""A link that names no language opens in the browser's (issue 29, item 9): a Chromium whose locale is
zh-CN (navigator.language and the Accept-Language header it sends; Playwright sets both from the context's
locale, overriding `--lang`) gets the page in 中文, an en-US one English; `?lang=en` still wins."""

from __future__ import annotations

import pytest

from tests.browser import test_browser as base
from tests.ui_fixtures import save_tiny_decoder

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
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
