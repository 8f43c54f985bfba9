"""One shared, read-only copy of each loaded model, whatever the number of sessions."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from playground.app.registry import ModelRegistry
from tests.ui_fixtures import save_tiny_decoder


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")
    return root


def test_registry_shares_one_copy_across_threads_and_evicts_lru(weights):
    reg = ModelRegistry(capacity=2)
    got = []
    threads = [threading.Thread(target=lambda: got.append(reg.get(weights / "tiny-lm"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reg.loads == 1 and all(m is got[0] for m in got)
    assert not any(p.requires_grad for p in got[0].model.parameters())
    other = reg.get(weights / "tiny-lm", "bfloat16")
    assert other is not got[0] and reg.loads == 2
    reg.get(weights / "tiny-lm", "float16")
    assert len(reg.loaded_keys()) == 2 and reg.key(weights / "tiny-lm", "float32") not in reg.loaded_keys()
