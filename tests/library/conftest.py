"""Fixtures the library tests share."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.analysis_models import load, record


@pytest.fixture(scope="session")
def recorded_runs(tmp_path_factory) -> Callable:
    """`recorded_runs(name, new_tokens=8)` -> (name, model, its recorded run), each built once for every
    analysis module (tests/analysis_models.py names the families)."""
    made: dict = {}

    def get(name: str, new_tokens: int = 8):
        if (name, new_tokens) not in made:
            lm = load(name, tmp_path_factory.mktemp("models"))
            made[name, new_tokens] = (name, lm, record(lm, name, new_tokens=new_tokens))
        return made[name, new_tokens]

    return get
