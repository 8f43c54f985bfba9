"""What the server keeps on purpose (`playground.app.holdings`): its models, their precision copies and the tabs'
recorded runs, in the bytes each part already accounts for; and the log line a load test reads after SIGUSR1."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal

import gradio as gr
import pytest

from playground import variants
from playground.app.holdings import Holdings, holdings, parse, report_on_signal
from playground.app.settings import WIDGETS, UISettings
from playground.generation.events import held_bytes
from tests.ui_fixtures import tiny_lm_handlers


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    return tiny_lm_handlers(tmp_path_factory)


def test_holdings_are_the_models_copies_and_recorded_runs(h):
    variants.VARIANTS.clear()
    # (the prefix stores are the process's server's: other tests in this process may have left blocks there)
    # (so are the tokenizers' remembered token texts)
    empty = holdings(h.registry, h.sessions, prefixes=lambda: (0, 0), token_texts=lambda: (0, 0))
    assert dataclasses.replace(empty, heap_in_use=0, heap_free_kept=0, heap_mmapped=0) == Holdings(0, 0, 0, 0, 0, 0, 0)
    assert empty.total_bytes == 0  # the allocator's account is beside the total, not in it
    request = gr.Request(session_hash="holder")
    h.models.load("tiny-lm", "float32", "en", request)
    settings = UISettings(prompt="Hello", max_new_tokens=6)
    frames = list(h.stream.generate(request, 0.0, *[getattr(settings, f) for f in WIDGETS]))
    assert frames[-1][0]["status"]["state"] == "done"
    lm = h.models.model_for("tiny-lm", "float32", "holder")
    copy = variants.variant(lm, "int8")
    run = h.sessions.get("holder").current
    held = holdings(h.registry, h.sessions)
    assert (held.models, held.model_bytes) == (1, lm.resident_bytes) and lm.resident_bytes > 0
    assert (held.copies, held.copy_bytes) == (1, variants.copy_bytes(lm, "int8")) and copy.lm.resident_bytes > 0
    assert (held.tabs, held.runs, held.capture_bytes) == (1, 1, run.capture_bytes()) and held.capture_bytes > 0
    assert held.run_bytes == run.record_bytes() > 0  # the run's record: events, path, prompt
    assert held.total_bytes == (lm.resident_bytes + held.copy_bytes + run.capture_bytes() + run.record_bytes()
                                + held.prefix_bytes + held.token_text_bytes)
    run.drop_captures()  # what the memory budget frees first
    assert holdings(h.registry, h.sessions).capture_bytes == 0
    variants.VARIANTS.clear()


def test_what_gradio_keeps_per_tab_is_in_the_total(h):
    """Gradio's copy of each tab's state is kept on purpose: the total a load test subtracts from RSS counts it."""
    held = holdings(h.registry, h.sessions, tab_states=lambda: (3, 1_500_000))
    assert (held.tab_states, held.tab_state_bytes) == (3, 1_500_000)
    assert held.total_bytes == (held.model_bytes + held.copy_bytes + held.capture_bytes + held.run_bytes + 1_500_000
                                + held.prefix_bytes + held.token_text_bytes)
    assert f"total={held.total_bytes} " in held.line()


def test_the_log_line_reads_back_and_other_lines_do_not():
    held = Holdings(3, 1_234_567_890, 2, 98_765, 6, 41, 5_000_001, token_texts=10, token_text_bytes=11,
                    heap_in_use=7, heap_free_kept=8, heap_mmapped=9)
    assert parse("INFO playground.memory: " + held.line()) == held
    assert parse("INFO playground.app: offering tiny-lm") is None
    assert parse("INFO playground.memory: holding total=abc") is None


def test_sigusr1_logs_the_holdings(h, caplog):
    before = signal.getsignal(signal.SIGUSR1)
    try:
        assert report_on_signal(lambda: holdings(h.registry, h.sessions))
        with caplog.at_level(logging.INFO, logger="playground.memory"):
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before the next bytecode here
        lines = [parse(r.getMessage()) for r in caplog.records if r.name == "playground.memory"]
        assert lines == [holdings(h.registry, h.sessions)]
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_holdings_count_the_models_kept_captured_steps_exactly(tmp_path):
    """`app.py --compile` (issue 42, row 4): a kept decode step (its rows' caches, tokens, seen tokens, knobs,
    edits) was outside every count. Now the holdings line counts it, byte for byte its own tensors, in the
    total, and the scheduler's admission budget takes it too."""
    import playground
    from playground.app.registry import ModelRegistry
    from playground.app.session import Sessions
    from playground.generation import GenerationConfig, generate_all
    from playground.generation.batch import Scheduler
    from tests.ui_fixtures import save_tiny_decoder

    save_tiny_decoder(tmp_path / "tiny-lm")
    registry = ModelRegistry(loader=lambda path, dtype: playground.load_model(path, dtype=dtype, compile="eager"))
    lm = registry.get(tmp_path / "tiny-lm")
    alone = dict(token_texts=lambda: (0, 0))  # the run remembers its token texts too: not this test's count
    before = holdings(registry, Sessions(), **alone)
    assert (before.steps, before.step_bytes) == (0, 0)
    cfg = GenerationConfig(max_new_tokens=4, temperature=0.7, seed=1, top_candidates=5)
    assert generate_all(lm, "Hello", cfg).decoding["captured"]
    held = holdings(registry, Sessions(), **alone)
    [(step, _)] = lm.captured._steps.values()
    own = sum(t.numel() * t.element_size() for t in step.buffers(recurse=False))  # not the model's own buffers
    assert (held.steps, held.step_bytes) == (1, own) and own > 0
    assert held.total_bytes == before.total_bytes + own
    assert parse(held.line()) == held
    from playground.generation.plan import plan

    m = Scheduler(lm).submit(plan(lm, "Hello", cfg)).memory  # one such run's peak
    # room for two runs if the step were not counted, for the step and one run when it is
    scheduler = Scheduler(lm, memory_budget=2 * lm.resident_bytes + max(2 * m, own + m))
    tickets = [scheduler.submit(plan(lm, "Hello", cfg)) for _ in range(2)]
    scheduler.step()
    assert len(scheduler.running) == 1 and list(scheduler.waiting) == tickets[1:]
    while scheduler.busy():
        scheduler.step()
    assert all(t.drain() for t in tickets)


