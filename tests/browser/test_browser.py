"""The app in a real browser: a server started here, headless Debian Chromium driven by Playwright.

Every check of the live screen runs at 1440×900 and at 400×850 (a phone). Screenshots go to
test-artifacts/; with PLAYGROUND_UPDATE_SCREENSHOTS=1 the ones the README shows are also written to
tests/screenshots/.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.ui_fixtures import free_port, save_tiny_decoder

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
README_SHOTS = Path(__file__).resolve().parents[1] / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
DEFAULTS = ("tiny-lm", "tiny-seq2seq")
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 400, "height": 850}
SIZES = {"desktop": DESKTOP, "phone": PHONE}
TIMEOUT_MS = 120_000
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant: {% endif %}")



def _have_defaults() -> bool:
    return all((REPO / "weights" / name).exists() for name in DEFAULTS)


needs_defaults = pytest.mark.skipif(not _have_defaults(), reason="default weights are not in weights/")


def _save_chat_model(directory: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    save_tiny_decoder(directory, seed=2)
    tok = PreTrainedTokenizerFast.from_pretrained(directory)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(directory)


@contextlib.contextmanager
def running_app(weights: Path, log_path: Path, *args: str) -> Iterator[str]:
    """app.py in a subprocess on a free port; yields its URL and fails the test if it logged a traceback."""
    port = free_port()
    log = open(log_path, "w+")
    # One torch thread: on 2 cores the server's OpenMP threads would otherwise spin against Chromium's
    # renderer, and a loaded machine then made streaming ~100x slower (a timeout seen under load).
    env = {**os.environ, "PYTHONPATH": str(REPO), "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(REPO / "app.py"), "--port", str(port), "--weights", str(weights),
                             *args], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    else:
        proc.kill()
    if proc.poll() is not None:
        log.seek(0)
        pytest.fail(f"the app did not start:\n{log.read()[-3000:]}")
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    log.seek(0)
    text = log.read()
    first = text.find("Traceback")
    # The first traceback whole, with what the server logged just before it: later ones are often its echoes.
    assert first < 0, f"the server logged a traceback:\n{text[max(0, first - 1500):first + 6000]}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The shipped defaults, a tiny random decoder and a chat model."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium)")
    weights = tmp_path_factory.mktemp("weights")
    for name in DEFAULTS:
        if (REPO / "weights" / name).exists():
            shutil.copytree(REPO / "weights" / name, weights / name)
    save_tiny_decoder(weights / "tiny-random")
    _save_chat_model(weights / "tiny-chat")
    with running_app(weights, tmp_path_factory.mktemp("log") / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def new_page(browser, size: dict):
    page = browser.new_context(viewport=size).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.js_errors = errors
    return page


@pytest.fixture(params=list(SIZES))
def page(request, browser):
    pg = new_page(browser, SIZES[request.param])
    pg.size_name = request.param
    yield pg
    assert not pg.js_errors, f"the page raised: {pg.js_errors}"
    pg.context.close()


@pytest.fixture
def desktop(browser):
    pg = new_page(browser, DESKTOP)
    pg.size_name = "desktop"
    yield pg
    assert not pg.js_errors, f"the page raised: {pg.js_errors}"
    pg.context.close()


def decoder_name() -> str:
    return "tiny-lm" if _have_defaults() else "tiny-random"


def open_app(page, server: str, **params) -> None:
    """Open the page with these query parameters; a link that names a prompt runs by itself: wait for it."""
    page.goto(server + ("?" + urlencode(params) if params else ""))
    page.wait_for_function("() => /Loaded|已加载/.test(document.querySelector('#model-status')?.innerText ?? '')")
    if str(params.get("prompt", "")).strip():
        wait_state(page, "done", "stopped", "error")


def wait_text(page, selector: str, text: str) -> None:
    """Wait until the element exists and its text contains `text`; on a timeout, say what it held instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("([sel, text]) => (document.querySelector(sel)?.innerText ?? '').includes(text)",
                               arg=[selector, text])
    except PlaywrightTimeout:
        held = page.evaluate("(sel) => document.querySelector(sel)?.innerText ?? null", selector)
        raise AssertionError(f"{selector} never held {text!r}; it holds {held!r}") from None


