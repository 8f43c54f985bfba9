"""`/generate_text` drafts with `model:<name>` as the page does, or says why not (reliability round 5, row 13)."""

from __future__ import annotations

import pytest

from playground.app.play import play_script
from playground.checkpoints.loader import load_model
from playground.errors import PlaygroundError
from tests.ui_fixtures import save_tiny_decoder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("w")
    return {"tiny-lm": load_model(save_tiny_decoder(folder / "tiny-lm")),
            "other": load_model(save_tiny_decoder(folder / "other", seed=1))}


def lookup_in(models):
    def lookup(name: str, dtype: str, owner: str):
        if name not in models:
            raise PlaygroundError(f"no checkpoint called {name}")
        return models[name]
    return lookup


def test_a_script_drafts_with_a_second_model_like_the_page(models):
    """Round 5: `draft=model:<name>` was silently ignored by /generate_text (no note) while the page drafted."""
    lookup = lookup_in(models)
    plain = play_script(lookup, "tiny-lm", "Hello", "max_new_tokens=10", "script-api")
    drafted = play_script(lookup, "tiny-lm", "Hello", "max_new_tokens=10&draft=model:other&draft_tokens=3",
                          "script-api")
    assert drafted["token_ids"] == plain["token_ids"]  # greedy: the model's own tokens, whatever the drafter
    spec = drafted.get("speculation")
    assert spec is not None and plain["speculation"] is None
    assert spec["drafter"] == "model:other" and spec["draft_tokens"] == 3 and spec["used"]
    assert spec["proposed"] > 0 and 0 < spec["target_passes"] <= 10


def test_a_script_whose_draft_model_is_not_here_is_told_so(models):
    out = play_script(lookup_in(models), "tiny-lm", "Hello", "max_new_tokens=4&draft=model:gone", "script-api")
    assert any("the draft model gone is not available here" in n for n in out["notes"]), out["notes"]
    assert out["speculation"] is None
