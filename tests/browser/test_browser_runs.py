"""Runs you can pick, experiments that never leak, in real Chromium at 1440×900 and 400×850, English and 中文: each
experiment's fork names itself in the badge above the tokens and Generate after it is a plain run; picking an
earlier run from the history moves the live screen, the lab, the link and the open lesson to it (and the head sweep
runs on it); a language switch says everything again, a model switch leaves nothing of the old run on screen.
Screenshots of the history and the badge go to test-artifacts/ (runs-*)."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlparse

import pytest

from tests.browser import test_browser as base
from tests.browser.test_browser import (
    _open_lesson,
    assert_fits,
    decoder_name,
    generate_and_wait,
    open_app,
    open_tab,
    shot,
    tokens,
    wait_state,
    wait_text,
)
from tests.browser.test_browser_lab import fork_and_watch, link_of, open_lab, set_slider

pytestmark = pytest.mark.browser
server, browser, page, desktop = base.server, base.browser, base.page, base.desktop
PROMPT = "The Python interpreter"
EXPERIMENT_FIELDS = ("edits", "kv_window", "kv_sink", "kv_heavy", "kv_dtype", "rope_scaling", "weight_precision",
                     "draft", "draft_tokens")
WORDS = {  # each tab's name, and what the badge says of the setting its fork sets
    "en": {"lab": ("Causal lab", "ablate head 1.0"), "kv": ("KV-cache lab", "window 6"),
           "precision": ("Precision what-if", "int8 weights"), "speculative": ("Speculative decoding",
                                                                                "drafted by prompt lookup")},
    "zh": {"lab": ("因果实验室", "消融第 1 层第 0 个头"), "kv": ("KV 缓存实验", "窗口 6"),
           "precision": ("精度假设实验", "int8 权重"), "speculative": ("推测解码", "由提示查找起草")},
}


def badge(page) -> str:
    """The badge's words ('' while it is hidden: a plain run)."""
    box = page.locator("#active-settings")
    return box.inner_text().strip() if box.is_visible() else ""


def history(page) -> list[str]:
    """The history's entries, newest first."""
    return page.evaluate("() => Array.from(document.querySelectorAll('#run-history [data-run]')).map(e => e.innerText)")


def current(page) -> str:
    return page.evaluate("() => document.querySelector('#run-history [data-run].current')?.dataset.run ?? ''")


def wait_current(page, number: int) -> None:
    page.wait_for_function("(n) => document.querySelector('#run-history [data-run].current')?.dataset.run === n",
                           arg=str(number))


def pick(page, number: int) -> None:
    """Click run `number` in the history and wait until it is the run on screen."""
    page.click(f"#run-history [data-run='{number}']")
    wait_current(page, number)
    wait_state(page, "done", "stopped")


def shot_runs(page, name: str, readme: bool = False) -> None:
    """The badge, the live screen and the history, from the badge's top to the history's bottom (test-artifacts/;
    with PLAYGROUND_UPDATE_SCREENSHOTS=1 the README's too)."""
    box = page.evaluate("""() => {
      const top = document.querySelector('#active-settings').getBoundingClientRect().top + window.scrollY;
      const end = document.querySelector('#run-history').getBoundingClientRect().bottom + window.scrollY;
      const left = document.querySelector('#workspace').getBoundingClientRect();
      return {x: left.left, y: top - 6, width: left.width, height: end - top + 12}; }""")
    targets = [base.ARTIFACTS / f"{name}-{page.size_name}.png"]
    if readme and os.environ.get("PLAYGROUND_UPDATE_SCREENSHOTS") == "1":
        targets.append(base.README_SHOTS / f"{name}-{page.size_name}.png")
    base.ARTIFACTS.mkdir(exist_ok=True)
    for target in targets:
        page.screenshot(path=str(target), clip=box, full_page=True)


def link_params(page) -> dict[str, str]:
    return dict(parse_qsl(urlparse(link_of(page)).query))