def copied_link(page) -> str:
    """Press Copy link and return the link it made now. The box may still hold the link of an earlier press; the
    press's last step writes its query into the address bar, so the address is cleared first and the link is read
    once the address holds a query again and the box shows the same one."""
    page.evaluate("() => window.history.replaceState(null, '', window.location.pathname)")
    page.click("#copy-link-btn")
    page.wait_for_function("() => { const q = window.location.search;"
                           " const box = document.querySelector('#share-link textarea')?.value ?? '';"
                           " const decoded = (x) => { try { return decodeURIComponent(x); } catch (e) { return x; } };"
                           " return q.length > 1 && box.startsWith('http')"
                           " && decoded(box.slice(box.indexOf('?'))) === decoded(q); }")
    link = page.input_value("#share-link textarea")
    assert link.count("://") == 1, link  # one address (the box's link, made absolute again, once had the page's twice)
    return link


def settled_text(page, selector: str) -> str:
    """The element's text once no event is pending on it (Gradio shows its "processing" line inside it meanwhile)."""
    page.wait_for_function("(sel) => { const e = document.querySelector(sel); return !!e && !e.closest('.pending')"
                           " && !e.querySelector('.pending, .eta-bar, .progress-text'); }", arg=selector)
    return page.inner_text(selector)


def wait_state(page, *states: str) -> str:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("(states) => states.includes(document.querySelector('#gen-status')?.dataset.state)",
                               arg=list(states))
    except PlaywrightTimeout:  # say what the page showed instead (a CI log is all there is to read)
        shown = page.evaluate("() => { const s = document.querySelector('#gen-status');"
                              " return [s?.dataset.state, s?.innerText, document.querySelector('#notes')?.innerText]; }")
        raise AssertionError(f"the status never became {states}: state, status and notes were {shown}") from None
    return page.inner_text("#gen-status")


def generate_and_wait(page) -> str:
    """Press Generate and wait for that run's end (not the end of the run already on screen)."""
    page.evaluate("() => { window.__before = document.querySelector('#token-stream').firstChild; }")
    page.click("#generate-btn")
    page.wait_for_function("() => document.querySelector('#token-stream').firstChild !== window.__before"
                           " || document.querySelector('#gen-status').dataset.state === 'error'")
    return wait_state(page, "done", "stopped", "error")


def tokens(page) -> list[str]:
    return page.evaluate("() => Array.from(document.querySelectorAll('#token-stream [data-step]')).map(e => e.textContent)")


def generated_text(page) -> str:
    return "".join(tokens(page)).replace("↵", "")


def open_tab(page, name: str) -> None:
    """Click a deep view's tab by its label (English or 中文), opening its section first: the sections' row and each
    section's tabs wrap, so a tab is at most two clicks away (one when its section is open)."""
    from playground.app.words import STRINGS
    from playground.ui.sections import SECTION_OF

    tab = page.get_by_role("tab", name=name, exact=True)
    if not (tab.count() and tab.first.is_visible()):
        ids = {words: key[len("tab_"):] for key, both in STRINGS.items() if key.startswith("tab_") for words in both}
        page.click(f"#section-{SECTION_OF[ids[name]]}-button")
        tab.first.wait_for(state="visible")
    if tab.first.get_attribute("aria-selected") != "true":
        tab.first.click()


def shot(page, name: str, readme: bool = False, element: str | None = None) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    name = f"{name}-{page.size_name}"
    target = page.locator(element) if element else page
    kwargs = {} if element else {"full_page": True}
    target.screenshot(path=str(ARTIFACTS / f"{name}.png"), **kwargs)
    if readme and os.environ.get("PLAYGROUND_UPDATE_SCREENSHOTS") == "1":
        README_SHOTS.mkdir(exist_ok=True)
        target.screenshot(path=str(README_SHOTS / f"{name}.png"), **kwargs)


