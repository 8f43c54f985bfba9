"""Loading by Hub repo id: only the refusal paths (no network here)."""

from __future__ import annotations

import socket

import pytest

from playground.checkpoints.hub import NoNetworkError, allowed, download_checkpoint, validate_repo_id
from playground.errors import PlaygroundError


def test_only_safetensors_configs_and_tokenizer_files_are_fetched():
    for name in ("model.safetensors", "model-00001-of-00002.safetensors", "model.safetensors.index.json",
                 "config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                 "tokenizer.model", "chat_template.jinja", "special_tokens_map.json"):
        assert allowed(name), name
    for name in ("pytorch_model.bin", "model.pt", "model.pth", "model.ckpt", "modeling_custom.py",
                 "onnx/model.safetensors", "flax_model.msgpack", "model.gguf"):
        assert not allowed(name), name


@pytest.mark.parametrize("bad", ["", "gpt2", "../etc/passwd", "a/b/c", "owner/..", "/abs/path", "a b/c"])
def test_repo_ids_are_validated(bad):
    with pytest.raises(PlaygroundError, match="not a Hub repo id"):
        validate_repo_id(bad)
    assert validate_repo_id(" HuggingFaceTB/SmolLM2-135M ") == "HuggingFaceTB/SmolLM2-135M"


def test_offline_mode_fails_with_one_clear_message(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(NoNetworkError) as info:
        download_checkpoint("HuggingFaceTB/SmolLM2-135M", tmp_path)
    message = str(info.value)
    assert message.startswith("no network: ") and "\n" not in message and "HuggingFaceTB/SmolLM2-135M" in message
    assert not any(tmp_path.iterdir())  # nothing was written


def test_an_unreachable_hub_is_no_network(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with socket.socket() as s:  # a port nobody listens on: connection refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(NoNetworkError, match="^no network: "):
        download_checkpoint("owner/name", tmp_path, endpoint=f"http://127.0.0.1:{port}")


def test_the_ui_reports_hub_failures_in_the_status_line(monkeypatch, tmp_path):
    import gradio as gr

    from playground.app.catalog import Catalog
    from playground.app.registry import ModelRegistry
    from playground.app.uploads import HUB_PREFIX
    from playground.ui.handlers import Handlers

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    h = Handlers(Catalog(tmp_path / "weights", tmp_path / "uploads", tmp_path / "hub"), ModelRegistry())
    h.sessions.get("hub").model = "tiny-lm"
    request = gr.Request(session_hash="hub")
    status = h.models.load_hub("owner/name", "float32", "en", request)["model_status"]
    assert status.startswith("**Hub download failed:** no network: ") and "Still using **tiny-lm**" in status
    assert "not a Hub repo id" in h.models.load_hub("../x", "float32", "en", request)["model_status"]
    # Names of Hub downloads cannot escape the Hub folder either.
    with pytest.raises(PlaygroundError):
        h.catalog.resolve(HUB_PREFIX + "../../etc")


def test_fetching_a_missing_chat_template_is_offline_safe(tmp_path, monkeypatch):
    """Offline (as here and as in CI) the start-time fetch gives up at once and says so by returning False."""
    from playground.checkpoints.hub import fetch_chat_template

    snapshot = tmp_path / "models--o--n" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fetch_chat_template("o/n", snapshot, tmp_path) is False
    assert not (snapshot / "chat_template.jinja").exists()