def fork_with(page, experiment: str, lang: str) -> None:
    """Set the experiment's widget and press its fork button."""
    if experiment == "lab":
        open_lab(page, lang)  # drawn: its sliders' ranges are the model's
    else:
        open_tab(page, WORDS[lang][experiment][0])
    if experiment == "lab":
        set_slider(page, "lab-layer", 1)
        fork_and_watch(page, "#lab-ablate-head")
    elif experiment == "kv":
        set_slider(page, "kv-window", 6)
        fork_and_watch(page, "#kvlab-fork-btn")
    elif experiment == "precision":
        page.locator("#weight-precision label", has_text="int8").click()
        fork_and_watch(page, "#precision-fork-btn")
    else:
        box = page.locator("#draft input")
        box.click()
        page.get_by_role("option", name="ngram").first.click()
        page.wait_for_function("() => document.querySelector('#draft input')?.value === 'ngram'")
        fork_and_watch(page, "#spec-fork-btn")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_fork_names_its_setting_and_generate_after_it_is_a_plain_run(page, server, lang):
    """The round's first leak: after a fork in any lab, Generate kept its setting (a drafted, int4, windowed plain
    run) and nothing on screen said so."""
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=12, pace_ms=40, lang=lang)
    assert badge(page) == "" and current(page) == "1"
    plain_tokens = tokens(page)
    number = 1
    for experiment in ("lab", "kv", "precision", "speculative"):
        fork_with(page, experiment, lang)
        number += 1
        wait_current(page, number)
        words = WORDS[lang][experiment][1]
        page.wait_for_function("(w) => (document.querySelector('#active-settings')?.innerText ?? '').includes(w)",
                               arg=words)
        assert history(page)[0].startswith(("run " if lang == "en" else "第 ") + str(number)) and words in history(page)[0]
        if experiment in ("kv", "precision"):  # the screen shots of a fork's badge and history
            assert_fits(page)
            shot(page, f"runs-{experiment}-{lang}")
            shot_runs(page, f"runs-badge-{experiment}-{lang}",
                      readme=experiment == "kv" and (lang == "en" or page.size_name == "desktop"))
        fork_link = link_params(page)
        assert any(f in fork_link for f in EXPERIMENT_FIELDS), fork_link
        generate_and_wait(page)  # the left column's plain run, whatever the lab's widgets still hold
        number += 1
        wait_current(page, number)
        page.wait_for_function("() => !document.querySelector('#active-settings') ||"
                               " !document.querySelector('#active-settings').offsetParent")
        assert badge(page) == ""
        label = history(page)[0]
        assert label in (f"run {number}", f"第 {number} 次运行"), label  # no experiment, no origin
        params = link_params(page)
        assert not set(EXPERIMENT_FIELDS) & set(params), params  # no edit, full cache, float32 weights, no draft
        assert tokens(page) == plain_tokens


def test_picking_an_earlier_run_moves_the_screen_the_lab_the_link_and_the_lesson(page, server):
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=12, pace_ms=40)  # a fork seen streaming
    first = tokens(page)
    set_slider(page, "max-new-tokens", 8)
    generate_and_wait(page)  # run 2: plain, 8 tokens
    open_lab(page)  # drawn: its sliders' ranges are the model's
    set_slider(page, "lab-layer", 1)
    set_slider(page, "lab-head", 2)
    fork_and_watch(page, "#lab-ablate-head")  # run 3: run 2 with head 1.2 ablated
    wait_text(page, "#lab-divergence-md", "Compared with run 2")
    ablated = tokens(page)
    assert len(ablated) == 8 and "ablate head 1.2" in badge(page)
    text = _open_lesson(page, "Attention step by step")
    assert "step 8" in text
    assert [e.split(" · ")[0] for e in history(page)] == ["run 3", "run 2", "run 1"]
    shot(page, "runs-history", element="#workspace")

    pick(page, 1)  # the first run again: the live screen, the open lesson, the badge and the link follow
    page.wait_for_function("(n) => document.querySelectorAll('#token-stream [data-step]').length === n", arg=len(first))
    assert tokens(page) == first and badge(page) == ""
    wait_text(page, "#lesson-md", "step 12")
    params = link_params(page)
    assert params["max_new_tokens"] == "12" and "edits" not in params and params["pace_ms"] == "40"
    open_tab(page, "Causal lab")  # the lab reads the run picked
    wait_text(page, "#lab-divergence-md", "This run has no edit")
    page.click("#lab-sweep-btn")  # the head sweep runs on the run picked, not on the ablated run
    wait_text(page, "#lab-sweep-md", "In run 1 (no edit), step 12")
    page.wait_for_selector("#lab-sweep-plot .js-plotly-plot", state="visible")

    pick(page, 3)  # and back to the ablated run
    assert tokens(page) == ablated and "ablate head 1.2" in badge(page)
    wait_text(page, "#lab-divergence-md", "Compared with run 2")
    page.wait_for_function("() => (document.querySelector('#lab-sweep-md')?.innerText ?? '').trim() === ''")
    assert not page.locator("#lab-sweep-plot .js-plotly-plot").is_visible()  # run 1's sweep is run 1's only
    assert "edits" in link_params(page)
    assert_fits(page)