def assert_fits(page) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    window = page.viewport_size["width"]
    if width > window:  # name the innermost elements that reach past the window's edge
        wide = page.evaluate("""(w) => Array.from(document.querySelectorAll('body *'))
            .filter(e => e.getBoundingClientRect().right > w + 1 && e.offsetParent !== null
                    && ![...e.children].some(c => c.getBoundingClientRect().right > w + 1))
            .map(e => (e.id ? '#' + e.id : e.tagName.toLowerCase() + '.' + [...e.classList].join('.'))
                 + ' ' + Math.round(e.getBoundingClientRect().right)).slice(0, 8)""", window)
        raise AssertionError(f"the page is {width} px wide in a {window}-px window: {wide}")


def in_view(page, selector: str) -> bool:
    """The element's top is inside the window without scrolling."""
    return page.evaluate("(sel) => { const r = document.querySelector(sel).getBoundingClientRect();"
                         " return r.top >= 0 && r.top < window.innerHeight; }", selector)


# --- the live screen -----------------------------------------------------------------------------


def test_every_panel_follows_the_tokens_while_they_stream(page, server):
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=24, pace_ms=120)
    if page.size_name == "desktop":  # the stream and the step panels are on screen without scrolling
        assert in_view(page, "#token-stream") and in_view(page, "#step-panels")
    page.evaluate("""() => { window.__seen = []; const panels = document.querySelector('#step-panels');
        new MutationObserver(() => window.__seen.push([document.querySelectorAll('#token-stream [data-step]').length,
            panels.querySelector('.pg-cands').innerText, panels.querySelector('.pg-att .pg-achips').innerText,
            panels.querySelector('.pg-kv').innerText])).observe(panels, {subtree: true, childList: true}); }""")
    status = generate_and_wait(page)
    assert "Done" in status
    seen = page.evaluate("window.__seen")
    during = [s for s in seen if 0 < s[0] < 24]
    assert len({s[0] for s in during}) >= 3, "tokens arrived all at once"
    for panel in (1, 2, 3):  # candidates, attention on the text, KV cache: each changed while streaming
        assert len({s[panel] for s in during}) >= 3, f"panel {panel} did not follow the stream"
    step = page.locator("#token-stream [data-step='3']")
    assert float(step.get_attribute("data-prob")) > 0 and "p =" in step.get_attribute("title")
    assert step.get_attribute("title").startswith("step 4 ·")  # data-step 3 is step 4, as the step bar says
    assert "2 · N" in page.inner_text("#step-panels .pg-kv")
    assert_fits(page)
    shot(page, "live", readme=True)


def test_clicking_a_token_and_arrow_keys_move_every_panel(page, server):
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=12)
    generate_and_wait(page)
    page.click("#token-stream [data-step='2']")  # data-step counts from 0; the page counts steps from 1
    wait_text(page, ".pg-stepbar", "Step 3 of 12")
    kv_at_2 = page.inner_text("#step-panels .pg-kv")
    page.keyboard.press("ArrowRight")
    wait_text(page, ".pg-stepbar", "Step 4 of 12")
    assert page.evaluate("() => document.activeElement.dataset.step") == "3"
    assert page.inner_text("#step-panels .pg-kv") != kv_at_2  # the cache panel moved with the step
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    wait_text(page, ".pg-stepbar", "Step 2 of 12")
    wait_text(page, "#step-caption", "Step 2")  # the open deep view follows
    assert "selected" in page.get_attribute("#token-stream [data-step='1']", "class")
    shot(page, "inspector", readme=True)


