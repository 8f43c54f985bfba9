"""The app in a real browser: a server started here, headless Debian Chromium driven by Playwright.

Screenshots go to test-artifacts/; with PLAYGROUND_UPDATE_SCREENSHOTS=1 the panel screenshots are also
written to tests/screenshots/ (the README shows them).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.ui_fixtures import save_tiny_decoder

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
README_SHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
DEFAULTS = ("tiny-lm", "tiny-seq2seq")
WIDTH = 1280
TIMEOUT_MS = 120_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _have_defaults() -> bool:
    return all((REPO / "weights" / name).exists() for name in DEFAULTS)


needs_defaults = pytest.mark.skipif(not _have_defaults(),
                                    reason="default weights (weights/tiny-lm, weights/tiny-seq2seq) not merged yet")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """app.py in a subprocess on a free port, serving the default weights plus a tiny random decoder."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium)")
    weights = tmp_path_factory.mktemp("weights")
    for name in DEFAULTS:
        if (REPO / "weights" / name).exists():
            shutil.copytree(REPO / "weights" / name, weights / name)
    save_tiny_decoder(weights / "tiny-random")
    port = _free_port()
    log = open(tmp_path_factory.mktemp("log") / "server.log", "w+")
    # One torch thread: on 2 cores the server's OpenMP threads would otherwise spin against Chromium's
    # renderer, and a loaded machine then made streaming ~100x slower (a timeout seen under load).
    env = {**os.environ, "PYTHONPATH": str(REPO), "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(REPO / "app.py"), "--port", str(port), "--weights", str(weights)],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
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
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.seek(0)
    text = log.read()
    assert "Traceback" not in text, f"the server logged a traceback:\n{text[-3000:]}"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": WIDTH, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    yield pg
    ctx.close()


def decoder_name() -> str:
    return "tiny-lm" if _have_defaults() else "tiny-random"


def open_app(page, server: str, **params) -> None:
    page.goto(server + ("?" + urlencode(params) if params else ""))
    page.wait_for_selector("#model-card table", state="attached")  # the selected model is loaded
    wait_text(page, "#model-status", "Loaded")


def wait_text(page, selector: str, text: str) -> None:
    """Wait until the element exists and its text contains `text`."""
    page.wait_for_function("([sel, text]) => (document.querySelector(sel)?.innerText ?? '').includes(text)",
                           arg=[selector, text])


def generate_and_wait(page) -> str:
    page.click("#generate-btn")
    wait_text(page, "#gen-status", "Done")
    return page.inner_text("#token-output")


def generated_text(page) -> str:
    return page.evaluate(
        "() => Array.from(document.querySelectorAll('#token-output .tok[data-step]')).map(e => e.textContent).join('')"
        " || document.querySelector('#token-output').innerText")


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def shot(page, name: str, readme: str | None = None) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    if readme and os.environ.get("PLAYGROUND_UPDATE_SCREENSHOTS") == "1":
        README_SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(README_SHOTS / f"{readme}.png"), full_page=True)


def assert_fits(page) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= WIDTH, f"the page is {width} px wide in a {WIDTH}-px window"


def test_default_decoder_streams_tokens_progressively(page, server):
    if not _have_defaults():
        pytest.skip("default weights (weights/tiny-lm) not merged yet")
    open_app(page, server, model="tiny-lm", prompt="The Python interpreter", max_new_tokens=40, pace_ms=40)
    card = page.inner_text("#model-card")
    assert "2,016,960" in card and "RoPE" in card and "GQA" in card
    shot(page, "model-card", readme="model-card")
    page.evaluate("""() => { window.__counts = []; new MutationObserver(() => window.__counts.push(
        document.querySelectorAll('#token-output .tok[data-step]').length)).observe(
        document.querySelector('#token-output'), {subtree: true, childList: true}); }""")
    generate_and_wait(page)
    counts = sorted(set(page.evaluate("window.__counts")))
    final = page.locator("#token-output .tok[data-step]").count()
    assert final > 3
    intermediate = [c for c in counts if 0 < c < final]
    assert len(intermediate) >= 2, f"tokens arrived all at once: counts seen {counts}"
    assert_fits(page)
    shot(page, "generate", readme="generate")
    # Hover shows id and probability; a click selects the step in the inspector.
    title = page.locator("#token-output .tok[data-step='1']").get_attribute("title")
    assert "id" in title and "p =" in title
    open_tab(page, "Step inspector")
    page.click("#token-output .tok[data-step='2']")
    wait_text(page, "#step-caption", "Step 2")
    page.wait_for_selector("#funnel-plot .js-plotly-plot")
    shot(page, "step-inspector-greedy")
    open_tab(page, "KV cache")
    page.wait_for_selector("#cache-growth .js-plotly-plot")
    assert "2 · N_layers" in page.inner_text("#kv-stats")
    page.click("#rerun-btn")
    wait_text(page, "#compare-md", "Both runs")
    shot(page, "kv-cache", readme="kv-cache")
    open_tab(page, "Attention")
    page.wait_for_selector("#att-heat .js-plotly-plot")
    page.wait_for_selector("#att-grid .js-plotly-plot")
    assert_fits(page)
    shot(page, "attention", readme="attention")


