"""One path in, in real Chromium at 1440×900 and 400×850, in English and 中文: every section of the deep views one
click away with all its tabs on screen (no "⋯" menu, nothing moving when one is picked) and its view drawn; the
guided path ("Start here") from its first step to its end on the run on screen; projector mode by its toggle, by
a copied link and by `projector=1`."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlparse

import pytest

from playground.app.words import t
from playground.ui.guide import STEPS
from playground.ui.sections import SECTIONS
from tests.browser import test_browser as base
from tests.browser.test_browser import (
    assert_fits,
    decoder_name,
    generate_and_wait,
    new_page,
    open_app,
    shot,
    wait_state,
)

pytestmark = pytest.mark.browser
server, browser, page, desktop = base.server, base.browser, base.page, base.desktop
PROMPT = "The Python interpreter"
LANGS = ("en", "zh")
# what each section draws on its first click (its first tab's view), seen by a figure or words of that view
DRAWN = {"watch": "#funnel-plot .js-plotly-plot", "machine": "#cache-growth .js-plotly-plot",
         "teacher": "#game-view .pg-game"}


def wait_drawn(pg, section: str, lang: str) -> None:
    """The view of the section's open tab is drawn for the run on screen (not its "Reading run…" word)."""
    if section in DRAWN:
        pg.wait_for_selector(DRAWN[section], state="visible")
        return
    selector, words = {"inside": ("#lesson-md", "softmax"), "experiment": ("#lab-divergence-md",
                                                                          t("lab_plain", lang)[:8])}[section]
    pg.wait_for_function("([sel, words]) => (document.querySelector(sel)?.innerText ?? '').includes(words)",
                         arg=[selector, words])


def section_button(section) -> str:
    return "#teacher-tab-button" if not section.tabs else f"#{section.elem_id}-button"


def boxes(pg, selector: str) -> list[list[int]]:
    """Where each visible element of `selector` sits (left, top, right), in whole pixels."""
    return pg.eval_on_selector_all(selector, """els => els.filter(e => e.getClientRects().length)
        .map(e => { const r = e.getBoundingClientRect(); return [Math.round(r.left), Math.round(r.top + scrollY),
                                                                Math.round(r.right)]; })""")


def visible_tabs(pg, section) -> list[str]:
    """The tab ids of the section's own tab row that are on screen, inside the window's width."""
    width = pg.viewport_size["width"]
    return pg.eval_on_selector_all(f"#{section.name}-tabs > .tab-wrapper [role=tab]", """(els, w) => els
        .filter(e => e.getClientRects().length && e.getBoundingClientRect().right <= w
                     && e.getBoundingClientRect().left >= 0).map(e => e.dataset.tabId)""", width)


@pytest.mark.parametrize("lang", LANGS)
def test_every_section_is_one_click_away_with_all_its_tabs(page, server, lang):
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=8, lang=lang)
    assert page.locator("#deep-views .overflow-menu, #deep-views .overflow-dropdown").count() == 0  # never a "⋯"
    row = "#deep-views > .tab-wrapper [role=tab]"
    assert page.eval_on_selector_all(row, "els => els.map(e => e.textContent.trim())") == [
        t(f"section_{s.name}" if s.tabs else "tab_teacher", lang) for s in SECTIONS]
    before = boxes(page, row)
    assert len(before) == len(SECTIONS) and all(right <= page.viewport_size["width"] for _, _, right in before)
    for section in SECTIONS:
        page.click(section_button(section))  # one click
        assert page.get_attribute(section_button(section), "aria-selected") == "true"
        wait_drawn(page, section.name, lang)
        if section.tabs:  # all its tabs on screen, the first one open and its view drawn by that one click
            assert visible_tabs(page, section) == list(section.tabs)
            assert page.inner_text(f"#{section.elem_id} .pg-section-hint") == t(f"section_{section.name}_hint", lang)
            assert page.get_attribute(f"#{section.tabs[0]}-tab-button, [data-tab-id='{section.tabs[0]}']",
                                      "aria-selected") == "true"
        assert boxes(page, row) == before, "the sections' row moved when one was picked"
        assert_fits(page)
        if section.name in ("watch", "experiment"):
            shot(page, f"section-{section.name}-{lang}", element="#deep-views",
                 readme=lang == "en" and section.name == "experiment")
    # a tab inside a section: its view is drawn, and the section shows it again after a visit elsewhere
    page.click("#section-watch-button")
    page.click("#attention-tab-button")
    page.wait_for_selector("#att-grid .js-plotly-plot", state="visible")
    page.click("#section-machine-button")
    page.wait_for_selector("#cache-growth .js-plotly-plot", state="visible")
    page.click("#section-watch-button")
    assert page.get_attribute("#attention-tab-button", "aria-selected") == "true"
    page.wait_for_selector("#att-grid .js-plotly-plot", state="visible")


