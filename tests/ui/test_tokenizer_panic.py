"""A tokenizer that panics is one line, and the tab stays usable (issue 42, row 8).

An upload whose tokenizer.json splits on a backtracking pattern made the `tokenizers` Rust code panic on the prompt
`"a"*60 + "!"`. The panic (pyo3's PanicException) is a BaseException, past every `except Exception`: before, that
tab's Generate never ended and the tokenizer view answered a raw 500 with Rust's message.
"""

from __future__ import annotations

import json

import gradio as gr
import pytest

from playground.app.settings import WIDGETS, UISettings
from playground.ui import build_app
from tests.tokenizer_surgery import PANIC_PROMPT, backtracking_split
from tests.ui_fixtures import save_tiny_decoder

LINE = {"en": "this tokenizer could not read the prompt: change or shorten it, or pick another model",
        "zh": "这个分词器无法读取这段提示词:请修改或缩短提示词,或换一个模型"}


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    backtracking_split(save_tiny_decoder(weights / "tiny-lm"))
    return build_app(weights, tmp_path_factory.mktemp("uploads")).playground_handlers


def request(session: str) -> gr.Request:
    return gr.Request(session_hash=session, query_params={})


def generate(h, session: str, prompt: str, lang: str = "en") -> list[tuple]:
    settings = UISettings(model="tiny-lm", prompt=prompt, max_new_tokens=4, lang=lang)
    return list(h.stream.generate(request(session), 0.0, *[getattr(settings, f) for f in WIDGETS]))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_generate_ends_with_one_line_and_the_tab_runs_again(h, lang):
    tab = f"panic-{lang}"
    h.models.load("tiny-lm", "float32", lang, request(tab))
    screen = generate(h, tab, PANIC_PROMPT, lang)[-1][0]
    assert screen["status"] == {"state": "error", "error": LINE[lang]} and screen["error"] == LINE[lang]
    assert "Onig" not in json.dumps(screen, ensure_ascii=False)  # Rust's own words stay in the log
    screen = generate(h, tab, "Hello there", lang)[-1][0]  # the same tab, the next run
    assert screen["status"]["state"] == "done" and screen["path"]


def test_the_tokenizer_view_shows_the_line_and_reads_the_next_prompt(h):
    h.models.load("tiny-lm", "float32", "en", request("view"))
    for lang in ("en", "zh"):
        page = h.teacher.prompt_tokens(PANIC_PROMPT, False, lang, request("view"))
        assert LINE[lang] in page and "Onig" not in page
    assert "What the model reads: 5 tokens" in h.teacher.prompt_tokens("Hello", False, "en", request("view"))
