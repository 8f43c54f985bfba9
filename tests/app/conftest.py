"""Fixtures the app-core tests share."""

from __future__ import annotations

import pytest

from playground.checkpoints.loader import load_model
from tests.ui_fixtures import save_tiny_decoder


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """The page tests' model: a 2-layer Llama with a character tokenizer (tests/ui_fixtures.py)."""
    return load_model(save_tiny_decoder(tmp_path_factory.mktemp("w") / "tiny-lm"))
