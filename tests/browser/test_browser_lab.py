"""The causal lab in real Chromium at 1440×900 and 400×850 (and in 中文): ablate a head and watch the fork
stream beside the original with its divergence panel, the head sweep, steering from a contrast pair,
both reopened from their links, and a figure exported as SVG. The shipped tiny-lm keeps it fast."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlparse

import pytest

from tests.browser import test_browser as base
from tests.browser import test_browser_paths as paths
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

pytestmark = pytest.mark.browser
server, browser, page, desktop = base.server, base.browser, base.page, base.desktop
smollm2_server = paths.smollm2_server
PROMPT = "The Python interpreter"


def link_of(page) -> str:
    return base.copied_link(page)


def set_slider(page, elem_id: str, value: float) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def open_lab(page, lang: str = "en") -> None:
    open_tab(page, "因果实验室" if lang == "zh" else "Causal lab")
    page.wait_for_selector("#lab-attribution-plot .js-plotly-plot")  # the lab draws its figures on opening


def fork_and_watch(page, button: str) -> None:
    """Press a fork button and watch the new run stream (the pace keeps it on screen) and end."""
    # Every state the status line takes, in order, as it takes it (an observer misses none, where polling on a
    # loaded machine did: it once saw the fork's 'queued' and 'done' and never its short 'running')
    page.evaluate("() => { const status = document.querySelector('#gen-status');"
                  " window.__before = document.querySelector('#token-stream').firstChild;"
                  " window.__states = [status?.dataset.state]; window.__watch?.disconnect();"
                  " window.__watch = new MutationObserver((records) => { for (const r of records)"
                  " if (r.type === 'attributes' && r.target.id === 'gen-status') window.__states.push(r.oldValue);"
                  " window.__states.push(document.querySelector('#gen-status')?.dataset.state); });"
                  " window.__watch.observe(document.body, {attributes: true, attributeFilter: ['data-state'],"
                  " attributeOldValue: true, childList: true, subtree: true}); }")
    page.click(button)
    page.wait_for_function("() => document.querySelector('#token-stream').firstChild !== window.__before")
    # The stream can be cleared while the status still reads the previous run's "done": wait for the fork's own
    # end, a "done" after a state of the fork's (queued or running).
    try:
        page.wait_for_function("() => { const s = window.__states; const i = s.findIndex((x, n) => n > 0 &&"
                               " ['queued', 'waiting', 'running'].includes(x)); return i > 0 && s.slice(i).includes('done'); }")
    except Exception:  # Playwright's timeout: say what the watcher saw (a CI log is all there is to read)
        raise AssertionError(f"the fork was not seen running then done: {page.evaluate('() => window.__states')}") \
            from None
    wait_state(page, "done")
    page.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current .pg-edit")


def branch_rows(page) -> list[str]:
    return page.evaluate("() => Array.from(document.querySelectorAll('.pg-branchrow')).map(e => e.innerText)")


def test_ablating_a_head_forks_a_live_run_with_its_divergence_and_the_link_reopens_it(page, browser, server):
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=16, pace_ms=60)
    original = tokens(page)
    open_tab(page, "All heads")  # the head picked there is the one the lab ablates
    wait_text(page, "#att-heat", "layer")
    set_slider(page, "att-layer", 1)
    set_slider(page, "att-head", 2)
    open_lab(page)
    wait_text(page, "#lab-divergence-md", "This run has no edit")
    assert page.input_value("#lab-layer input[type=number]") == "1"
    assert page.input_value("#lab-head input[type=number]") == "2"
    fork_and_watch(page, "#lab-ablate-head")
    rows = branch_rows(page)
    assert len(rows) == 2 and "ablate head 1.2" in rows[1] and "ablate" not in rows[0]
    wait_text(page, "#lab-divergence-md", "Compared with run 1")
    md = page.inner_text("#lab-divergence-md")
    assert "ablate head 1.2" in md and "KL" in md and "rank" in md
    page.wait_for_selector("#lab-divergence-plot .js-plotly-plot", state="visible")
    edited = tokens(page)
    # Why this token: the attribution figure of the selected step, and "why A and not B".
    page.locator("#lab-versus input").check()
    wait_text(page, "#lab-attribution-plot", "and not")
    # The sweep: every head of layer 1, ranked by what it costs the chosen token.
    page.click("#lab-sweep-btn")
    wait_text(page, "#lab-sweep-md", "loses")
    page.wait_for_selector("#lab-sweep-plot .js-plotly-plot", state="visible")
    assert_fits(page)
    shot(page, "lab-ablate", readme=True)
    query = dict(parse_qsl(urlparse(link := link_of(page)).query))
    assert query["edits"] and query["prompt"] == PROMPT
    other = new_page(browser, page.viewport_size)
    other.goto(link)  # nothing pressed: the plain run, then the edited one beside it
    other.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current .pg-edit")
    wait_state(other, "done")
    assert tokens(other) == edited and len(branch_rows(other)) == 2
    assert original != edited or "same" in md
    other.context.close()


def test_steering_from_a_contrast_pair_and_its_link(page, browser, server):
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=16, pace_ms=60)
    open_lab(page)
    page.fill("#lab-positive textarea", "I love this")
    page.fill("#lab-negative textarea", "I hate this")
    set_slider(page, "lab-steer-layer", 2)
    set_slider(page, "lab-scale", 8)
    fork_and_watch(page, "#lab-steer-btn")
    wait_text(page, "#lab-steer-md", "typically")  # the vector's words come with the redraw after the run
    steer_md = page.inner_text("#lab-steer-md")
    assert "norm" in steer_md and "typically" in steer_md
    assert "steer after block 2: 8 ×" in branch_rows(page)[1]
    wait_text(page, "#lab-divergence-md", "Compared with run 1")
    steered = tokens(page)
    assert_fits(page)
    shot(page, "lab-steer", readme=True)
    other = new_page(browser, page.viewport_size)
    other.goto(link_of(page))
    other.wait_for_selector(".pg-branches:not([hidden]) .pg-branchrow.current .pg-edit")
    wait_state(other, "done")
    assert tokens(other) == steered
    other.context.close()


def test_the_lab_in_chinese_and_a_figure_exported_as_svg(desktop, server):
    page = desktop
    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=12, pace_ms=60, lang="zh")
    open_lab(page, "zh")
    set_slider(page, "lab-layer", 2)
    fork_and_watch(page, "#lab-ablate-mlp")
    assert "消融第 2 层的 MLP" in branch_rows(page)[1]
    wait_text(page, "#lab-divergence-md", "对比对象是第 1 次运行")
    assert "KL" in page.inner_text("#lab-divergence-md")
    shot(page, "lab-zh", readme=True)
    plot = page.locator("#lab-divergence-plot .js-plotly-plot")
    plot.hover()
    with page.expect_download() as download:
        plot.locator(".pg-svg-btn").click()
    saved = download.value
    assert saved.suggested_filename.endswith(".svg")
    text = open(saved.path(), encoding="utf-8").read()
    assert text.lstrip().startswith("<svg") and "KL" in text
    assert plot.locator(".modebar-btn[data-title='下载为 SVG']").count() == 1


def test_the_lab_lesson_walks_through_an_ablation_and_a_steering(page, server):
    from tests.browser.test_browser import _open_lesson

    open_app(page, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=8)
    text = _open_lesson(page, "Why this token won: the lab worked through")
    assert "Tokyo" in text and "I'm delighted to know that!" in text and "parts sum to" in text
    page.wait_for_selector("#lesson-plot-1 .js-plotly-plot", state="visible")
    assert_fits(page)
    shot(page, "lesson-lab", readme=True)


@pytest.mark.slow
def test_on_smollm2_ablating_head_23_4_lowers_paris_without_changing_the_answer(desktop, smollm2_server):
    """The lesson's first example in the page itself, on the real model (screenshot for the README)."""
    page = desktop
    page.goto(smollm2_server + "?model=SmolLM2-135M-Instruct&prompt=What+is+the+capital+of+France%3F&max_new_tokens=12")
    page.wait_for_function("() => /Loaded/.test(document.querySelector('#model-status')?.innerText ?? '')",
                           timeout=300_000)
    wait_state(page, "done")
    assert "".join(tokens(page)).startswith("The capital of France is Paris.")
    open_tab(page, "All heads")
    wait_text(page, "#att-heat", "layer")  # the tab's first draw gives the sliders the model's range
    set_slider(page, "att-layer", 23)
    set_slider(page, "att-head", 4)
    open_lab(page)
    fork_and_watch(page, "#lab-ablate-head")
    page.click("#token-stream [data-step='5']")  # " Paris"
    wait_text(page, "#lab-divergence-md", "At step 6, the original chose “ Paris” with probability 0.951")
    md = page.inner_text("#lab-divergence-md")
    assert "0.634" in md and "the edit moved the probabilities, not the choices" in md
    page.wait_for_selector("#lab-attribution-plot .js-plotly-plot", state="visible")
    shot(page, "lab-smollm2", readme=True)


