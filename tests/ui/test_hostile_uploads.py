"""Checkpoints as visitors bring them, and the hostile round of issue 23, against a served app.

The app is launched on a port; scripts call `/generate_text` with `gradio_client` as strangers would,
and the page's own handlers (upload, page load) run with a tab's request, as Gradio calls them. Every
hostile item is refused (or loaded without its tokenizer) in one line that names no server folder,
and the server keeps answering the next visitor.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import gradio as gr
import pytest
from transformers import AutoTokenizer

from playground.app.settings import FIELDS, UISettings
from playground.ui import build_app, enable_queue, launch_kwargs
from tests.bounds import within_bounds
from tests.ui_fixtures import free_port, save_tiny_decoder

LONG_NAME = "a" * 300



@pytest.fixture(scope="module")
def served(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    uploads = tmp_path_factory.mktemp("uploads")
    demo = build_app(weights, uploads)
    enable_queue(demo)
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, quiet=True, **launch_kwargs())
    yield demo, f"http://127.0.0.1:{port}/", [str(weights), str(uploads), str(tmp_path_factory.getbasetemp())]
    demo.close()


@pytest.fixture(scope="module")
def client(served):
    from gradio_client import Client

    c = Client(served[1], verbose=False)
    yield c
    c.close()


def request(session: str, **query) -> gr.Request:
    return gr.Request(session_hash=session, query_params=query)


def _still_serving(client) -> None:
    """Another visitor's script call answers as before."""
    out = client.predict("tiny-lm", "Hello", "max_new_tokens=3", api_name="/generate_text")
    assert len(out["token_ids"]) == 3


def _no_server_path(text: str, served) -> None:
    for folder in served[2]:
        assert folder not in text, text
    assert "/tmp/" not in text and "Errno" not in text and "Traceback" not in text


def _as_uploaded(folder: Path, tmp_path: Path) -> list[str]:
    """The folder's files as Gradio hands them over: each in a temporary folder of its own."""
    out = []
    for i, f in enumerate(sorted(p for p in folder.iterdir() if p.is_file())):
        holder = tmp_path / "gradio" / f"{i:02d}{os.urandom(4).hex()}"
        holder.mkdir(parents=True)
        shutil.copy(f, holder / f.name)
        out.append(str(holder / f.name))
    return out


def test_a_300_character_model_name_in_the_api_is_one_line(served, client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        client.predict(LONG_NAME, "Hello", "max_new_tokens=3", api_name="/generate_text")
    message = str(caught.value)
    assert "not a checkpoint name" in message and "\n" not in message and LONG_NAME not in message
    _no_server_path(message, served)
    _still_serving(client)


def test_a_300_character_model_name_in_a_link_is_a_note_and_the_prompt_stays(served, client):
    handlers = served[0].playground_handlers
    *values, notes = handlers.models.page_load(request("link-tab", model=LONG_NAME, prompt="keep my prompt"))
    assert values[FIELDS.index("prompt")] == "keep my prompt"
    assert values[FIELDS.index("model")]["value"] == "tiny-lm"
    assert "not a checkpoint name" in notes and LONG_NAME not in notes
    _no_server_path(notes, served)
    _still_serving(client)


def _myt5(tmp_path: Path, target: str) -> Path:
    folder = save_tiny_decoder(tmp_path / "myt5")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (folder / f).unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MyT5Tokenizer"}))
    (folder / "byte_maps.json").write_text(json.dumps({"decompose_map": target, "merge_map": {}}))
    return folder


def _upload(served, folder: Path, tmp_path: Path, session: str, case: str):
    handlers = served[0].playground_handlers
    return within_bounds(case, lambda: handlers.models.upload(_as_uploaded(folder, tmp_path), "float32", "en",
                                                               request(session)))


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd", "/nonexistent/x"])
def test_a_myt5_upload_naming_server_files_loads_without_its_tokenizer(target, served, client, tmp_path):
    """The server read /dev/zero without end, and told /etc/passwd from /nonexistent by its error; now the
    model loads for token ids, the same line whatever the target, in bounded time and memory."""
    out = _upload(served, _myt5(tmp_path, target), tmp_path, f"myt5-{target}", f"MyT5 upload naming {target}")
    status, prompt, chat, card = out["model_status"], out["prompt"], out["chat"], out["card"]
    assert "Uploaded and loaded" in status and "token ids" in status and "MyT5Tokenizer" in card
    assert prompt["value"] == "1, 2, 3" and chat["visible"] is False
    for leak in (target, "JSONDecodeError", "Unable to load", "root:"):
        assert leak not in status + card
    _no_server_path(status + card, served)
    _still_serving(client)


def test_an_upload_without_config_json_names_no_server_folder(served, client, tmp_path):
    folder = save_tiny_decoder(tmp_path / "lm")
    (folder / "config.json").unlink()
    status = _upload(served, folder, tmp_path, "no-config", "upload without config.json")["model_status"]
    assert "Upload refused" in status and "no config.json" in status and "\n" not in status
    _no_server_path(status, served)
    _still_serving(client)


def test_an_auto_map_tokenizer_is_refused_on_the_card_without_the_folder(served, client, tmp_path):
    folder = save_tiny_decoder(tmp_path / "lm")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    out = _upload(served, folder, tmp_path, "auto-map", "auto_map tokenizer")
    status, card = out["model_status"], out["card"]
    assert "auto_map" in card and "token ids" in status
    _no_server_path(status + card, served)
    _still_serving(client)


def test_a_transformers_5_folder_with_chat_template_jinja_loads_with_chat(served, tmp_path):
    folder = save_tiny_decoder(tmp_path / "lm")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.chat_template = "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"
    tokenizer.save_pretrained(folder)
    assert (folder / "chat_template.jinja").exists()
    out = _upload(served, folder, tmp_path, "chat", "transformers-5 upload")
    dropdown, status, chat = out["model"], out["model_status"], out["chat"]
    assert "Uploaded and loaded" in status and chat["visible"] is True and chat["value"] is True
    assert dropdown["value"].startswith("upload/llama-")  # named by what it is, not a bare random id


def test_a_folder_without_tokenizer_says_so_at_upload_and_runs_on_token_ids(served, tmp_path):
    folder = save_tiny_decoder(tmp_path / "lm")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (folder / f).unlink()
    out = _upload(served, folder, tmp_path, "ids", "tokenizer-less upload")
    dropdown, status, prompt = out["model"], out["model_status"], out["prompt"]
    assert "Uploaded and loaded" in status and "token ids separated by commas" in status
    handlers = served[0].playground_handlers
    settings = UISettings(model=dropdown["value"], prompt=prompt["value"], max_new_tokens=3)
    frames = list(handlers.stream.generate(request("ids"), 0.0, *[getattr(settings, f) for f in FIELDS]))
    assert frames[-1][0]["status"]["state"] == "done"
    settings = UISettings(model=dropdown["value"], prompt="some words", max_new_tokens=3)
    frames = list(handlers.stream.generate(request("ids"), 0.0, *[getattr(settings, f) for f in FIELDS]))
    assert "token ids" in json.dumps(frames[-1], default=str)
