"""The Space as a Space runs it: exactly the files `deploy-space --dry-run` lists, a Hugging Face cache
filled as `preload_from_hub` fills it (both chat-template layouts), `SYSTEM=spaces SPACE_ID=...`,
`python app.py` with no arguments, offline; then the page in Chromium.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from playground.checkpoints.hub import PRELOADED
from playground.tools.deploy import card_images
from tests.browser import test_browser as base
from tests.browser.test_browser import CHROMIUM
from tests.ui_fixtures import free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
REPO_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SPACE_ID = "owner/transformer-playground"
REVISION = "0123456789abcdef0123456789abcdef01234567"  # any commit hash: refs/main names it
TIMEOUT_MS = 180_000
browser = base.browser  # Chromium, as the other browser tests launch it

if not Path(CHROMIUM).exists():
    pytest.skip("Debian chromium is not installed (apt-get install -y chromium)", allow_module_level=True)



def _place(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # same disk: no second copy of 540 MB
    except OSError:
        shutil.copyfile(source, target)


@pytest.fixture(scope="module")
def space(tmp_path_factory) -> Path:
    """The dry-run's files, copied (or generated) into a folder of their own: the Space's repository."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    plan = json.loads(subprocess.run([sys.executable, "-m", "playground", "deploy-space", SPACE_ID, "--dry-run",
                                      "--json"], capture_output=True, text=True, check=True, cwd=REPO, env=env,
                                     timeout=120).stdout)
    from playground.tools.deploy import build

    generated = build(REPO, repo_id=SPACE_ID)[1]  # the card names the Space (its thumbnail)
    root = tmp_path_factory.mktemp("space")
    for f in plan["files"]:
        target = root / f["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        if f["source"] == "generated":
            target.write_bytes(generated[f["path"]])
        else:
            shutil.copyfile(REPO / f["path"], target)
        assert target.stat().st_size == f["bytes"], f["path"]
    return root


def fill_cache(hf_home: Path, layout: str, smollm2: Path) -> Path:
    """HF_HOME/hub as preload_from_hub leaves it: blobs, snapshots/<rev>/ links to them, refs/main.

    layout "config": the chat template inside tokenizer_config.json (how the Hub's copy was uploaded);
    layout "jinja": in chat_template.jinja beside a tokenizer_config.json without one (transformers 5), as
    the app's start leaves it when the Hub's copy keeps its template there (`fetch_chat_template` puts it
    in the same snapshot; offline here, so the test places it)."""
    repo = hf_home / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    tokenizer_config = json.loads((smollm2 / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = tokenizer_config.pop("chat_template", None)  # wherever the local import keeps it
    if (smollm2 / "chat_template.jinja").is_file():
        template = (smollm2 / "chat_template.jinja").read_text(encoding="utf-8")
    assert template
    contents: dict[str, Path | bytes] = {name: smollm2 / name for name in ("config.json", "tokenizer.json",
                                                                           "model.safetensors")}
    if layout == "config":
        tokenizer_config["chat_template"] = template
    else:
        contents["chat_template.jinja"] = template.encode("utf-8")
    contents["tokenizer_config.json"] = json.dumps(tokenizer_config, indent=2).encode("utf-8")
    assert set(contents) - {"chat_template.jinja"} <= set(PRELOADED[REPO_ID])  # only files the preload downloads
    for i, (name, content) in enumerate(sorted(contents.items())):
        blob = repo / "blobs" / f"{i:064x}"
        if isinstance(content, Path):
            _place(content, blob)
        else:
            blob.write_bytes(content)
        (snapshot / name).symlink_to(Path("../..") / "blobs" / blob.name)
    return snapshot



def test_every_image_the_card_shows_is_among_the_spaces_files(space):
    card = (space / "README.md").read_text(encoding="utf-8")
    images = card_images(card)
    assert len(images) >= 20
    missing = [p for p in images if not (space / p).is_file()]
    assert not missing, missing
    assert not (space / "tests" / "test_space.py").exists()  # the tests themselves stay home


@pytest.mark.parametrize("layout", ["config", "jinja"])
def test_the_space_opens_on_the_preloaded_smollm2_and_answers(space, browser, tmp_path, layout, smollm2_dir):
    hf_home = tmp_path / "hf"
    fill_cache(hf_home, layout, smollm2_dir)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GRADIO_", "SPACE"))}
    env.update({"SYSTEM": "spaces", "SPACE_ID": SPACE_ID, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1",
                "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # nothing listens there
                "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
                "PYTHONPATH": ""})
    log_path = tmp_path / "server.log"
    with open(log_path, "w+") as log:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=space, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/"
            deadline = time.time() + 180
            while time.time() < deadline and proc.poll() is None:
                try:
                    urllib.request.urlopen(url, timeout=2)
                    break
                except OSError:
                    time.sleep(0.5)
            log.seek(0)
            assert proc.poll() is None, f"the Space did not start:\n{log.read()[-3000:]}"
            page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_function("() => /Loaded/.test(document.querySelector('#model-status')?.innerText ?? '')")
            assert "SmolLM2-135M-Instruct" in page.inner_text("#model-status")
            assert "small instruction-tuned chat model" in page.inner_text("#model-about")
            assert page.input_value("#prompt textarea") == "What is the capital of France?"
            assert page.is_checked("#chat input[type=checkbox]")
            page.fill("#prompt textarea", "What is the capital of France?")
            page.click("#generate-btn")
            page.wait_for_function("() => ['done', 'stopped', 'error'].includes("
                                   "document.querySelector('#gen-status')?.dataset.state)")
            text = page.evaluate("() => Array.from(document.querySelectorAll('#token-stream [data-step]'))"
                                 ".map(e => e.textContent).join('')")
            assert "Paris" in text, text
            page.click("#copy-link-btn")
            page.wait_for_function("() => (document.querySelector('#share-link textarea, #share-link input')?.value ?? '')"
                                   ".startsWith('https://')")
            link = page.evaluate("() => document.querySelector('#share-link textarea, #share-link input').value")
            assert link.startswith(f"https://huggingface.co/spaces/{SPACE_ID}?") and "model=SmolLM2-135M-Instruct" in link
            assert not errors, errors
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.seek(0)
        text = log.read()
    # Gradio starts its Spaces hot-reload watcher under SYSTEM=spaces; it needs the `spaces` package,
    # which every Gradio Space has installed and this machine has not. That thread's one error is
    # the simulation's, not the app's.
    text = re.sub(r"Exception in thread [^\n]*\nTraceback(?:.*\n)*?RuntimeError: `spaces` package is required "
                  r"to run hot-reloading in Spaces\n", "", text)
    assert "Traceback" not in text, text[-3000:]
    assert "no chat template" not in text