def test_a_fork_keeps_the_selected_step_and_the_lab_names_the_run_it_reads(desktop, server):
    """Select step 4, ablate a head and fork: the screen stays at step 4 (it jumped to the last step), and
    "Why this token" explains step 4 of run 2, saying so."""
    open_app(desktop, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=10, pace_ms=40)
    desktop.click("#token-stream .tok.gen[data-step='3']")
    wait_text(desktop, ".pg-stepno", "Step 4 of")
    open_lab(desktop)
    wait_text(desktop, "#lab-attribution-md", "In run 1 (no edit), step 4:")
    fork_and_watch(desktop, "#lab-ablate-head")
    assert desktop.get_attribute("#token-stream .tok.gen.selected", "data-step") == "3"
    assert "Step 4 of" in desktop.inner_text(".pg-stepno")
    wait_text(desktop, "#lab-attribution-md", "In run 2 (ablate head 0.0), step 4:")
    wait_text(desktop, "#lab-divergence-md", "In run 2 (ablate head 0.0), step 4:")
    shot(desktop, "lab-fork-keeps-step")


@base.needs_defaults
def test_the_lab_switches_between_the_edited_run_and_its_original_and_patches_from_another_prompt(desktop, server):
    """Every lab result names its run and a switch reads the original instead; patching from another prompt of
    the same length forks the run as a branch with its divergence."""
    open_app(desktop, server, model=decoder_name(), prompt=PROMPT, max_new_tokens=10, pace_ms=40)
    desktop.click("#token-stream .tok.gen[data-step='3']")
    open_lab(desktop)
    wait_text(desktop, "#lab-attribution-md", "In run 1 (no edit), step 4:")
    assert not desktop.is_visible("#lab-run")  # a plain run: nothing to switch to
    fork_and_watch(desktop, "#lab-ablate-head")
    wait_text(desktop, "#lab-attribution-md", "In run 2 (ablate head 0.0), step 4:")
    desktop.wait_for_selector("#lab-run", state="visible")
    desktop.locator("#lab-run label").nth(1).click()  # "Run 1, its original"
    wait_text(desktop, "#lab-attribution-md", "In run 1 (no edit), step 4:")
    assert "In run 2 (ablate head 0.0), step 4:" in desktop.inner_text("#lab-divergence-md")  # the pair's
    shot(desktop, "lab-switch-original")
    desktop.locator("#lab-run label").nth(0).click()
    wait_text(desktop, "#lab-attribution-md", "In run 2 (ablate head 0.0), step 4:")
    desktop.fill("#lab-patch-prompt textarea", "The Python program")  # tiny-lm: 3 tokens, as the run's
    set_slider(desktop, "lab-patch-layer", 1)
    fork_and_watch(desktop, "#lab-patch-btn")
    wait_text(desktop, "#lab-patch-md", "position 2")  # −1: where the prompts differ (“ interpreter” / “ program”)
    assert "patch the residual after block 1 at position 2" in branch_rows(desktop)[-1]
    wait_text(desktop, "#lab-divergence-md", "In run 3 (ablate head 0.0; patch the residual after block 1 at position 2)")
    assert desktop.is_visible("#lab-divergence-plot")
    shot(desktop, "lab-patch")