def test_attention_on_the_text_offers_scales_sinks_and_only_meaningful_groups(desktop, server):
    page = desktop
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=8)
    generate_and_wait(page)
    # The newest token looked at every token before it: the prompt and the tokens generated before it.
    chips = page.locator("#step-panels .pg-att .achip").count()
    assert chips == page.locator("#token-stream .tok").count() - 1
    options = page.eval_on_selector_all("#step-panels .pg-ahead option", "els => els.map(e => e.value)")
    assert "group:0" in options  # tiny-lm shares K/V between heads (GQA)
    page.select_option("#step-panels .pg-ahead", "0")
    page.select_option("#step-panels .pg-ascale", "log")
    page.check("#step-panels .pg-asinkbox")
    page.wait_for_selector("#step-panels .achip.sink")
    page.select_option("#step-panels .pg-alayer", "0")  # another layer: asked from the server
    page.wait_for_function("() => document.querySelectorAll('#step-panels .pg-att .achip').length > 3")
    assert "hover" not in page.inner_text("#step-panels .pg-att")  # no leftover placeholder
    shot(page, "attention-live", element="#step-panels")


def test_branch_from_a_step_with_another_candidate(page, server):
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=10)
    generate_and_wait(page)
    first = tokens(page)
    page.click("#token-stream [data-step='2']")
    wait_text(page, ".pg-stepbar", "Step 3 of")  # data-step counts from 0, the page from 1
    page.locator("#step-panels .pg-branch").first.click()
    wait_state(page, "running", "done")
    wait_state(page, "done")
    page.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current")
    assert "branch of run" in page.inner_text(".pg-branches")
    assert page.locator("#token-stream .tok.forced").count() == 1
    assert page.locator("#token-stream .tok.inherited").count() == 2  # the first two steps, kept
    assert tokens(page) != first[3:]
    # one step numbering: the branch left run 1 at step 3 (its forced token), and its own first token is step 4
    assert "at step 3" in page.inner_text(".pg-branchrow.current")
    page.click("#token-stream .tok.gen[data-step='0']")
    wait_text(page, ".pg-stepbar", "Step 4 of")
    assert page.get_attribute("#token-stream .tok.gen[data-step='0']", "title").startswith("step 4 ")
    page.click("#copy-link-btn")
    page.wait_for_function("() => (document.querySelector('#share-link textarea')?.value ?? '').includes('branches=')")
    shot(page, "branch", readme=True)


def test_beam_search_shows_the_best_beam_as_clickable_tokens(page, server):
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", mode="beam", num_beams=3,
             max_new_tokens=8)
    generate_and_wait(page)
    assert page.locator("#token-stream [data-step]").count() >= 1
    assert "nats" in page.inner_text(".pg-beams")  # the score's unit is stated
    page.click("#token-stream [data-step='1']")
    wait_text(page, "#step-caption", "from beam")
    chosen = page.inner_text("#step-panels .pg-ctable tr.chosen .pg-ctok").replace("✓", "").strip()
    assert chosen.replace("␣", " ").strip() == tokens(page)[1].replace("↵", "").strip()  # the caption's token is in the text
    page.wait_for_selector("#beam-tree .js-plotly-plot")
    assert_fits(page)
    shot(page, "beam-search", readme=True)


# --- models, chat, links, seeds --------------------------------------------------------------------


def test_a_chat_model_opens_with_chat_on_and_a_link_restores_it(page, browser, server):
    open_app(page, server, model="tiny-chat")
    assert page.is_checked("#chat input")
    # Copy link at once: the page's own load is still redrawing its panels, and the box it asked for stays (before,
    # the load's last redraw hid it, and a first click once showed no link at all)
    page.wait_for_function("() => document.querySelector('#prompt textarea').value !== ''")
    shared = copied_link(page)
    assert "chat=true" in shared and "model=tiny-chat" in shared, shared
    off = new_page(browser, page.viewport_size)
    open_app(off, server, model="tiny-chat", chat="false", prompt="Hi")
    assert not off.is_checked("#chat input") and off.input_value("#prompt textarea") == "Hi"
    off.context.close()


