"""Which checkpoints the app offers, and the only way a name from the browser becomes a path."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.errors import PlaygroundError
from playground.ui.catalog import UPLOAD_PREFIX, Catalog
from tests.ui_fixtures import save_tiny_decoder


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")
    return root


def test_catalog_lists_defaults_first_and_resolves_only_inside_its_folders(weights, tmp_path):
    (weights / "aaa-other").mkdir(exist_ok=True)
    (weights / "aaa-other" / "model.safetensors").write_bytes(b"x")
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(b"x")
    link = weights / "escape"
    if not link.exists():
        link.symlink_to(outside)
    try:
        cat = Catalog(weights, tmp_path / "uploads")
        assert cat.names()[0] == "tiny-lm" and cat.default_name() == "tiny-lm"
        assert cat.resolve("tiny-lm") == (weights / "tiny-lm").resolve()
        for bad in ("../secret", "/etc/passwd", "tiny-lm/../../secret", "escape", "", "a\\b", "x/y/z",
                    UPLOAD_PREFIX + "../../etc", UPLOAD_PREFIX + "0" * 32):
            with pytest.raises(PlaygroundError):
                cat.resolve(bad)
    finally:
        link.unlink()
        (weights / "aaa-other" / "model.safetensors").unlink()
        (weights / "aaa-other").rmdir()


def test_uploads_are_copied_into_their_own_folder_and_checked(tmp_path):
    cat = Catalog(tmp_path / "w", tmp_path / "uploads")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"0" * 100)
    (src / "config.json").write_text("{}")
    a = cat.save_upload([src / "model.safetensors", src / "config.json"], max_bytes=10_000)
    b = cat.save_upload([src / "model.safetensors"], max_bytes=10_000)
    assert a != b and a in cat.names() and b in cat.names()
    assert sorted(p.name for p in cat.resolve(a).iterdir()) == ["config.json", "model.safetensors"]
    (src / "model.bin").write_bytes(b"x")
    (src / "run.py").write_text("print(1)")
    with pytest.raises(PlaygroundError, match="pickle"):
        cat.save_upload([src / "model.bin"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="not accepted"):
        cat.save_upload([src / "model.safetensors", src / "run.py"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="no .safetensors"):
        cat.save_upload([src / "config.json"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="limit"):
        cat.save_upload([src / "model.safetensors"], max_bytes=10)
    cat.discard_upload(b)
    assert b not in cat.names()
