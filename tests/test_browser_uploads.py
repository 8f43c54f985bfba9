"""Checkpoints as visitors bring them, in real Chromium (issue 23): a transformers-5 folder with
chat_template.jinja is accepted by the file picker and loads with Chat; a folder without tokenizer is
told at upload how to prompt it; a link with a 300-character model name keeps its prompt."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pytest
from transformers import AutoTokenizer

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, DESKTOP, new_page, open_app, running_app, wait_text
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