def test_with_nothing_on_screen_the_asked_link_follows_a_model_switch(desktop, server):
    """The box Copy link showed holds the left column's link while no run is on screen: a model switch renews it
    (the old model's link would open the wrong model), it never vanishes."""
    page = desktop
    open_app(page, server, model="tiny-chat")
    assert "model=tiny-chat" in copied_link(page)
    page.click("#model-select input")
    page.get_by_role("option", name="tiny-random").first.click()
    page.wait_for_function("() => /model=tiny-random/.test(document.querySelector('#share-link textarea')?.value ?? '')")
    assert page.input_value("#share-link textarea").startswith("http")
    assert "Link to the run these settings make" in page.inner_text("#share-link")  # not a run on screen: says so
    generate_and_wait(page)
    page.wait_for_function("() => document.querySelector('#share-link').innerText.includes('Link to this exact run')")


@needs_defaults
def test_choosing_a_model_swaps_in_its_example_and_description(page, server):
    open_app(page, server, model="tiny-lm")
    page.click("#model-select input")
    page.get_by_role("option", name="tiny-seq2seq").first.click()
    page.wait_for_function("() => document.querySelector('#prompt textarea').value === 'March 5, 2021'")
    wait_text(page, "#model-about", "ISO 8601")
    assert "Source text" in page.inner_text("#prompt")
    generate_and_wait(page)
    assert generated_text(page).replace("</s>", "").strip() == "2021-03-05"
    assert page.locator("#step-panels .pg-akind").input_value() == "cross"
    assert_fits(page)
    shot(page, "seq2seq", readme=True)


def test_an_empty_seed_is_drawn_shown_and_reproduces_from_the_link(page, browser, server):
    open_app(page, server, model=decoder_name(), mode="sample", temperature=0.9, seed="none", max_new_tokens=10)
    page.fill("#prompt textarea", "Once upon")
    assert page.input_value("#seed input") == ""
    generate_and_wait(page)
    assert page.input_value("#seed input") == ""  # stays empty: the next press draws again
    drawn = page.evaluate("() => /Seed (\\d+)/.exec(document.querySelector('#gen-status').innerText)[1]")
    assert drawn.isdigit() and drawn in page.inner_text("#notes")
    first = generated_text(page)
    page.click("#copy-link-btn")
    page.wait_for_function("(s) => (document.querySelector('#share-link textarea')?.value ?? '').includes('seed=' + s)",
                           arg=drawn)
    link = page.input_value("#share-link textarea")
    other = new_page(browser, page.viewport_size)
    other.goto(link)  # the link runs by itself, with the seed it names
    other.wait_for_function("() => /Loaded/.test(document.querySelector('#model-status')?.innerText ?? '')")
    wait_state(other, "done")
    assert other.input_value("#seed input") == drawn and generated_text(other) == first
    other.context.close()


def test_an_empty_prompt_is_one_message_without_badges(page, server):
    open_app(page, server, model=decoder_name(), prompt="x")
    page.fill("#prompt textarea", "")
    page.click("#generate-btn")
    wait_state(page, "error")
    assert "prompt is empty" in page.inner_text("#gen-status")
    badges = page.evaluate("() => document.querySelectorAll('.error, .toast-body').length")
    assert badges == 0


def test_stop_interrupts_a_long_generation(desktop, server):
    """Stop ends the run on screen. Waits for states only (a busy machine may be slow at every step): the prompt is
    typed, not in the link (a link's prompt runs by itself, and its 400 tokens once stood in for this run's first
    three, so Stop could land before this press had started); Stop is pressed once this run streams; the last
    frame says "stopped" and how many tokens it kept, which is what the stream shows."""
    page = desktop
    open_app(page, server, model=decoder_name(), max_new_tokens=400, pace_ms=100)
    page.fill("#prompt textarea", "Hello")
    page.evaluate("() => { window.__before = document.querySelector('#token-stream').firstChild; }")
    page.click("#generate-btn")
    page.wait_for_function("() => document.querySelector('#token-stream').firstChild !== window.__before"
                           " && document.querySelector('#gen-status').dataset.state === 'running'"
                           " && document.querySelectorAll('#token-stream [data-step]').length >= 3")
    page.click("#stop-btn")
    text = wait_state(page, "stopped")
    n = page.locator("#token-stream [data-step]").count()
    assert 3 <= n < 400 and f"Stopped after {n} tokens" in text, (n, text)
    generate_and_wait(page)  # the app still works afterwards