def in_sight(pg, name: str, readme: bool = False) -> None:
    """A screenshot of the window as it is now (the guide's card sits over the page, where the visitor sees it)."""
    base.ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(base.ARTIFACTS / f"{name}-{pg.size_name}.png"))
    if readme and os.environ.get("PLAYGROUND_UPDATE_SCREENSHOTS") == "1":  # the README shows it as a visitor sees it
        base.README_SHOTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(base.README_SHOTS / f"{name}-{pg.size_name}.png"))


def guide_step(pg) -> str:
    return pg.get_attribute("#start-here", "data-step") or ""


def next_step(pg, number: int) -> None:
    pg.click("#start-here [data-act=next]")
    pg.wait_for_function("(n) => document.querySelector('#start-here').dataset.step === String(n)", arg=number)


def highlighted(pg, selector: str) -> None:
    """The step's control is highlighted and scrolled into the window, its highlight whole: no scroll box around it
    cuts the outline (before, the settings' column cut the Decoding box's outline away)."""
    pg.wait_for_selector(f"{selector}.pg-guide-target")
    pg.wait_for_function("""(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
        return r.bottom > 0 && r.top < innerHeight; }""", arg=selector)
    assert clipped_by(pg, selector) == [], selector


def clipped_by(pg, selector: str) -> list[str]:
    """The boxes around the element that cut its outline (where it is drawn, its offset and width included)."""
    return pg.evaluate("""(sel) => { const e = document.querySelector(sel), s = getComputedStyle(e);
        const grow = Math.max(0, parseFloat(s.outlineOffset) + parseFloat(s.outlineWidth));
        const r = e.getBoundingClientRect(), out = [];
        for (let a = e.parentElement; a && a !== document.documentElement; a = a.parentElement) {
          const c = getComputedStyle(a);
          if (c.overflowX === 'visible' && c.overflowY === 'visible') continue;
          const b = a.getBoundingClientRect();
          if (r.left - grow < b.left - 0.5 || r.right + grow > b.right + 0.5 || r.top - grow < b.top - 0.5
              || r.bottom + grow > b.bottom + 0.5) out.push(a.id || a.className);
        }
        return out; }""", selector)


def in_room(pg, selector: str, whole: bool = True) -> bool:
    """The element is in the window and not under the guide's card: whole, or (whole=False) its first lines."""
    return pg.evaluate("""([sel, whole]) => { const r = document.querySelector(sel).getBoundingClientRect();
        const c = document.querySelector('#start-here .pg-guide').getBoundingClientRect();
        const bottom = (c.left < r.right && c.right > r.left) ? c.top : innerHeight;
        return r.height > 0 && r.top >= -1 && (whole ? r.bottom : Math.min(r.bottom, r.top + 40)) <= bottom + 1; }""",
                       [selector, whole])


def wait_in_room(pg, selector: str, whole: bool = True) -> None:
    try:
        pg.wait_for_function("""([sel, whole]) => { const r = document.querySelector(sel)?.getBoundingClientRect();
            const c = document.querySelector('#start-here .pg-guide').getBoundingClientRect();
            if (!r || !r.height) return false;
            const bottom = (c.left < r.right && c.right > r.left) ? c.top : innerHeight;
            return r.top >= -1 && (whole ? r.bottom : Math.min(r.bottom, r.top + 40)) <= bottom + 1; }""",
                             arg=[selector, whole], timeout=10_000)
    except Exception:  # say where it is
        box = pg.evaluate("(sel) => JSON.stringify(document.querySelector(sel)?.getBoundingClientRect())", selector)
        card = pg.evaluate("() => JSON.stringify(document.querySelector('#start-here .pg-guide').getBoundingClientRect())")
        raise AssertionError(f"{selector} is not in the window above the card: {box}, the card {card}") from None