def test_live_states_whole_values_are_counted(h):
    """`live_state` keeps a run's whole live-screen value per run version (up to about 1 MB for 1,024 tokens, four
    runs' at once): the holdings line counts them, in the total, as kept."""
    request = gr.Request(session_hash="screen")
    h.models.load("tiny-lm", "float32", "en", request)
    settings = UISettings(prompt="Hello", max_new_tokens=8)
    list(h.stream.generate(request, 0.0, *[getattr(settings, f) for f in WIDGETS]))
    run = h.sessions.get("screen").current
    before = holdings(h.registry, h.sessions, live_values=h.stream.live_values)
    value = h.stream.live_state([run.token])
    assert value["run"] == run.token and h.stream.live_state([run.token]) is value  # kept: the same value again
    held = holdings(h.registry, h.sessions, live_values=h.stream.live_values)
    assert held.live_values == before.live_values + 1
    assert held.live_value_bytes - before.live_value_bytes == held_bytes(value) > len(run.path) * 50
    assert held.total_bytes - before.total_bytes == held_bytes(value)
    assert parse(held.line()) == held
    relabelled = h.stream.relabelled_value("en", request)  # a language switch's redraw: the kept value, not another
    assert relabelled["relabel"] and relabelled["path"] is value["path"]
    assert h.stream.live_values() == (held.live_values, held.live_value_bytes)


def test_the_tokenizers_remembered_token_texts_are_counted(h):
    """Each tokenizer remembers up to `TOKEN_TEXTS_KEPT` token texts (about 1 MB): the holdings line counts them, in
    the total, each text and id once."""
    import sys

    from playground import loaded

    lm = h.models.model_for("tiny-lm", "float32", "holder")
    before = loaded.token_texts_held()
    fresh = [i for i in range(lm.config.vocab_size) if i not in loaded._TOKEN_TEXTS.get(lm.tokenizer, {})][:40]
    texts = lm.token_texts(fresh)
    count, size = loaded.token_texts_held()
    assert count == before[0] + len(fresh)
    grown = sum(sys.getsizeof(i) + sys.getsizeof(text) for i, text in zip(fresh, texts))
    assert grown <= size - before[1] <= grown + sys.getsizeof(loaded._TOKEN_TEXTS[lm.tokenizer])  # and the dict grew
    held = holdings(h.registry, h.sessions)
    assert (held.token_texts, held.token_text_bytes) == (count, size)
    assert f"token_text_bytes={size} " in held.line() and parse(held.line()) == held
