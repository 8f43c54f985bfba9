"""The app's one torch thread: calls and stream steps run there, results, errors and context come back,
and the app's real generation, loading and attention recomputation run their forward passes there."""

from __future__ import annotations

import contextvars
import threading

import gradio as gr
import pytest

from playground.app import torch_thread
from playground.app.settings import FIELDS, UISettings
from playground.ui import build_app
from tests.ui_fixtures import save_tiny_decoder

COLOUR = contextvars.ContextVar("colour", default="none")


def _where() -> str:
    return threading.current_thread().name


def test_a_call_runs_on_the_torch_thread_and_returns_its_result():
    assert not torch_thread.on_torch_thread()
    name = torch_thread.call(_where)
    assert name.startswith(torch_thread.NAME) and name != _where()
    assert torch_thread.call(lambda a, b=0: a + b, 2, b=3) == 5


def test_errors_come_back_to_the_caller():
    with pytest.raises(ZeroDivisionError):
        torch_thread.call(lambda: 1 / 0)


def test_the_callers_context_travels_with_the_call():
    COLOUR.set("blue")
    assert torch_thread.call(COLOUR.get) == "blue"


def test_a_nested_call_runs_in_place_instead_of_waiting_for_itself():
    assert torch_thread.call(lambda: torch_thread.call(_where)).startswith(torch_thread.NAME)


def test_every_step_of_a_stream_runs_there_and_closing_reaches_the_generator():
    closed = []

    def steps():
        try:
            for i in range(5):
                yield i, _where()
        finally:
            closed.append(_where())

    items = torch_thread.iterate(steps())
    first = [next(items) for _ in range(3)]
    assert [i for i, _ in first] == [0, 1, 2]
    assert all(name.startswith(torch_thread.NAME) for _, name in first)
    items.close()
    assert len(closed) == 1 and closed[0].startswith(torch_thread.NAME)
    assert [i for i, _ in torch_thread.iterate(steps())] == [0, 1, 2, 3, 4]


def test_the_decorator_keeps_generators_streaming():
    @torch_thread.runs_on_torch_thread
    def count(n):
        for _ in range(n):
            yield _where()

    @torch_thread.runs_on_torch_thread
    def plain():
        return _where()

    names = list(count(3))
    assert len(names) == 3 and all(n.startswith(torch_thread.NAME) for n in names)
    assert plain().startswith(torch_thread.NAME)


def test_the_apps_forward_passes_all_run_on_the_torch_thread(tmp_path):
    save_tiny_decoder(tmp_path / "weights" / "tiny-lm")
    app = build_app(tmp_path / "weights", tmp_path / "uploads")
    h = app.playground_handlers
    settings = UISettings(model="tiny-lm", prompt="hello", max_new_tokens=6, mode="greedy")
    request = gr.Request(session_hash="s", query_params={})
    lm = h.models.model_for("tiny-lm", settings.dtype, "s")  # loaded on the torch thread too
    seen: list[str] = []
    # on a block: batched decoding runs the blocks of every request together, not the model's own forward
    lm.model.blocks[0].register_forward_hook(lambda *_: seen.append(_where()))
    frames = list(h.stream.generate(request, 0.0, *[getattr(settings, f) for f in FIELDS]))
    run = h.sessions.get("s").current
    assert frames and run.finish_reason == "length" and len(run.path) == 6
    h.stream.attention_row([run.token, 3, "self", 0, "mean"])  # a layer the run did not record: recomputed
    h.stream.generate_text("tiny-lm", "hello", "max_new_tokens=3")
    assert len(seen) >= 6 + 1 + 1
    assert all(name.startswith(torch_thread.NAME) for name in seen), set(seen)
