"""The inference lab's page handlers with the app built (no browser): the drafter list offers the loaded models of
the same vocabulary, and each fork button streams its branch beside the run on screen."""

from __future__ import annotations

import pytest

from playground.app.settings import UISettings
from playground.ui import build_app
from tests.ui.test_ui import request, run
from tests.ui_fixtures import save_tiny_decoder, save_tiny_seq2seq


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")
    save_tiny_decoder(root / "tiny-b", seed=1)  # the same tokenizer: a second model that can draft
    save_tiny_seq2seq(root / "tiny-seq2seq" / "model.safetensors")
    return build_app(root, tmp_path_factory.mktemp("uploads")).playground_handlers


def test_the_drafter_list_offers_loaded_models_of_the_same_vocabulary(h):
    run(h, UISettings(model="tiny-lm", prompt="Hello there", max_new_tokens=6), session="d1")
    listed = [v for _, v in h.lab.draft_list("", request("d1"))["choices"]]
    assert listed[:2] == ["", "ngram"] and "model:tiny-b" not in listed  # not loaded: not offered (nor loaded here)
    h.models.model_for("tiny-b", "float32", "d1")
    h.models.model_for("tiny-seq2seq", "float32", "d1")
    listed = [v for _, v in h.lab.draft_list("ngram", request("d1"))["choices"]]
    assert "model:tiny-b" in listed and "model:tiny-seq2seq" not in listed and "model:tiny-lm" not in listed


@pytest.mark.parametrize("press, args, setting", [
    ("fork_draft", ("model:tiny-b", 3), ("draft", "model:tiny-b")),
    ("fork_kv", (6, 2, 0, "", ""), ("kv_window", 6)),
    ("fork_kv", (0, 0, 0, "", "ntk:2"), ("rope_scaling", "ntk:2")),
    ("fork_precision", ("int8",), ("weight_precision", "int8")),
])
def test_each_fork_streams_its_branch_beside_the_run(h, press, args, setting):
    session = f"f-{press}"
    _, plain = run(h, UISettings(model="tiny-lm", prompt="Hello there, how are", max_new_tokens=8), session=session)
    frames = list(getattr(h.lab, press)(*args, request(session)))
    branch = h.sessions.get(session).current
    assert branch is not plain and getattr(branch.settings, setting[0]) == setting[1]
    assert branch.finish_reason == "length" and len(branch.path) == 8
    assert frames[-1][0]["status"]["state"] == "done"
    if press == "fork_draft":
        assert branch.cfg.draft is h.models.model_for("tiny-b", "float32", session)
    refused = list(getattr(h.lab, press)(*(("", 4) if press == "fork_draft" else (0, 0, 0, "", "") if press == "fork_kv"
                                           else ("float32",)), request(session)))
    assert len(refused) == 1 and h.sessions.get(session).current is branch  # one line, no run
