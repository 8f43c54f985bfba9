"""Where the app runs: the Space's public address, the GPU per run only on ZeroGPU, the device flag."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import playground
import playground.generation
from playground import hosting
from playground.app.settings import FIELDS, UISettings, to_query

REPO = Path(__file__).resolve().parents[2]


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


def test_on_a_zerogpu_space_every_run_becomes_a_gpu_call_without_a_flag(monkeypatch):
    import types

    import app
    from playground.app import engine_stream, zerogpu
    from playground.tools.zerogpu_emulation import EmulatedGPU

    _clear(monkeypatch)
    assert app.use_zero_gpu() is None and zerogpu.active() is None  # not a Space: the shared CPU batch
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")  # not a Space: still the CPU batch
    assert not hosting.zero_gpu() and app.use_zero_gpu() is None
    monkeypatch.setenv("SYSTEM", "spaces")
    assert hosting.zero_gpu()
    monkeypatch.setitem(sys.modules, "spaces", None)  # ZeroGPU without the package: the CPU, and a log line
    assert app.use_zero_gpu() is None and zerogpu.active() is None
    emulated = EmulatedGPU()
    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=emulated))  # the package's decorator
    try:
        mode = app.use_zero_gpu()
        assert mode is not None and zerogpu.active() is mode
        lm = playground.load_model(REPO / "weights" / "tiny-lm")
        p = playground.generation.plan(lm, [5, 9, 11], playground.GenerationConfig(max_new_tokens=3))
        events = list(engine_stream.run_events(p, threading.Event()))
        # via the GPU call: the model found, the events, then how the run decoded there
        assert [type(x) for x in emulated.received] == [zerogpu.Loaded, *(type(e) for e in events), zerogpu.Decoded]
        assert len(events) == 3 and events[-1].finished
        with pytest.raises(SystemExit):
            app.main(["--device", "cuda"])  # the device flag makes no sense there: one line, exit 2
    finally:
        zerogpu.install(None)
        emulated.close_worker()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_it_is_one_line():
    result = subprocess.run([sys.executable, "app.py", "--device", "cuda", "--port", "9"], capture_output=True,
                            text=True, cwd=REPO, timeout=120)
    err = result.stderr.strip()
    assert result.returncode == 2 and err == "error: device 'cuda': no CUDA GPU is available here; use --device cpu"


def test_pages_start_in_the_dtype_the_server_was_started_with(tmp_path):
    import gradio as gr

    from playground.app.catalog import Catalog
    from playground.app.registry import ModelRegistry
    from playground.ui.handlers import Handlers

    h = Handlers(Catalog(REPO / "weights", tmp_path / "uploads", private=True), ModelRegistry(default_dtype="bfloat16"))
    request = gr.Request(session_hash="dtype")
    request.query_params = {}
    assert dict(zip(FIELDS, h.models.page_load(request)[:-1]))["dtype"] == "bfloat16"
    request.query_params = {"dtype": "float32"}  # a link's own dtype wins
    assert dict(zip(FIELDS, h.models.page_load(request)[:-1]))["dtype"] == "float32"


def test_the_device_without_a_flag(monkeypatch):
    import app

    _clear(monkeypatch)
    assert app.parse_args([]).device == "cpu" and app.parse_args(["--device", "cuda"]).device == "cuda"
    monkeypatch.setenv("SYSTEM", "spaces")
    monkeypatch.setenv("SPACE_ID", "owner/name")
    expected = "cuda" if torch.cuda.is_available() else "cpu"  # a Space with a GPU of its own uses it
    assert app.parse_args([]).device == expected
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # what `spaces` makes torch say on ZeroGPU
    assert app.parse_args([]).device == "cpu"  # ZeroGPU lends the GPU per run, never to the whole process
