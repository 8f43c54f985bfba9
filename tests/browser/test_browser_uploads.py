"""Checkpoints as visitors bring them, in real Chromium (issue 23): a transformers-5 folder with
chat_template.jinja is accepted by the file picker and loads with Chat; a folder without tokenizer is
told at upload how to prompt it; a link with a 300-character model name keeps its prompt."""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from transformers import AutoTokenizer

from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS, DESKTOP, new_page, open_app, running_app, wait_text
from tests.ui_fixtures import save_tiny_decoder

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium)")
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with running_app(weights, tmp_path_factory.mktemp("log") / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def desktop(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, DESKTOP)
        yield page
        assert not page.js_errors, f"the page raised: {page.js_errors}"
        browser.close()


def test_a_transformers_5_folder_is_accepted_and_loads_with_chat(desktop, server, tmp_path):
    folder = save_tiny_decoder(tmp_path / "chat-model")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.chat_template = "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"
    tokenizer.save_pretrained(folder)
    assert (folder / "chat_template.jinja").exists()
    open_app(desktop, server, model="tiny-lm", prompt="Hi")
    assert not desktop.is_visible("#chat input")  # the shipped model has no template
    desktop.click("#load-own")
    desktop.set_input_files("#upload input[type=file]", [str(p) for p in sorted(folder.iterdir())])
    wait_text(desktop, "#model-status", "Uploaded and loaded")
    assert desktop.locator(".toast-body").count() == 0  # no "Invalid file type: chat_template.jinja"
    assert desktop.is_visible("#chat input") and desktop.is_checked("#chat input")
    assert "upload/llama-" in desktop.inner_text("#model-status")


def test_a_folder_without_tokenizer_says_how_to_prompt_it(desktop, server, tmp_path):
    folder = save_tiny_decoder(tmp_path / "ids-model")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    open_app(desktop, server, model="tiny-lm", prompt="Hi")
    desktop.click("#load-own")
    desktop.set_input_files("#upload input[type=file]", [str(p) for p in sorted(folder.iterdir())])
    wait_text(desktop, "#model-status", "token ids separated by commas")
    assert desktop.input_value("#prompt textarea") == "1, 2, 3"


def test_a_link_with_a_300_character_model_name_keeps_its_prompt(desktop, server):
    desktop.goto(server + "?" + urlencode({"model": "a" * 300, "prompt": "keep my prompt"}))
    wait_text(desktop, "#notes", "not a checkpoint name")
    wait_text(desktop, "#model-status", "Loaded")
    assert desktop.input_value("#prompt textarea") == "keep my prompt"
    assert "a" * 100 not in desktop.inner_text("#notes")


def new_status(page, before: str) -> str:
    """The model status line once it says something else than `before`, without a progress timer in front."""
    for _ in range(600):
        text = page.inner_text("#model-status")
        if text != before and not re.search(r"\d+(\.\d+)?s\n", text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"the status line still reads {text!r}")


def test_a_second_upload_in_the_same_tab_loads_the_new_checkpoint(desktop, server, tmp_path):
    """The file box is emptied after each upload, so the next one sends only its own files (it kept the
    first upload's, and two config.json were refused)."""
    open_app(desktop, server, model="tiny-lm", prompt="Hi")
    desktop.click("#load-own")
    said = []
    for i in range(2):
        folder = save_tiny_decoder(tmp_path / f"model-{i}", seed=i + 1)
        before = desktop.inner_text("#model-status")
        desktop.set_input_files("#upload input[type=file]", [str(p) for p in sorted(folder.iterdir())])
        said.append(new_status(desktop, before))
        assert "Uploaded and loaded" in said[-1], said[-1]
    assert said[0] != said[1]  # each upload under its own name
    desktop.wait_for_function("() => !document.querySelector('#upload .label-clear-button')")  # the box emptied