def test_a_language_switch_says_it_all_again_and_a_model_switch_leaves_nothing_of_the_old_run(page, server):
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=10, pace_ms=40)
    fork_with(page, "kv", "en")
    wait_text(page, "#kvlab-md", "Run 2 (window 6) holds")
    assert "window 6" in badge(page)
    page.get_by_text("中文", exact=True).click()  # everything on screen, said again
    wait_text(page, "#kvlab-md", "运行 2(窗口 6)结束时占用")
    wait_text(page, "#active-settings", "窗口 6")
    wait_text(page, "#run-history", "第 2 次运行 · 窗口 6 · 来自第 1 次运行")
    assert "window" not in page.inner_text("#run-history") and "Run 2" not in page.inner_text("#kvlab-md")
    shot(page, "runs-zh")
    link_of(page)  # the link box shown: it must follow what comes next
    page.get_by_text("English", exact=True).click()
    wait_text(page, "#kvlab-md", "Run 2 (window 6) holds")

    page.click("#model-select input")
    page.get_by_role("option", name="tiny-seq2seq").first.click()
    wait_text(page, "#model-status", "tiny-seq2seq")
    page.wait_for_function("() => !document.querySelector('#token-stream [data-step]')")  # the old tokens are gone
    page.wait_for_function("() => !document.querySelector('#run-history [data-run].current')")  # none on screen
    wait_text(page, "#kvlab-md", "Generate once")  # the lab waits for a run of this model
    assert badge(page) == "" and not page.locator("#share-link").is_visible()
    for plot in ("#kvlab-bytes-plot", "#kvlab-divergence-plot", "#kvlab-sink-plot"):
        assert not page.locator(f"{plot} .js-plotly-plot").is_visible()
    open_tab(page, "Causal lab")  # every other view: empty with its word, nothing of run 2
    assert "Run 2" not in page.inner_text("#lab-tab") and "window" not in page.inner_text("#lab-tab")
    assert len(history(page)) == 2  # the runs stay in the history, to be picked again
    assert_fits(page)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_lab_says_before_the_press_what_a_fork_keeps_and_a_press_that_cannot_run_says_why(page, server, lang):
    """Issue 44, item 3: going through the labs in order stacked their changes without a word. After a KV fork the
    precision lab says what the run on screen already has and forks from the plain run (int8 alone), unless the
    visitor ticks the box; with no drafter chosen, "Run as a branch" says why instead of nothing."""
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=12, pace_ms=100, lang=lang)
    fork_with(page, "kv", lang)
    wait_current(page, 2)
    open_tab(page, WORDS[lang]["precision"][0])
    window = WORDS[lang]["kv"][1]
    page.wait_for_function("(w) => (document.querySelector('#precision-fork-from')?.innerText ?? '').includes(w)",
                           arg=window)
    assert page.locator("#precision-fork-keep").is_visible()
    assert_fits(page)
    shot(page, f"fork-from-{lang}")
    page.locator("#weight-precision label", has_text="int8").click()
    fork_and_watch(page, "#precision-fork-btn")
    wait_current(page, 3)
    page.wait_for_function("(w) => (document.querySelector('#active-settings')?.innerText ?? '').includes(w)",
                           arg=WORDS[lang]["precision"][1])
    assert window not in badge(page)  # the plain run's fork: int8 alone
    open_tab(page, WORDS[lang]["speculative"][0])
    page.click("#spec-fork-btn")  # Drafter is off
    said = "Drafter" if lang == "en" else "草稿器"
    page.wait_for_function("(w) => (document.querySelector('#speculative-fork-said')?.innerText ?? '').includes(w)",
                           arg=said)
    assert current(page) == "3"  # nothing ran
    shot(page, f"fork-refused-{lang}")
