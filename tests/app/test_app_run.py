"""The app core's Run without Gradio or a server: built from the engine's real events on a tiny checkpoint."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from playground.app.engine_stream import run_events
from playground.app.play import start_run
from playground.app.run import MAX_CACHED_LAYERS
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.checkpoints.loader import load_model
from playground.generation import GenerationConfig, full_attention, generate_all
from tests.ui_fixtures import save_tiny_seq2seq


@pytest.fixture(scope="module")
def s2s(tmp_path_factory):
    return load_model(save_tiny_seq2seq(tmp_path_factory.mktemp("w2") / "tiny.safetensors"))


def play(session: Session, lm, settings: UISettings, parent=None, stop_after: int | None = None, origin=None):
    """A run as the page makes it: started by the core, fed the engine's events, finished."""
    run, plan = start_run(session, lm, settings, parent, origin=origin)
    session.add_run(run)
    stop = threading.Event()
    for event in run_events(plan, stop):
        run.add_event(event, lm)
        if stop_after is not None and len(run.events) >= stop_after:
            stop.set()
    run.finish(lm)
    return run


def test_a_run_is_the_engines_result_token_for_token(lm):
    run = play(Session(), lm, UISettings(prompt="Hello", max_new_tokens=9, top_candidates=4))
    ref = generate_all(lm, lm.tokenize("Hello"), GenerationConfig(max_new_tokens=9, top_candidates=4))
    assert run.generated_ids == ref.token_ids and run.finish_reason == ref.finish_reason and not run.running
    result = run.as_result()
    assert result.token_ids == ref.token_ids and result.text == ref.text and result.prompt_ids == ref.prompt_ids
    assert [s.prob for s in result.path] == pytest.approx([s.prob for s in ref.path], rel=1e-5)
    assert len(run.compact) == len(run.path) == 9 and run.compact[3][1] == run.path[3].token_id
    assert run.stream_ids == run.generated_ids and run.mode == "greedy"


def test_beam_search_shows_the_engines_winner(lm):
    run = play(Session(), lm, UISettings(prompt="Hello", mode="beam", num_beams=3, max_new_tokens=7))
    cfg = GenerationConfig(max_new_tokens=7, num_beams=3, top_candidates=8)
    ref = generate_all(lm, lm.tokenize("Hello"), cfg)
    assert run.final is not None and run.final.token_ids == ref.sequences[0].token_ids
    assert run.generated_ids == ref.token_ids and run.mode == "beam"
    assert [c[1] for c in run.compact] == ref.token_ids  # the page's copy follows the winner too


def test_step_is_always_inside_the_path(lm):
    run = play(Session(), lm, UISettings(prompt="Hi", max_new_tokens=5))
    assert run.step(None) == 4 and run.step(2) == 2 and run.step(99) == 4 and run.step(-3) == 0


def test_attention_rows_recorded_and_computed_match_the_whole_sequence(lm):
    run = play(Session(), lm, UISettings(prompt="Hi there", max_new_tokens=6))
    assert run.live_layer == lm.config.n_layers - 1
    full = full_attention(lm, run.prompt_ids, run.generated_ids)["self"]  # (L, h, T, T)
    for layer in range(lm.config.n_layers):  # the last layer was recorded live; the first is computed
        for step in (0, 3, 5):
            q = len(run.prompt_ids) - 1 + step
            row = run.attention_row(lm, "self", layer, step)
            # float32 softmax rows summing to 1 over a few dozen keys, two code paths: rounding only
            np.testing.assert_allclose(row, full[layer, :, q, : q + 1], atol=1e-5)
    assert list(run.maps) == [0]  # only the computed layer was kept


def test_whole_run_maps_are_kept_for_a_few_layers_only(lm):
    run = play(Session(), lm, UISettings(prompt="Hi", max_new_tokens=3, attention=False))
    for layer in (0, 1, 0):
        run.attention_maps(lm, "self", layer)
    assert len(run.maps) <= MAX_CACHED_LAYERS and list(run.maps) == [1, 0]  # the newest asked for last


def test_a_stopped_run_says_so_and_keeps_what_it_made(lm):
    run = play(Session(), lm, UISettings(prompt="Hello", max_new_tokens=30), stop_after=3)
    assert run.finish_reason == "stopped" and 3 <= len(run.path) < 30


def test_labels_name_every_query_and_key(lm, s2s):
    run = play(Session(), lm, UISettings(prompt="Hi", max_new_tokens=3))
    q, k = run.labels("self")
    assert q == k == run.prompt_texts + [s.token_text for s in run.path]
    s2 = play(Session(), s2s, UISettings(model="tiny-seq2seq", prompt="March 5, 2021", max_new_tokens=4))
    q, k = s2.labels("cross")
    assert k == s2.prompt_texts and q == s2.prefix_texts + [s.token_text for s in s2.path]
    assert s2.labels("encoder") == (s2.prompt_texts, s2.prompt_texts)
    row = s2.attention_row(s2s, "cross", 0, 2)
    assert row.shape == (s2s.config.n_heads, len(s2.prompt_ids))


def test_a_branch_is_a_run_that_continues_its_parent(lm):
    session = Session()
    parent = play(session, lm, UISettings(prompt="Hello", max_new_tokens=8))
    other = next(c.token_id for c in parent.path[3].candidates if c.token_id != parent.path[3].token_id)
    child = play(session, lm, parent.settings, parent=(parent, 3, [other]))
    assert child.branch_of == (parent.number, 3) and child.forced == [other]
    assert child.stream_ids[:4] == parent.generated_ids[:3] + [other]
    direct = generate_all(lm, parent.prompt_ids + parent.generated_ids[:3] + [other], GenerationConfig(max_new_tokens=8))
    assert child.generated_ids == direct.token_ids
    # the run no longer on screen lets go of its derived passes; what it recorded stays for a pick from the history
    assert parent.analysis is None and not parent.maps and all(s.capture.residual is not None for s in parent.path)


def test_the_core_never_imports_gradio():
    code = ("import sys; import playground.app.run, playground.app.session, playground.app.play, "
            "playground.app.engine_stream, playground.app.describe, playground.app.words; "
            "print('gradio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_core_and_the_library_never_import_gradio():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "playground"
    floors = ("app", "models", "checkpoints", "generation", "analysis", "viz", "train")
    offenders = [str(p.relative_to(root)) for floor in floors for p in (root / floor).rglob("*.py")
                 if any(line.strip().startswith(("import gradio", "from gradio"))
                        for line in p.read_text(encoding="utf-8").splitlines())]
    assert offenders == []