def test_a_visitor_waiting_for_a_slot_sees_their_place_in_line(browser, tmp_path_factory):
    """With one generation slot, a second and third Generate wait: each page says where it stands, in
    its own language, readable (not faded), and runs once the slot frees."""
    weights = tmp_path_factory.mktemp("one-slot-weights")
    save_tiny_decoder(weights / "tiny-random")
    with running_app(weights, tmp_path_factory.mktemp("log") / "one-slot.log", "--concurrency", "1") as url:
        pages = [new_page(browser, DESKTOP) for _ in range(3)]
        # the first run holds the slot 15 s, the others 5 s: the line stands while a busy machine draws the pages
        lengths = (60, 20, 20)
        for pg, lang, n in zip(pages, ("en", "en", "zh"), lengths):
            open_app(pg, url, model="tiny-random", max_new_tokens=n, pace_ms=250, lang=lang)
            pg.fill("#prompt textarea", "a")  # typed, not in the link: a link's prompt would run by itself
        pages[0].click("#generate-btn")
        wait_state(pages[0], "running")
        pages[1].click("#generate-btn")
        wait_state(pages[1], "queued")
        pages[2].click("#generate-btn")
        # Gradio tells a waiting page the line's length when its place changes, so the first in line
        # may still read "of 1".
        wait_text(pages[1], "#gen-status", "Waiting for a free slot: 1 of ")
        wait_text(pages[2], "#gen-status", "正在排队:第 2 位,共 2 位")
        opacity = pages[2].evaluate("() => { let e = document.querySelector('#gen-status'), o = 1;"
                                    " for (; e; e = e.parentElement) o *= +getComputedStyle(e).opacity; return o; }")
        assert opacity == 1
        for pg, n in zip(pages, lengths):
            assert wait_state(pg, "done", "stopped", "error") and pg.get_attribute("#gen-status", "data-state") == "done"
            assert len(tokens(pg)) == n
            assert not pg.js_errors, pg.js_errors
            pg.context.close()


# --- the lessons ------------------------------------------------------------------------------------


def _open_lesson(page, label: str) -> str:
    """Pick a lesson in its tab (Look inside › Lessons); wait until its text and figures are drawn; its text."""
    from playground.app.words import STRINGS

    waiting = [words.split("{n}")[0] for words in STRINGS["view_pending"]]  # "Reading run {n}…": not drawn yet

    def drawn() -> None:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            page.wait_for_function(
                "(waiting) => { const md = document.querySelector('#lesson-md')?.innerText ?? '';"
                " return md && !waiting.some(w => md.startsWith(w)) && !document.querySelector('#lessons-tab .pending'); }",
                arg=waiting)
        except PlaywrightTimeout:  # once in a CI rehearsal (2026-11-30, phone): say what the tab held
            held = page.evaluate("() => ({md: (document.querySelector('#lesson-md')?.innerText ?? '').slice(0, 200),"
                                 " pending: !!document.querySelector('#lessons-tab .pending'),"
                                 " status: document.querySelector('#gen-status')?.innerText.slice(0, 200)})")
            raise AssertionError(f"the lesson was never drawn: {held}") from None

    if not page.locator("#lesson-pick").is_visible():  # the tab draws the lesson it shows when it opens
        page.click("#section-inside-button")
        page.click("#lessons-tab-button")
        drawn()
    choice = page.locator("#lesson-pick label", has_text=label).first
    if not choice.locator("input").is_checked():
        before = page.inner_text("#lesson-md")
        choice.click()
        page.wait_for_function(
            "(before) => { const md = document.querySelector('#lesson-md')?.innerText ?? '';"
            " return md && md !== before && !document.querySelector('#lessons-tab .pending'); }", arg=before)
    drawn()
    return page.inner_text("#lesson-md")


