"""`python app.py --weights DIR` adds the operator's folders to the shipped ones; each checkpoint is
checked (headers only) before it is listed, and the others are named with a reason, never a path.
A preloaded Hub repo opens first on a Space, with the card the app carries for it."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

import playground
from playground.app.catalog import Catalog
from playground.checkpoints.hub import PRELOADED
from playground.errors import PlaygroundError
from tests.ui_fixtures import save_tiny_decoder

ALICE = "session-alice"
REPO_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_decoder(tmp_path_factory.mktemp("src") / "tiny")


def test_extra_folders_add_to_the_shipped_ones_and_only_what_loads_is_listed(tiny, tmp_path, caplog):
    shipped, extra, elsewhere = tmp_path / "shipped", tmp_path / "extra", tmp_path / "elsewhere"
    shutil.copytree(tiny, shipped / "tiny-lm")
    shutil.copytree(tiny, extra / "mine")
    shutil.copytree(tiny, extra / "tiny-lm")  # same name as a shipped one: the shipped one is offered
    shutil.copytree(tiny, elsewhere / "linked")
    (extra / "linked").symlink_to(elsewhere / "linked")  # the operator's link is followed
    (extra / "dangling").symlink_to(tmp_path / "gone")
    (extra / "bad-json").mkdir()
    (extra / "bad-json" / "config.json").write_text('{"model_type": "llama"')
    shutil.copy(tiny / "model.safetensors", extra / "bad-json")
    (extra / "no-weights").mkdir()
    shutil.copy(tiny / "config.json", extra / "no-weights")
    (extra / "truncated").mkdir()
    shutil.copy(tiny / "config.json", extra / "truncated")
    data = (tiny / "model.safetensors").read_bytes()
    (extra / "truncated" / "model.safetensors").write_bytes(data[: len(data) // 2])
    shutil.copytree(tiny, extra / "my model (v2)")  # a name links cannot carry: the log asks for a rename
    (extra / "unknown-family").mkdir()
    config = json.loads((tiny / "config.json").read_text())
    (extra / "unknown-family" / "config.json").write_text(json.dumps({**config, "model_type": "no-such-family"}))
    shutil.copy(tiny / "model.safetensors", extra / "unknown-family")

    caplog.set_level(logging.INFO, logger="playground.app")
    catalog = Catalog(shipped, tmp_path / "uploads", private=True, extra_weights_dirs=[extra], hf_cache_dir=tmp_path / "hf")
    assert sorted(catalog.names(ALICE)) == ["linked", "mine", "tiny-lm"]
    assert catalog.default_name() == "tiny-lm"
    assert catalog.resolve("tiny-lm", ALICE) == (shipped / "tiny-lm").resolve()
    assert catalog.resolve("linked", ALICE) == (elsewhere / "linked").resolve()
    for name in ("linked", "mine"):
        assert playground.load_model(catalog.resolve(name, ALICE)).config.n_layers == 2
    missing = catalog.unavailable()
    assert set(missing) == {"dangling", "bad-json", "no-weights", "truncated", "unknown-family"}
    assert missing["dangling"] == "the link points to nothing"
    assert "not valid JSON" in missing["bad-json"] and "model.safetensors" in missing["no-weights"]
    assert "no-such-family" in missing["unknown-family"]
    for why in missing.values():  # one line naming no server folder
        assert "\n" not in why and str(tmp_path) not in why
    for name in missing:
        with pytest.raises(PlaygroundError, match="no checkpoint named"):
            catalog.resolve(name, ALICE)
        assert f"checkpoint {name} is not offered" in caplog.text
    assert "the one of the same name listed first is offered" in caplog.text
    assert "'my model (v2)' in the folder extra is not offered: rename it" in caplog.text
    caplog.clear()
    catalog.names(ALICE)  # listed again: nothing new to say
    assert "not offered" not in caplog.text
    shutil.rmtree(extra / "bad-json")  # fixed or removed: gone from the notes
    assert "bad-json" not in (catalog.names(ALICE), catalog.unavailable())[1]


def test_the_page_names_what_is_missing_and_why(tiny, tmp_path):
    import gradio as gr

    from playground.app.registry import ModelRegistry
    from playground.ui.handlers import Handlers

    shipped, extra = tmp_path / "shipped", tmp_path / "extra"
    shutil.copytree(tiny, shipped / "tiny-lm")
    extra.mkdir()
    (extra / "dangling").symlink_to(tmp_path / "gone")
    h = Handlers(Catalog(shipped, tmp_path / "uploads", private=True, extra_weights_dirs=[extra]), ModelRegistry())
    request = gr.Request(session_hash=ALICE)
    request.query_params = {}
    notes = h.models.page_load(request)[-1]
    assert "dangling is not offered here: the link points to nothing" in notes and str(tmp_path) not in notes


def _preload(cache: Path, source: Path, files: tuple[str, ...]) -> Path:
    """As preload_from_hub leaves the cache: blobs, refs/main, a snapshot of links to the blobs."""
    repo = cache / ("models--" + REPO_ID.replace("/", "--"))
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for i, name in enumerate(files):
        shutil.copy(source / name, repo / "blobs" / f"blob{i}")
        (snapshot / name).symlink_to(Path("../..") / "blobs" / f"blob{i}")
    return snapshot


@pytest.mark.parametrize("template_in", ["tokenizer_config.json", "chat_template.jinja", None])
def test_a_space_opens_on_the_preloaded_model_with_its_card(tiny, tmp_path, monkeypatch, caplog, template_in):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = tmp_path / "src"
    shutil.copytree(tiny, source)
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    settings = json.loads((source / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    if template_in == "tokenizer_config.json":
        settings["chat_template"] = template
    (source / "tokenizer_config.json").write_text(json.dumps(settings))
    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    if template_in == "chat_template.jinja":
        (source / "chat_template.jinja").write_text(template)
        files.append("chat_template.jinja")
    # chat_template.jinja is not preloaded (the Hub's copy may lack it): the app's start fetches it into
    # the same snapshot where the Hub is reachable, which this offline test stands in for.
    assert set(files) - {"chat_template.jinja"} <= set(PRELOADED[REPO_ID])
    shipped = tmp_path / "shipped"
    shutil.copytree(tiny, shipped / "tiny-lm")
    local = Catalog(shipped, tmp_path / "uploads", private=True, hf_cache_dir=tmp_path / "hf")
    space = Catalog(shipped, tmp_path / "uploads", private=True, hf_cache_dir=tmp_path / "hf", prefer_preloaded=True)
    assert space.default_name() == "tiny-lm"  # nothing preloaded: the shipped default
    _preload(tmp_path / "hf", source, tuple(files))
    caplog.set_level(logging.INFO, logger="playground.app")
    assert space.default_name() == "SmolLM2-135M-Instruct" and space.names(ALICE)[0] == "SmolLM2-135M-Instruct"
    assert local.default_name() == "tiny-lm"  # outside a Space the shipped default stays first
    card = space.card("SmolLM2-135M-Instruct", ALICE)
    assert card.example_prompt == "What is the capital of France?"
    lm = playground.load_model(space.resolve("SmolLM2-135M-Instruct", ALICE))
    if template_in is None:
        assert "Chat is off" in card.describe("en") and "对话模式关闭" in card.describe("zh")
        assert "has no chat template" in caplog.text and not getattr(lm.tokenizer, "chat_template", None)
    else:
        assert card.describe("en").startswith("SmolLM2-135M-Instruct: a small instruction-tuned chat model")
        assert "no chat template" not in caplog.text and lm.tokenizer.chat_template == template
