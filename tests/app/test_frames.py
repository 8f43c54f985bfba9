"""What the live screen receives: small, JSON-ready values made from a run."""

from __future__ import annotations

import json

import numpy as np
import pytest

import playground
from playground.app import frames
from playground.app.run import Run
from playground.app.session import LiveView
from playground.app.settings import UISettings
from playground.generation import GenerationConfig, generate_all
from tests.ui_fixtures import save_tiny_decoder


def test_heads_offered_are_the_ones_that_mean_something():
    assert frames.head_choices(4, 4) == ["mean", "max", "0", "1", "2", "3"]  # MHA: no KV groups
    assert frames.head_choices(4, 2)[-2:] == ["group:0", "group:1"]  # GQA: two groups of two
    assert frames.head_choices(3, 1)[-1] == "group:0"  # MQA


def test_reducing_heads():
    w = np.arange(24, dtype=float).reshape(4, 6)
    np.testing.assert_allclose(frames.reduce_heads(w, "mean", 2), w.mean(0))
    np.testing.assert_allclose(frames.reduce_heads(w, "max", 2), w[3])
    np.testing.assert_allclose(frames.reduce_heads(w, "group:1", 2), w[2:4].mean(0))
    np.testing.assert_allclose(frames.reduce_heads(w, "2", 2), w[2])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    directory = save_tiny_decoder(tmp_path_factory.mktemp("w") / "tiny")
    lm = playground.load_model(directory)
    cfg = GenerationConfig(max_new_tokens=5, capture_attention=True, attention_layers=(1,), top_candidates=4,
                           temperature=0.8, top_k=3, seed=0)
    result = generate_all(lm, lm.tokenize("Hi"), cfg)
    state = Run(token="t" * 24, number=1, owner="test", settings=UISettings(), cfg=cfg, kind="decoder",
                     prompt_ids=result.prompt_ids, prompt_texts=lm.token_texts(result.prompt_ids),
                     prefix_ids=result.decoder_prefix, live_layer=1, events=result.steps, path=result.path,
                     finish_reason="length")
    return lm, state


META = {"name": "tiny", "kind": "decoder", "layers": 2, "heads": 4, "kv_heads": 2,
        "head_choices": frames.head_choices(4, 2)}


def test_a_frame_is_small_json_with_the_newest_attention_row(run):
    lm, state = run
    value = frames.live_value(state, LiveView(kind="self", layer=1, head="mean"), META, "en")
    json.dumps(value)
    assert value["stages"] == ["raw", "temperature", "top_k"]
    text, token_id, prob, cands, kv = frames.entries(value)[2]
    assert token_id == state.path[2].token_id and kv[0] == len(state.prompt_ids) + 2
    assert all(len(c[2]) == 3 for c in cands)  # one probability per stage
    removed = [c for c in cands if c[3] >= 0]
    assert removed and all(value["stages"][c[3]] == "top_k" for c in removed)  # top-3 of 4 candidates
    att = frames.attention(value)
    assert att["layer"] == 1 and len(att["row"]) == len(state.prompt_ids) + 4
    np.testing.assert_allclose(att["row"], state.path[4].capture.attention["self"][1].mean(0), atol=1e-3)
    assert frames.live_attention(state, 4, LiveView(kind="self", layer=0, head="mean"), META) is None  # not recorded
    assert value["status"]["state"] == "done" and value["status"]["n"] == 5
    assert [t for t, _ in value["head"]["prompt"]] == state.prompt_texts


def test_a_frame_carries_only_the_entries_the_page_lacks(run):
    """The whole value once, then each entry once: a frame from `start` holds the entries from there on and no
    head, the entries travel as one JSON text (Gradio sends a changed text whole), and folding the frames as the
    page does gives back the run's entries."""
    _, state = run
    view = LiveView(kind="self", layer=1, head="mean")
    whole = frames.live_value(state, view, META, "en")
    tail = frames.live_frame(state, view, META, "en", 3)
    assert "head" not in tail and "branches" not in tail and tail["from"] == 3
    assert isinstance(tail["path"], str) and frames.entries(tail) == json.loads(json.dumps(state.compact[3:]))
    assert len(json.dumps(tail)) < len(json.dumps(whole))
    assert frames.fold(frames.entries(whole)[:3], tail) == frames.entries(whole)
    assert frames.fold(["stale"] * 9, whole) == frames.entries(whole)  # a whole value replaces what the page held


def test_the_page_holds_what_was_sent_until_beam_search_rewrites_it():
    a, b, c = ["a"], ["b"], ["c"]
    assert frames.sent_until([], [a, b]) == 0
    assert frames.sent_until([a, b], [a, b, c]) == 2  # appended: the page holds both
    assert frames.sent_until([a, b, c], [a, ["b2"], ["c2"]]) == 1  # rewritten from the second entry on
    assert frames.sent_until([a, b, c], [a, b]) == 2  # cut (a Stop): nothing to drop before the end


def test_a_waiting_run_says_its_place_and_longest_wait():
    from playground.app.frames import waiting_value
    from playground.app.serving import Waiting

    value = {"run": "r1", "path": [], "status": {"state": "running", "n": 0, "seed": 7}}
    shown = waiting_value(value, Waiting(position=2, seconds=14))
    assert shown["status"] == {"state": "waiting", "n": 0, "seed": 7, "position": 2, "wait_s": 14}
    assert shown["run"] == "r1" and value["status"]["state"] == "running"  # the run's own value is untouched