LESSON_WORDS = {  # a phrase each lesson's own text must contain on the tiny decoder's run
    "steps": "softmax", "lens": "layer", "kv": "cache", "memory": "2 ·", "patterns": "mask",
    "sdpa": "SDPA", "anatomy": "residual", "training": "learning rate", "lab": "ablate", "serving": "shared batch",
}


def test_each_lesson_opens_from_the_live_screen_and_fits(page, server):
    from playground.app.lessons import LESSONS
    from playground.app.words import STRINGS

    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=12)
    generate_and_wait(page)
    missing = {}
    for lesson in LESSONS:
        text = _open_lesson(page, STRINGS[f"lesson_{lesson}"][0])
        if LESSON_WORDS[lesson].lower() not in text.lower():
            missing[lesson] = text[:400]
        assert page.locator("#lessons-tab").is_visible()
        assert_fits(page)
        shot(page, f"lesson-{lesson}", readme=True)
    assert not missing, missing


def test_a_lesson_in_chinese(desktop, server):
    page = desktop
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=12, lang="zh")
    generate_and_wait(page)
    from playground.app.words import STRINGS

    text = _open_lesson(page, STRINGS["lesson_lens"][1])
    assert any("\u4e00" <= ch <= "\u9fff" for ch in text), text[:200]
    shot(page, "lesson-lens-zh", readme=True)


def test_sliders_act_on_enter_and_arrow_keys(page, server):
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=6)
    generate_and_wait(page)
    open_tab(page, "All heads")
    # it opens where the live panel looks: the last layer
    page.wait_for_function("() => +document.querySelector('#att-layer input[type=range]')?.max > 1")
    wait_text(page, "#att-heat", f"layer {page.locator('#att-layer input[type=range]').get_attribute('max')}")
    box = page.locator("#att-layer input[type=number]")
    box.fill("2")
    box.press("Enter")
    wait_text(page, "#att-heat", "layer 2")
    page.locator("#att-layer input[type=range]").focus()
    page.keyboard.press("ArrowRight")
    wait_text(page, "#att-heat", "layer 3")
    assert_fits(page)
    shot(page, "all-heads", readme=True)


# --- language, layout, the rest of the page --------------------------------------------------------


def test_the_chinese_switch_covers_labels_hints_and_the_live_screen(page, server):
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=8)
    page.get_by_text("中文", exact=True).click()
    wait_text(page, "#model-status", "已加载")
    wait_text(page, "#generate-btn", "生成")
    assert "温度" in page.evaluate("() => document.body.innerText") or "解码方式" in page.inner_text("#decoding")
    generate_and_wait(page)
    assert "完成" in page.inner_text("#gen-status")
    assert "候选词" in page.inner_text("#step-panels") and "KV 缓存" in page.inner_text("#step-panels")
    assert_fits(page)
    shot(page, "live-zh", readme=True)


@needs_defaults
@pytest.mark.parametrize("model, words", [("tiny-lm", "RoPE"), ("tiny-seq2seq", "Sinusoidal")])
def test_positional_encoding_panel_for_each_default(page, server, model, words):
    open_app(page, server, model=model)
    open_tab(page, "Positional encoding")
    wait_text(page, "#pe-md", words)
    page.wait_for_selector("#pe-plot-1 .js-plotly-plot")
    assert_fits(page)
    shot(page, f"positional-{model}", readme=True)


def test_kv_cache_tab_compares_with_and_without_cache(page, server):
    open_app(page, server, model=decoder_name(), prompt="The Python interpreter", max_new_tokens=16)
    generate_and_wait(page)
    open_tab(page, "KV cache")
    page.wait_for_selector("#cache-growth .js-plotly-plot")
    page.click("#rerun-btn")
    wait_text(page, "#compare-md", "interleaved")
    assert_fits(page)
    shot(page, "kv-cache", readme=True)


def test_model_card_and_no_overflow_on_a_phone(page, server):
    open_app(page, server, model=decoder_name())
    open_tab(page, "Model card")
    card = page.inner_text("#model-card")
    assert "Parameters" in card and "RoPE" in card
    assert_fits(page)
    shot(page, "model-card", readme=True)


