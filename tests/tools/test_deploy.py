"""`python -m playground deploy-space --dry-run`: exactly what would be uploaded, with no network."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from playground.checkpoints.hub import PRELOADED
from playground.tools.deploy import (
    HARDWARE,
    THUMBNAIL,
    build,
    card_images,
    deploy,
    is_binary,
    split_front_matter,
    tracked_files,
)

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _deploy(*args: str, **env: str) -> subprocess.CompletedProcess:
    # No network: offline mode, and any Hub call would go to a port nobody listens on.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", **env}
    return subprocess.run([sys.executable, "-m", "playground", "deploy-space", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)


@pytest.fixture(scope="module")
def plan() -> dict:
    result = _deploy("me/transformer-playground", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_file_list_is_the_tracked_files_the_space_needs(plan):
    paths = [f["path"] for f in plan["files"]]
    expected = {p for p in tracked_files(ROOT) if not p.startswith(("tests/", ".ci/")) and p not in (".gitignore", "pyproject.toml")}
    expected = {p for p in expected if (ROOT / p).is_file()} | {"README.md", ".gitattributes"}
    expected |= {p for p in card_images(build(ROOT)[1]["README.md"].decode()) if p in tracked_files(ROOT)}
    assert set(paths) == expected and len(paths) == len(set(paths))
    assert {"app.py", "requirements.txt", "playground/__init__.py", "weights/tiny-lm/model.safetensors",
            "weights/tiny-seq2seq/model.safetensors"} <= set(paths)
    assert not [p for p in paths if p.startswith((".venv/", "venv/", "test-artifacts/", "bench-results/",
                                                  "weights/SmolLM2", "weights/imports/"))]
    assert {p for p in paths if p.startswith("tests/")} <= {p for p in paths if p.startswith("tests/screenshots/")}
    for f in plan["files"]:
        if f["source"] == "working tree":
            assert f["bytes"] == (ROOT / f["path"]).stat().st_size


def test_every_binary_goes_through_the_hub_upload_api(plan):
    binaries = [f for f in plan["files"] if f["binary"]]
    assert {f["path"] for f in binaries} >= {"weights/tiny-lm/model.safetensors", "weights/tiny-seq2seq/model.safetensors"}
    for f in plan["files"]:
        data = (ROOT / f["path"]).read_bytes() if f["source"] == "working tree" else b""
        assert f["binary"] == (f["source"] == "working tree" and is_binary(data, f["path"]))
        assert f["upload"] == ("lfs/xet" if f["binary"] else "regular")
    assert plan["steps"] == ["create_repo", "upload_file .gitattributes", "upload_folder"]
    printed = _deploy("me/transformer-playground", "--dry-run").stdout.splitlines()
    generated = build(ROOT)[1][".gitattributes"].decode().splitlines()  # what upload_file sends first
    for f in binaries:
        assert f"{f['path']} filter=lfs diff=lfs merge=lfs -text" in generated
        line = next(x for x in printed if x.endswith(f"{f['path']}  [binary -> Hub upload API (LFS/Xet), never a git blob]"))
        assert f"{f['bytes']:,}" in line


def test_the_space_config_pins_what_the_requirements_install(plan):
    config = plan["space_config"]
    pin = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("gradio"))
    assert pin.split("#")[0].strip() == f"gradio=={config['sdk_version']}"
    assert config["sdk_version"] == version("gradio")  # what the tests here ran
    assert config["sdk"] == "gradio" and config["app_file"] == "app.py" and config["python_version"] == "3.11"
    assert 0 < len(config["short_description"]) <= 60
    assert config["preload_from_hub"] == [f"{repo} {','.join(files)}" for repo, files in PRELOADED.items()]
    repo, files = config["preload_from_hub"][0].split(" ")
    assert repo == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # Only files the Hub's copy has (a missing one may fail the build); a template kept in
    # chat_template.jinja is fetched at start instead (hub.fetch_chat_template).
    assert set(files.split(",")) == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    assert config["models"] == ["HuggingFaceTB/SmolLM2-135M-Instruct"]  # the model's page links the Space
    assert plan["repo_type"] == "space" and plan["space_sdk"] == "gradio"
    readme = build(ROOT, repo_id="me/transformer-playground")[1]["README.md"].decode()
    front, body = split_front_matter(readme)
    assert front == config and body.startswith("# Transformer Playground")


def test_a_real_deploy_without_network_is_one_line():
    result = _deploy("me/transformer-playground")
    err = result.stderr.strip()
    assert result.returncode == 2 and err.startswith("error: no network") and "\n" not in err and "--dry-run" in err


@pytest.mark.parametrize("bad", ["me", "me/../x", "a b/c", "/abs/x"])
def test_bad_space_ids_are_one_line(bad):
    result = _deploy(bad, "--dry-run")
    assert result.returncode == 2 and result.stderr.strip().startswith("error: ") and "OWNER/NAME" in result.stderr


def test_binary_detection():
    assert is_binary(b"{}", "weights/x.safetensors") and is_binary(b"a\0b", "notes.txt")
    assert is_binary("é".encode("latin-1"), "notes.txt") and not is_binary("é 🔍".encode(), "README.md")


def test_every_image_the_card_shows_is_uploaded(plan):
    card = build(ROOT)[1]["README.md"].decode()
    images = card_images(card)
    assert len(images) >= 20  # the screenshots
    uploaded = {f["path"]: f for f in plan["files"]}
    for image in images:
        assert image in uploaded, image
        # raster images go through LFS/Xet; an SVG chart is text the Hub stores as a plain file
        assert uploaded[image]["binary"] or image.endswith(".svg"), image
        assert uploaded[image]["bytes"] == (ROOT / image).stat().st_size
    assert not [n for n in plan["notes"] if "images" in n]


def test_card_images_finds_markdown_and_html_images_but_not_web_addresses():
    text = ('![a](x/a.png) ![c](./z/c.png "title") <img alt="d" src="d.gif"> ![a again](x/a.png#top) '
            "![e](https://example.com/e.png) ![f](//cdn/f.png) [not an image](g.png)")
    assert card_images(text) == ["x/a.png", "z/c.png", "d.gif"]


def test_without_the_tools_folder_deploy_space_says_to_run_it_from_a_checkout(tmp_path):
    # What an installed wheel holds: the package without playground/tools/.
    shutil.copytree(ROOT / "playground", tmp_path / "playground", ignore=shutil.ignore_patterns("tools", "__pycache__"))
    result = subprocess.run([sys.executable, "-m", "playground", "deploy-space", "me/x", "--dry-run"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    err = result.stderr.strip()
    assert result.returncode == 2 and "\n" not in err and "from a checkout" in err and "Traceback" not in err


@pytest.mark.parametrize("hardware", list(HARDWARE))
def test_each_hardware_writes_what_a_duplicator_is_offered_and_requirements_to_match(hardware):
    from huggingface_hub import SpaceHardware

    plan = json.loads(deploy("me/transformer-playground", dry_run=True, as_json=True, hardware=hardware))
    config = plan["space_config"]
    assert config["suggested_hardware"] == plan["space_hardware"] == HARDWARE[hardware].flavor
    assert config["suggested_hardware"] in {h.value for h in SpaceHardware}  # a flavor the Hub knows
    assert config["preload_from_hub"] == [f"{repo} {','.join(files)}" for repo, files in PRELOADED.items()]
    assert {"education", "interpretability", "transformers"} <= set(config["tags"])
    files = {f["path"]: f for f in plan["files"]}
    prefix = "https://huggingface.co/spaces/me/transformer-playground/resolve/main/"
    assert config["thumbnail"].startswith(prefix)
    thumbnail = config["thumbnail"][len(prefix):]
    assert files[thumbnail]["binary"] and thumbnail in card_images(build(ROOT)[1]["README.md"].decode())  # uploaded
    card = build(ROOT, repo_id="me/transformer-playground", hardware=hardware)[1]["README.md"].decode()
    assert split_front_matter(card)[0] == config
    original = (ROOT / "requirements.txt").read_text().splitlines()
    requirements = build(ROOT, hardware=hardware)[1].get("requirements.txt")
    if hardware == "zerogpu":  # the sign-in's packages beside everything the checkout pins; `spaces` comes with ZeroGPU
        assert files["requirements.txt"]["source"] == "generated" and config["hf_oauth"] is True
        lines = requirements.decode().splitlines()
        assert lines[: len(original)] == original and {"authlib", "itsdangerous"} <= {
            line.split("#")[0].strip() for line in lines}
        assert not any(line.startswith("spaces") for line in lines)
        assert files["requirements.txt"]["bytes"] == len(requirements)
    else:  # the checkout's own: torch from PyPI runs on the CPU and on a GPU of the Space's own
        assert requirements is None and files["requirements.txt"]["source"] == "working tree"
        assert not any(line.startswith("spaces") for line in original)


def test_the_cli_names_the_hardware_and_without_it_suggests_none(plan):
    assert "suggested_hardware" not in plan["space_config"] and plan["space_hardware"] is None
    assert plan["space_config"]["thumbnail"].endswith("/me/transformer-playground/resolve/main/" + THUMBNAIL)
    assert not [n for n in plan["notes"] if "front matter" in n]  # the README's own is the config without a Space
    result = _deploy("me/x", "--hardware", "zerogpu", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    zero = json.loads(result.stdout)
    assert zero["space_config"]["suggested_hardware"] == "zero-a10g" and zero["space_config"]["preload_from_hub"]
    printed = _deploy("me/x", "--hardware", "zerogpu", "--dry-run").stdout
    assert 'space_hardware="zero-a10g"' in printed and "suggested_hardware: zero-a10g" in printed
    bad = _deploy("me/x", "--hardware", "h100", "--dry-run")
    err = bad.stderr.strip()
    assert bad.returncode == 2 and "\n" not in err and "zerogpu" in err and "cpu-upgrade" in err
