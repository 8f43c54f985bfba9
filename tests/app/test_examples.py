"""Issue 44, point 5: the example prompt follows the page's language where the locale files have its twin."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from playground.app.examples import in_language, switched
from playground.checkpoints.card import CARD_FILE
from tests.ui_fixtures import save_tiny_decoder

QUESTION = "What is the capital of France?"


def test_a_card_example_with_a_twin_is_read_in_the_page_language():
    assert in_language(QUESTION, "zh") == "法国的首都是哪里?" and in_language(QUESTION, "en") == QUESTION
    assert in_language("Question: What is the capital of France?\nAnswer:", "zh") == "问题:法国的首都是哪里?\n回答:"
    assert in_language("The Python interpreter", "zh") == "The Python interpreter"  # no twin: as it is


def test_a_switch_swaps_only_the_example_never_a_typed_prompt():
    assert switched(QUESTION, QUESTION, "zh") == "法国的首都是哪里?"
    assert switched("法国的首都是哪里?", QUESTION, "en") == QUESTION
    assert switched(QUESTION, QUESTION, "en") is None  # already in the page's language
    assert switched("My own question", QUESTION, "zh") is None


@pytest.fixture(scope="module")
def handlers(tmp_path_factory):
    from playground.ui import build_app

    weights = tmp_path_factory.mktemp("weights")
    folder = save_tiny_decoder(weights / "chatty")
    (folder / CARD_FILE).write_text(json.dumps({"description": {"en": "a test model"}, "example_prompt": QUESTION}))
    return build_app(weights, tmp_path_factory.mktemp("uploads")).playground_handlers


def test_loading_in_chinese_and_switching_languages_follow_the_example(handlers):
    request = gr.Request(session_hash="zh-tab")
    updates = handlers.models.load("chatty", "float32", "zh", request)
    prompt = next(u for u in updates.values() if isinstance(u, dict) and u.get("value") in (QUESTION, "法国的首都是哪里?"))
    assert prompt["value"] == "法国的首都是哪里?"  # a 中文 page loads the model with its 中文 example
    _, _, box, _ = handlers.models.refresh("en", "法国的首都是哪里?", request)
    assert box["value"] == QUESTION
    _, _, box, _ = handlers.models.refresh("zh", "Why is the sky blue?", request)
    assert "value" not in box  # the visitor's own prompt stays