def key_head_of_the_run(pg, step: int) -> tuple[int, int]:
    """The head with the largest direct attribution to the token the page's run chose at `step` (the page's greedy
    run of its prompt, made again here by the engine): the app core's attribution, its argmax taken here."""
    import numpy as np

    from playground import load_model
    from playground.analysis import attribute_step
    from playground.generation import GenerationConfig, generate_all

    lm = load_model(base.REPO / "weights" / decoder_name(), device="cpu", dtype="float32")
    prompt = pg.input_value("#prompt textarea")
    result = generate_all(lm, lm.tokenize(prompt), GenerationConfig(max_new_tokens=GUIDE_TOKENS, temperature=0.0))
    assert "".join(result.text.split()) == "".join(base.generated_text(pg).split())  # the page's run
    heads = attribute_step(lm, result, step).heads
    layer, head = np.unravel_index(np.argmax(heads), heads.shape)
    return int(layer), int(head)


GUIDE_TOKENS = 8


@pytest.mark.parametrize("lang", LANGS)
def test_the_guided_path_from_start_to_end(page, server, lang):
    open_app(page, server, model=decoder_name(), lang=lang, max_new_tokens=GUIDE_TOKENS)
    start = page.locator("#start-here .pg-start-btn")
    base.wait_text(page, "#start-here .pg-start-btn", t("start_here", lang))  # the page's language, once relabelled
    assert start.is_visible()
    assert base.in_view(page, "#start-here")  # near the top: on the first screen
    start.click()
    card = page.locator("#start-here .pg-guide")
    total = len(STEPS)
    for number, step in enumerate(STEPS, 1):
        if number > 1:
            next_step(page, number)
        assert guide_step(page) == str(number)
        assert card.is_visible()
        assert page.inner_text("#start-here .pg-guide-text") == t(f"guide_{step.name}", lang)
        assert page.inner_text("#start-here .pg-guide-count") == t("guide_step", lang, n=number, total=total)
        highlighted(page, step.target)
        if step.tab:  # its section and tab are open, and the tab's view is drawn for the run on screen
            assert page.get_attribute(f"[data-tab-id='{step.tab}']", "aria-selected") == "true"
        if step.section and not step.tab:  # a section of no tabs (Class tools) is open
            assert page.get_attribute(f"#deep-views > .tab-wrapper [data-tab-id='{step.section}']",
                                      "aria-selected") == "true"
        if step.name in ("generate", "tokens", "token", "temperature", "cache", "game"):
            wait_in_room(page, step.target)  # the control itself, above the card
        if step.name in ("generate", "token") or (step.name == "temperature" and page.size_name == "desktop"):
            wait_in_room(page, "#token-stream", whole=False)  # a step about the stream keeps it in view
        if step.name == "generate":  # do what the step says
            assert page.locator("#start-here [data-act=back]").is_disabled()
            generate_and_wait(page)
            wait_in_room(page, "#token-stream")  # the answer, whole, in the window above the card
        elif step.name == "token":
            page.click("#token-stream [data-step='2']")
            page.wait_for_selector("#token-stream [data-step='2'].selected")
        elif step.name == "attention":
            page.wait_for_selector("#att-grid .js-plotly-plot", state="visible")
            in_sight(page, f"guide-attention-{lang}", readme=lang == "en")
        elif step.name == "cache":
            page.wait_for_selector("#cache-growth .js-plotly-plot", state="visible")
            page.click("#rerun-btn")  # its result comes under the button, where the card does not cover it
            page.wait_for_function("() => (document.querySelector('#compare-md')?.innerText ?? '').length > 40")
            wait_in_room(page, "#compare-md")
            in_sight(page, f"guide-cache-{lang}")
        elif step.name == "fork":
            fork_the_head_that_matters(page, lang)
        elif step.name == "game":
            in_sight(page, f"guide-game-{lang}")
        box = card.bounding_box()  # the card sits inside the window, over the page
        assert 0 <= box["x"] and box["x"] + box["width"] <= page.viewport_size["width"]
        assert box["y"] + box["height"] <= page.viewport_size["height"]
        assert_fits(page)
    assert page.inner_text("#start-here [data-act=next]") == t("guide_done", lang)
    in_sight(page, f"guide-last-{lang}")
    page.click("#start-here [data-act=back]")  # Back, then forward again
    page.wait_for_function("(n) => document.querySelector('#start-here').dataset.step === String(n)", arg=total - 1)
    highlighted(page, STEPS[-2].target)
    next_step(page, total)
    page.click("#start-here [data-act=next]")  # Finish: the path ends
    page.wait_for_function("() => document.querySelector('#start-here').dataset.step === ''")
    assert not card.is_visible() and page.locator(".pg-guide-target").count() == 0


