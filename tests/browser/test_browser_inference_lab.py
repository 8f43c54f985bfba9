"""The inference lab's pages in real Chromium at 1440×900 and 400×850 (and in 中文): a KV-cache eviction branch
forked from the run on screen, with its bytes, divergence and sink mass, and the live KV panel of the branch;
each reopened from its link. The shipped tiny-lm keeps it fast. Screenshots also go to /tmp/labpage-shots/."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlparse

import pytest

from tests.browser import test_browser as base
from tests.browser.test_browser import (
    assert_fits,
    decoder_name,
    new_page,
    open_app,
    open_tab,
    settled_text,
    shot,
    tokens,
    wait_state,
    wait_text,
)
from tests.browser.test_browser_lab import branch_rows, fork_and_watch, link_of, set_slider

pytestmark = pytest.mark.browser
server, browser, page, desktop = base.server, base.browser, base.page, base.desktop
PROMPT = "The Python interpreter"


def keep_shot(page, name: str) -> None:
    """The test's screenshot (test-artifacts/; with PLAYGROUND_UPDATE_SCREENSHOTS=1 the README's too)."""
    shot(page, name, readme=True)


def open_kvlab(page, lang: str = "en") -> None:
    open_tab(page, "KV 缓存实验" if lang == "zh" else "KV-cache lab")
    page.wait_for_selector("#kvlab-sink-plot .js-plotly-plot")  # the lab draws the sink mass of the run on opening


def test_a_kv_eviction_branch_with_its_bytes_divergence_and_sinks_and_its_link(page, browser, server):
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=16, pace_ms=60)
    open_kvlab(page)
    wait_text(page, "#kvlab-md", "Run 1 keeps the plain cache")
    assert "2 · N_layers · B · h_kv · T · d_head · bytes" in page.inner_text("#kvlab-intro")
    set_slider(page, "kv-window", 6)
    set_slider(page, "kv-sink", 2)
    fork_and_watch(page, "#kvlab-fork-btn")
    rows = branch_rows(page)
    assert len(rows) == 2 and "window 6 + 2 sinks" in rows[1] and "window" not in rows[0]
    wait_text(page, "#kvlab-md", "Run 2 (window 6 + 2 sinks) holds")
    md = settled_text(page, "#kvlab-md")
    assert "saved" in md and "8 positions kept" in md and ("Against run 1" in md or "same as run 1" in md)
    for plot in ("#kvlab-bytes-plot", "#kvlab-divergence-plot", "#kvlab-sink-plot"):
        page.wait_for_selector(f"{plot} .js-plotly-plot", state="visible")
    assert_fits(page)
    keep_shot(page, "kvlab-window")
    branch = tokens(page)
    open_tab(page, "KV cache")  # the live KV panel reports what the branch's cache really holds
    wait_text(page, "#kv-stats", "This run's own cache (window 6 + 2 sinks): it keeps 8 of its")
    query = dict(parse_qsl(urlparse(link := link_of(page)).query))
    assert (query["kv_window"], query["kv_sink"], query["prompt"]) == ("6", "2", PROMPT)
    other = new_page(browser, page.viewport_size)
    other.size_name = page.size_name
    other.goto(link)  # nothing pressed: the plain run, then the policy run beside it
    other.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current .pg-edit")
    wait_state(other, "done")
    assert tokens(other) == branch and len(branch_rows(other)) == 2
    open_kvlab(other)
    assert other.input_value("#kv-window input[type=number]") == "6"  # the link's policy is on the page
    wait_text(other, "#kvlab-md", "Run 2 (window 6 + 2 sinks) holds")
    assert settled_text(other, "#kvlab-md") == md
    other.context.close()


def test_an_int8_cache_branch_in_chinese_and_its_link(desktop, browser, server):
    page = desktop
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=12, pace_ms=60, lang="zh")
    open_kvlab(page, "zh")
    wait_text(page, "#kvlab-md", "运行 1 使用普通缓存")
    page.locator("#kv-dtype label", has_text="int8").click()
    fork_and_watch(page, "#kvlab-fork-btn")
    assert "int8 缓存" in branch_rows(page)[1]
    wait_text(page, "#kvlab-md", "运行 2(int8 缓存)结束时占用")
    page.wait_for_selector("#kvlab-bytes-plot .js-plotly-plot", state="visible")
    assert "当 KV 缓存开始遗忘" in page.inner_text("#kvlab-intro")
    assert_fits(page)
    keep_shot(page, "kvlab-int8-zh")
    md = page.inner_text("#kvlab-md")
    link = link_of(page)
    assert dict(parse_qsl(urlparse(link).query))["kv_dtype"] == "int8"
    other = new_page(browser, page.viewport_size)
    other.size_name = "desktop"
    other.goto(link)
    other.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current .pg-edit")
    wait_state(other, "done")
    open_kvlab(other, "zh")
    wait_text(other, "#kvlab-md", "运行 2(int8 缓存)")
    assert settled_text(other, "#kvlab-md") == md
    other.context.close()


def open_precision(page, lang: str = "en") -> None:
    open_tab(page, "精度假设实验" if lang == "zh" else "Precision what-if")
    page.wait_for_selector("#weight-precision")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_precision_comparison_and_its_link(page, browser, server, lang):
    if lang == "zh" and page.size_name == "phone":
        pytest.skip("中文 is checked at 1440×900; the phone runs the English page")
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=14, pace_ms=60, lang=lang)
    open_precision(page, lang)
    page.locator("#weight-precision label", has_text="int4").click()
    fork_and_watch(page, "#precision-fork-btn")
    words = ("int4 权重", "运行 2(int4 权重,模拟", "对比运行 1(float32)") if lang == "zh" else (
        "int4 weights", "Run 2 (int4 weights, simulated", "against run 1 (float32)")
    assert words[0] in branch_rows(page)[1]
    wait_text(page, "#precision-md", words[1])
    md = page.inner_text("#precision-md")
    assert words[2] in md and "KL" in md
    for plot in ("#precision-steps-plot", "#precision-layers-plot"):
        page.wait_for_selector(f"{plot} .js-plotly-plot", state="visible")
    assert_fits(page)
    keep_shot(page, f"precision-int4-{lang}")
    branch = tokens(page)
    link = link_of(page)
    assert dict(parse_qsl(urlparse(link).query))["weight_precision"] == "int4"
    other = new_page(browser, page.viewport_size)
    other.size_name = page.size_name
    other.goto(link)
    other.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current .pg-edit")
    wait_state(other, "done")
    assert tokens(other) == branch and len(branch_rows(other)) == 2
    open_precision(other, lang)
    wait_text(other, "#precision-md", words[1])
    other.context.close()


def open_speculative(page, lang: str = "en") -> None:
    open_tab(page, "推测解码" if lang == "zh" else "Speculative decoding")
    page.wait_for_selector("#draft")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_speculative_run_with_its_coins_and_its_link(page, browser, server, lang):
    if lang == "zh" and page.size_name == "phone":
        pytest.skip("中文 is checked at 1440×900; the phone runs the English page")
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=20, pace_ms=40, mode="sample", seed=7,
             temperature=1.0, lang=lang)
    open_speculative(page, lang)
    page.locator("#draft input").fill("layer:1")
    page.locator("#draft input").press("Enter")
    fork_and_watch(page, "#spec-fork-btn")
    words = ("由模型自己的前 1 层起草", "运行 2 由模型自己的前 1 层起草", "硬币") if lang == "zh" else (
        "drafted by the model's own first 1 layers", "Run 2 is drafted by the model's own first 1 layers", "coin")
    assert words[0] in branch_rows(page)[1]
    wait_text(page, "#spec-md", words[1])
    page.wait_for_selector("#spec-checks-plot .js-plotly-plot", state="visible")
    marks = page.evaluate("() => Array.from(document.querySelectorAll('#token-stream .tok.gen')).map(e => e.dataset.spec || '')")
    assert "accepted" in marks or "rejected" in marks  # the live screen marks the drafted tokens
    rejected = page.evaluate("() => document.querySelector('#token-stream .tok.gen[data-spec=rejected]')?.dataset.step")
    if rejected is not None:  # a replaced draft: its check and the residual it was drawn from
        page.click(f"#token-stream .tok.gen[data-step='{rejected}']")
        wait_text(page, "#spec-md", words[2])
        page.wait_for_selector("#spec-residual-plot .js-plotly-plot", state="visible")
    assert_fits(page)
    keep_shot(page, f"speculative-{lang}")
    branch = tokens(page)
    link = link_of(page)
    assert dict(parse_qsl(urlparse(link).query))["draft"] == "layer:1"
    other = new_page(browser, page.viewport_size)
    other.size_name = page.size_name
    other.goto(link)
    other.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current .pg-edit")
    wait_state(other, "done")
    assert tokens(other) == branch and len(branch_rows(other)) == 2
    open_speculative(other, lang)
    wait_text(other, "#spec-md", words[1])
    other.context.close()