@needs_defaults
def test_seq2seq_translates_a_date_with_cross_attention(page, server):
    open_app(page, server, model="tiny-seq2seq", prompt="March 5, 2021", max_new_tokens=16)
    assert "Source text" in page.inner_text("#prompt")
    generate_and_wait(page)
    assert "end-of-sequence" in page.inner_text("#gen-status")
    text = generated_text(page).replace("</s>", "").strip()
    assert text == "2021-03-05", f"the default seq2seq translated 'March 5, 2021' to {text!r}"
    open_tab(page, "Attention")
    page.wait_for_selector("#att-heat .js-plotly-plot")
    wait_text(page, "#att-heat", "cross-attention")
    # The large heatmap has token labels on both axes (source on x, generated on y).
    page.wait_for_function("() => document.querySelectorAll('#att-heat .xtick').length > 5 && "
                           "document.querySelectorAll('#att-heat .ytick').length > 5")
    page.wait_for_selector("#att-grid .js-plotly-plot")
    page.wait_for_selector("#att-summary .js-plotly-plot")
    assert_fits(page)
    shot(page, "seq2seq-cross-attention", readme="seq2seq-cross-attention")


@needs_defaults
@pytest.mark.parametrize("model, words", [("tiny-lm", "RoPE"), ("tiny-seq2seq", "Sinusoidal")])
def test_positional_encoding_panel_for_each_default(page, server, model, words):
    open_app(page, server, model=model)
    open_tab(page, "Positional encoding")
    wait_text(page, "#pe-md", words)
    page.wait_for_selector("#pe-plot-1 .js-plotly-plot")
    page.wait_for_selector("#pe-plot-2 .js-plotly-plot")
    assert_fits(page)
    shot(page, f"pe-{model}", readme=f"positional-{model}")


def test_beam_search_shows_beams(page, server):
    open_app(page, server, model=decoder_name(), prompt="Hello", mode="beam", num_beams=3, max_new_tokens=8)
    generate_and_wait(page)
    open_tab(page, "Step inspector")
    page.wait_for_selector("#beam-tree .js-plotly-plot")
    page.wait_for_selector("#beam-table .js-plotly-plot")
    assert "score" in page.inner_text("#beam-table")
    assert_fits(page)
    shot(page, "beam-search", readme="beam-search")


def test_stop_interrupts_a_long_generation(page, server):
    open_app(page, server, model=decoder_name(), prompt="Hello", max_new_tokens=400, pace_ms=100)
    page.click("#generate-btn")
    page.wait_for_function("() => document.querySelectorAll('#token-output .tok[data-step]').length >= 3")
    page.click("#stop-btn")
    wait_text(page, "#gen-status", "Stopped")
    n = page.locator("#token-output .tok[data-step]").count()
    time.sleep(1.5)
    assert page.locator("#token-output .tok[data-step]").count() == n < 400
    shot(page, "stop")
    # The app still works afterwards: a new run starts streaming again.
    page.click("#generate-btn")
    wait_text(page, "#gen-status", "Generating")
    page.click("#stop-btn")
    wait_text(page, "#gen-status", "Stopped")


def test_link_restores_settings_and_reproduces_the_seeded_output(page, browser, server):
    params = dict(model=decoder_name(), prompt="Once upon", mode="sample", temperature=0.9, top_k=20, top_p=0.9,
                  repetition_penalty=1.2, max_new_tokens=12, seed=7)
    open_app(page, server, **params)
    assert page.input_value("#prompt textarea") == "Once upon"
    assert page.input_value("#temperature input[type=number]") == "0.9"
    assert page.input_value("#top-k input[type=number]") == "20"
    assert page.input_value("#seed input") == "7"
    first = (generate_and_wait(page), generated_text(page))
    page.click("#copy-link-btn")
    page.wait_for_function("() => (document.querySelector('#share-link textarea')?.value ?? '').includes('seed=7')")
    link = page.input_value("#share-link textarea")
    assert page.url == link
    other = browser.new_context(viewport={"width": WIDTH, "height": 900}).new_page()
    other.set_default_timeout(TIMEOUT_MS)
    other.goto(link)
    wait_text(other, "#model-status", "Loaded")
    assert other.input_value("#repetition-penalty input[type=number]") == "1.2"
    second = (generate_and_wait(other), generated_text(other))
    assert second == first
    shot(other, "query-link")
    # The step inspector of a sampled run shows every stage of the pipeline and what each filter removed.
    open_tab(other, "Step inspector")
    other.wait_for_selector("#funnel-plot .js-plotly-plot")
    wait_text(other, "#funnel-plot", "top-p")
    assert_fits(other)
    shot(other, "step-inspector", readme="step-inspector")
    other.context.close()


def test_corrupt_upload_shows_an_error_and_the_app_still_works(page, server, tmp_path):
    open_app(page, server, model=decoder_name(), prompt="Hi", max_new_tokens=4)
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + b"\x00" * 64)
    page.set_input_files("#upload input[type=file]", str(bad))
    wait_text(page, "#model-status", "Upload refused")
    message = page.inner_text("#model-status")
    assert "model.safetensors" in message or "header" in message.lower()
    assert "Traceback" not in message and "\n" not in message.strip()
    assert f"Still using {decoder_name()}" in message
    # One line in the status, no red "Error" badges on the picker, the upload box or the status.
    badges = page.evaluate("""() => ['#model-select', '#upload', '#model-status'].flatMap(sel =>
        Array.from(document.querySelectorAll(sel + ' .error, ' + sel + ' .error-text'))).length""")
    assert badges == 0 and page.locator(".toast-body").count() == 0
    assert page.input_value("#model-select input").startswith(decoder_name())
    shot(page, "corrupt-upload", readme="corrupt-upload")
    generate_and_wait(page)
