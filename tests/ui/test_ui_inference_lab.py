"""The inference lab's page handlers with the app built (no browser): the drafter list offers the loaded models of
the same vocabulary, and each fork button streams its branch beside the run on screen."""

from __future__ import annotations

import pytest

from playground.app.experiments import BY_NAME
from playground.app.settings import UISettings
from playground.ui import build_app
from tests.ui.test_ui import request, run
from tests.ui.test_ui_lab import press
from tests.ui_fixtures import save_tiny_decoder, save_tiny_seq2seq


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")
    save_tiny_decoder(root / "tiny-b", seed=1)  # the same tokenizer: a second model that can draft
    save_tiny_seq2seq(root / "tiny-seq2seq" / "model.safetensors")
    return build_app(root, tmp_path_factory.mktemp("uploads")).playground_handlers


def drafters(h, session: str) -> list[str]:
    """The Speculative decoding tab opened: the drafter list its view draws."""
    h.sessions.get(session).deep_tab = "speculative"
    return [v for _, v in h.views.redraw({}, request(session))["draft"]["choices"]]


def test_the_drafter_list_offers_loaded_models_of_the_same_vocabulary(h):
    run(h, UISettings(model="tiny-lm", prompt="Hello there", max_new_tokens=6), session="d1")
    listed = drafters(h, "d1")
    assert listed[:2] == ["", "ngram"] and "model:tiny-b" not in listed  # not loaded: not offered (nor loaded here)
    h.models.model_for("tiny-b", "float32", "d1")
    h.models.model_for("tiny-seq2seq", "float32", "d1")
    listed = drafters(h, "d1")
    assert "model:tiny-b" in listed and "model:tiny-seq2seq" not in listed and "model:tiny-lm" not in listed


KV_OFF = {"kv_window": 0, "kv_sink": 0, "kv_heavy": 0, "kv_dtype": "", "rope_scaling": ""}


@pytest.mark.parametrize("button, widgets, setting, off", [
    ("spec_fork", {"draft": "model:tiny-b", "draft_tokens": 3}, ("draft", "model:tiny-b"), {"draft": ""}),
    ("kvlab_fork", {**KV_OFF, "kv_window": 6, "kv_sink": 2}, ("kv_window", 6), KV_OFF),
    ("kvlab_fork", {**KV_OFF, "rope_scaling": "ntk:2"}, ("rope_scaling", "ntk:2"), KV_OFF),
    ("precision_fork", {"weight_precision": "int8"}, ("weight_precision", "int8"), {"weight_precision": "float32"}),
])
def test_each_fork_streams_its_branch_beside_the_run_and_generate_stays_plain(h, button, widgets, setting, off):
    session = f"f-{button}-{setting[0]}"
    settings = UISettings(model="tiny-lm", prompt="Hello there, how are", max_new_tokens=8)
    _, plain = run(h, settings, session=session)
    frames = press(h, button, session, **widgets)
    branch = h.sessions.get(session).current
    assert branch is not plain and getattr(branch.settings, setting[0]) == setting[1] and branch.origin == plain.number
    assert branch.finish_reason == "length" and len(branch.path) == 8
    assert frames[-1][0]["status"]["state"] == "done"
    if button == "spec_fork":
        assert branch.cfg.draft is h.models.model_for("tiny-b", "float32", session)
    refused = press(h, button, session, **off)
    assert len(refused) == 1 and h.sessions.get(session).current is branch  # one line, no run
    # Generate after a fork: a plain run of the left column, whatever the lab's widgets hold
    _, again = run(h, settings, session=session)
    cfg = again.cfg
    assert (cfg.draft, cfg.weight_precision, cfg.kv_window, cfg.kv_dtype, cfg.rope_scaling, cfg.interventions) == (
        None, None, None, None, None, ())
    assert again.generated_ids == plain.generated_ids and again.origin is None
    assert not any(e.is_on(again.settings) for e in BY_NAME.values())
