"""Where the app runs: the Space's public address, ZeroGPU's decorator only on ZeroGPU, the device flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from playground import hosting
from playground.app.settings import FIELDS, UISettings, to_query

REPO = Path(__file__).resolve().parents[1]


def _clear(monkeypatch):
    for name in ("SYSTEM", "SPACE_ID", "SPACES_ZERO_GPU"):
        monkeypatch.delenv(name, raising=False)


def test_copy_link_inside_a_space_gives_the_huggingface_address(monkeypatch):
    _clear(monkeypatch)
    local = to_query(UISettings(model="SmolLM2-135M-Instruct", prompt="Hi"))
    assert local.startswith("?") and "model=SmolLM2-135M-Instruct" in local
    monkeypatch.setenv("SYSTEM", "spaces")
    monkeypatch.setenv("SPACE_ID", "owner/name")
    assert hosting.shared_link(local) == "https://huggingface.co/spaces/owner/name" + local
    for bad in ("owner", "../x/y", "a/b/c", "owner/na me", "owner/x?y"):  # a malformed id never makes a link elsewhere
        monkeypatch.setenv("SPACE_ID", bad)
        assert hosting.space_url() is None and hosting.shared_link(local) == local


def test_gpu_task_is_the_function_itself_off_zerogpu(monkeypatch):
    _clear(monkeypatch)

    def work(x: int) -> int:
        return x + 1

    assert hosting.gpu_task(work) is work
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")  # not a Space: still untouched
    assert not hosting.zero_gpu() and hosting.gpu_task(work) is work
    monkeypatch.setenv("SYSTEM", "spaces")
    assert hosting.zero_gpu()
    if "spaces" not in sys.modules:
        try:
            import spaces  # noqa: F401
        except ImportError:  # ZeroGPU without the package: nothing to wrap with
            assert hosting.gpu_task(work) is work


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_it_is_one_line():
    result = subprocess.run([sys.executable, "app.py", "--device", "cuda", "--port", "9"], capture_output=True,
                            text=True, cwd=REPO, timeout=120)
    err = result.stderr.strip()
    assert result.returncode == 2 and err == "error: device 'cuda': no CUDA GPU is available here; use --device cpu"


def test_pages_start_in_the_dtype_the_server_was_started_with(tmp_path):
    import gradio as gr

    from playground.ui.catalog import Catalog
    from playground.ui.handlers import Handlers
    from playground.ui.registry import ModelRegistry

    h = Handlers(Catalog(REPO / "weights", tmp_path / "uploads", private=True), ModelRegistry(default_dtype="bfloat16"))
    request = gr.Request(session_hash="dtype")
    request.query_params = {}
    assert dict(zip(FIELDS, h.models.page_load(request)[:-1]))["dtype"] == "bfloat16"
    request.query_params = {"dtype": "float32"}  # a link's own dtype wins
    assert dict(zip(FIELDS, h.models.page_load(request)[:-1]))["dtype"] == "float32"