def fork_the_head_that_matters(pg, lang: str) -> None:
    """The fork step names the head that adds most to the selected token (step 3, clicked before) of the run on
    screen, sets the lab's sliders to it, and its button forks the run without that head."""
    live = pg.locator("#start-here .pg-guide-live")
    live.wait_for(state="visible")
    layer, head = key_head_of_the_run(pg, 2)
    words = live.inner_text()
    assert f"{layer}.{head}" in words and t("lab_reads", lang, n=1, step=3) in words, words
    for slider, value in (("#lab-layer", layer), ("#lab-head", head)):
        pg.wait_for_function("([sel, v]) => document.querySelector(sel + ' input[type=number]').value === String(v)",
                             arg=[slider, value])
    in_sight(pg, f"guide-fork-{lang}")
    pg.click("#lab-ablate-head")
    wait_state(pg, "running", "done")
    wait_state(pg, "done")
    base.wait_text(pg, "#run-history", t("ablate_head", lang, layer=layer, head=head))


def projector_on(pg) -> bool:
    return pg.evaluate("() => document.body.classList.contains('pg-projector')")


def check_projected(pg) -> None:
    """Large type, the settings hidden (the prompt and its buttons stay), the live screen the page's width, nothing
    past the window."""
    assert projector_on(pg) and pg.is_checked("#projector input")
    for hidden in ("#model-select", "#decoding", "#live-settings", "#load-own", "#model-status"):
        assert not pg.locator(hidden).is_visible(), hidden
    assert pg.locator("#prompt textarea").is_visible() and pg.locator("#generate-btn").is_visible()
    size = pg.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#token-stream')).fontSize)")
    assert size >= (30 if pg.size_name == "desktop" else 22)
    width = pg.evaluate("() => document.querySelector('#token-output').getBoundingClientRect().width")
    assert width >= pg.viewport_size["width"] * 0.8
    assert_fits(pg)


@pytest.mark.parametrize("lang", LANGS)
def test_projector_mode_by_its_toggle_and_by_a_link(page, server, browser, lang):
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=8, lang=lang)
    toggle = page.locator("#projector")
    base.wait_text(page, "#projector", t("projector", lang))
    assert toggle.is_visible()
    assert not projector_on(page) and page.locator("#decoding").is_visible()
    page.click("#projector input")
    page.wait_for_function("() => document.body.classList.contains('pg-projector')")
    check_projected(page)
    shot(page, f"projector-{lang}", readme=lang == "en")
    page.click("#projector input")  # off again: the settings are back
    page.wait_for_function("() => !document.body.classList.contains('pg-projector')")
    assert page.locator("#decoding").is_visible() and page.locator("#model-select").is_visible()
    page.click("#projector input")
    page.wait_for_function("() => document.body.classList.contains('pg-projector')")
    generate_and_wait(page)  # the teacher still runs the prompt in projector mode
    # the copied link keeps the mode, and opens in it (running its prompt); so does `projector=1`
    page.click("#copy-link-btn")
    page.wait_for_function("() => (document.querySelector('#share-link textarea')?.value ?? '').includes('projector')")
    link = page.input_value("#share-link textarea")
    assert dict(parse_qsl(urlparse(link).query))["projector"] == "true"
    for address in (link, f"{server}?model={decoder_name()}&projector=1&lang={lang}"):
        other = new_page(browser, base.SIZES[page.size_name])
        other.size_name = page.size_name
        other.goto(address)
        other.wait_for_function("() => document.body.classList.contains('pg-projector')")
        if "prompt=" in address:
            wait_state(other, "done", "stopped", "error")
            assert other.locator("#token-stream .tok.gen").count() == 8
        check_projected(other)
        assert not other.js_errors, other.js_errors
        other.context.close()


def test_with_class_tools_open_a_run_leaves_the_views_undrawn_until_one_is_opened(desktop, server):
    """Class tools holds no view: a run made meanwhile is drawn by no view (before, the view last open was computed
    after every run, off screen); back in Watch, its view draws the new run."""
    open_app(desktop, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=6)
    desktop.wait_for_selector(DRAWN["watch"], state="visible")
    desktop.click("#teacher-tab-button")
    desktop.wait_for_selector("#game-view .pg-game", state="visible")
    desktop.fill("#prompt textarea", "Once upon a time")
    generate_and_wait(desktop)
    pending = t("view_pending", "en", n=2)
    desktop.wait_for_function("(words) => (document.querySelector('#step-caption')?.innerText ?? '').includes(words)",
                              arg=pending)
    desktop.click("#section-watch-button")
    desktop.wait_for_function("(words) => { const c = document.querySelector('#step-caption')?.innerText ?? '';"
                              " return c.length > 0 && !c.includes(words); }", arg=pending)
    desktop.wait_for_selector(DRAWN["watch"], state="visible")