def test_corrupt_upload_shows_an_error_and_the_app_still_works(page, server, tmp_path):
    open_app(page, server, model=decoder_name(), prompt="Hi", max_new_tokens=4)
    page.click("#load-own")
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + b"\x00" * 64)
    page.set_input_files("#upload input[type=file]", str(bad))
    wait_text(page, "#model-status", "Upload refused")
    message = page.inner_text("#model-status")
    assert "Traceback" not in message and "\n" not in message.strip()
    assert f"Still using {decoder_name()}" in message
    badges = page.evaluate("""() => ['#model-select', '#upload', '#model-status'].flatMap(sel =>
        Array.from(document.querySelectorAll(sel + ' .error, ' + sel + ' .error-text'))).length""")
    assert badges == 0 and page.locator(".toast-body").count() == 0
    shot(page, "corrupt-upload", readme=True)
    generate_and_wait(page)


def test_visitors_are_private_and_checkpoint_text_is_never_markup(browser, server, tmp_path):
    """Two visitors: the first uploads a checkpoint full of HTML; it shows as text, and the second visitor
    neither sees it listed nor can load it from the first one's link."""
    from tests.ui_fixtures import HOSTILE_TOKENS, save_hostile_checkpoint

    first = new_page(browser, DESKTOP)
    first.size_name = "desktop"
    dialogs: list[str] = []
    first.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    open_app(first, server, model=decoder_name())
    first.click("#load-own")
    path = save_hostile_checkpoint(tmp_path / "upload" / "model.safetensors")
    first.set_input_files("#upload input[type=file]", str(path))
    wait_text(first, "#model-status", "Uploaded")
    first.fill("#prompt textarea", " ".join(HOSTILE_TOKENS))
    generate_and_wait(first)
    open_tab(first, "Model card")
    wait_text(first, "#model-card", "onerror")  # the family string is shown, as text
    injected = first.evaluate("""() => document.querySelectorAll('img[src="x"], form[action*="evil"], '
        + 'input[type=password], #token-stream script, #token-stream b, #token-stream h1').length""")
    assert injected == 0 and not dialogs
    first.click("#copy-link-btn")
    first.wait_for_function("() => (document.querySelector('#share-link textarea')?.value ?? '').includes('upload')")
    link = first.input_value("#share-link textarea")
    shot(first, "hostile-upload")

    second = new_page(browser, DESKTOP)
    second.goto(link)
    wait_text(second, "#notes", "private to the visitor who made it")
    wait_text(second, "#model-status", "Loaded")  # it falls back to the default model, and says so
    second.click("#model-select input")
    options = second.evaluate("() => Array.from(document.querySelectorAll('[role=option]')).map(o => o.textContent)")
    assert options and not any("upload" in o.lower() for o in options)
    second.keyboard.press("Escape")
    first.context.close()
    second.context.close()


def test_a_links_notes_stay_until_the_visitors_next_press(page, server):
    """Bad parameters and an unknown model: the notes outlive the model's load and the link's run (they
    vanished after a second or were replaced by the run's own), in words, never Python's."""
    page.goto(server + "?" + urlencode({"model": "nope", "temperature": "abc"}))
    wait_text(page, "#notes", "expected a number")
    wait_text(page, "#model-status", "Loaded")
    time.sleep(3)  # what followed the load (the link's run event, the panels) has had its turn: they stay
    notes = page.inner_text("#notes")
    assert "expected a number" in notes and "nope" in notes and "could not convert" not in notes
    page.goto(server + "?" + urlencode({"model": "nope", "temperature": "abc", "prompt": "Hi", "mode": "sample",
                                        "max_new_tokens": 4}))
    wait_state(page, "done")
    wait_text(page, "#notes", "No seed was given")
    assert "expected a number" in page.inner_text("#notes")  # beside the run's own note
    generate_and_wait(page)
    assert "expected a number" not in page.inner_text("#notes")  # the visitor's own press
