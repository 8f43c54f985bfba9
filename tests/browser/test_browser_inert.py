"""Every echo of a visitor's text is inert (issue 31, row 8), in real Chromium.

A shared link carries Markdown and HTML in a parameter's name, in a value and in `model`: the notes
and the status line show each as the text it is, and no element (image, link, emphasis, code,
heading) comes from it, nor any request to the address it names.
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.browser import test_browser as base
from tests.ui_fixtures import save_tiny_decoder

pytestmark = pytest.mark.browser
browser = base.browser

PIXEL = "![p](https://evil.example/p.png)"
PHISH = "[Sign in to Hugging Face](https://evil.example/login)"
HOSTILE = {
    PIXEL: "1",  # a parameter's name
    "temperature": "[Sign in](https://evil.example/x)",  # a value (shown cut to 40 characters)
    "top_p": "<https://evil.example/auto>",
    "seed": "<img src=https://evil.example/i.png>",
    "model": PHISH,
    "dtype": "www.evil.example _em_ **b** `c`",
    "lang": "a@evil.example",
    "target_lang": "$$x$$ ~~gone~~",
}
CREATED = ("img, a, code, em, del, s, h1, h2, h3, h4, h5, h6, table, blockquote, pre, .katex, form, input, "
           "strong:not(:first-child)")

WATCH_JS = """
window.__created = [];
new MutationObserver(records => {
  for (const r of records) for (const n of r.addedNodes) {
    if (!(n instanceof Element)) continue;
    for (const e of [n, ...n.querySelectorAll('*')]) {
      const root = e.closest('#notes, #model-status, #model-about');
      if (root && e.matches('%s') && !e.closest('.pending, .eta-bar'))
        window.__created.push(root.id + ': ' + e.outerHTML.slice(0, 80));
    }
  }
}).observe(document, {childList: true, subtree: true});
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with base.running_app(weights, tmp_path_factory.mktemp("log") / "server.log") as url:
        yield url


def test_markdown_and_html_in_a_link_create_no_element(browser, server):
    page = base.new_page(browser, base.DESKTOP)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "evil.example" in r.url.split("?")[0] else None)
    page.add_init_script(WATCH_JS % CREATED)  # every element ever added in the text boxes, not only the last
    page.goto(server + "?" + urlencode(HOSTILE))
    base.wait_text(page, "#model-status", "Loaded")
    base.wait_text(page, "#notes", "the link's model")
    page.wait_for_timeout(1000)  # a late render of the notes would be seen too, and they stay
    notes = page.inner_text("#notes")
    created = page.evaluate("() => window.__created")
    anywhere = page.evaluate("""() => document.querySelectorAll('img[src*="evil"], a[href*="evil"], '
        + 'a[href^="mailto:"], a[href*="www."]').length""")
    print(f"\nelements created by the link's text: {len(created) + anywhere}, requests to its addresses: {len(asked)}")
    assert created == [] and anywhere == 0, (len(created), anywhere, created)
    assert not asked, asked
    for shown in (PIXEL, PHISH, "[Sign in](https://evil.example/x)", "<https://evil.example/auto>",
                  "www.evil.example _em_ **b** `c`", "$$x$$ ~~gone~~"):
        assert shown in notes, (shown, notes)  # each is shown as the text it is
    page.context.close()
