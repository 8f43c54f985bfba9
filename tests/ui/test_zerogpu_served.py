"""ZeroGPU through the page's own protocol: a served app in ZeroGPU mode (the emulated `spaces.GPU`: a forked
worker, everything pickled) called with `gradio_client`, and the page's Generate handler showing the refusal."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest

from playground.app import zerogpu
from playground.app.settings import FIELDS, UISettings
from playground.app.words import t
from playground.tools.zerogpu_emulation import EmulatedGPU, quota_exceeded
from playground.ui import build_app, enable_queue, launch_kwargs
from tests.ui_fixtures import free_port

WEIGHTS = Path(__file__).resolve().parents[2] / "weights"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    demo = build_app(WEIGHTS, tmp_path_factory.mktemp("uploads"))
    enable_queue(demo)
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, quiet=True, **launch_kwargs())
    gpu = EmulatedGPU()
    yield demo, f"http://127.0.0.1:{port}/", gpu
    zerogpu.install(None)
    gpu.close_worker()
    demo.close()


def call(url: str, model: str, prompt: str, query: str) -> dict:
    from gradio_client import Client

    client = Client(url, verbose=False)
    try:
        return client.predict(model, prompt, query, api_name="/generate_text")
    finally:
        client.close()


# (an encoder-decoder's decoder prompt is one start token: nothing for a prefix store to keep)
@pytest.mark.parametrize(("model", "prompt", "reused"), [("tiny-lm", "Hello", True), ("tiny-seq2seq", "Hello world", False)])
def test_a_script_call_on_zerogpu_equals_the_call_served_normally(served, model, prompt, reused, one_thread):
    _, url, gpu = served
    zerogpu.install(None)
    normal = call(url, model, prompt, "max_new_tokens=8")
    zerogpu.install(zerogpu.ZeroGPU(gpu, device="cpu"))
    before = len(gpu.received)
    first = call(url, model, prompt, "max_new_tokens=8")
    second = call(url, model, prompt, "max_new_tokens=8")  # the reused worker finds the model
    loaded = [x for x in gpu.received[before:] if isinstance(x, zerogpu.Loaded)]
    assert len(loaded) == 2 and loaded[1].cached and loaded[0].worker == loaded[1].worker
    # the reused worker restores the prompt its first run computed (its prefix store): only the cached count differs
    cached = normal["usage"]["prompt_tokens"] if reused else 0
    assert second["usage"] == {**normal["usage"], "cached_tokens": cached}
    assert first == {**second, "usage": first["usage"]} and first["usage"] == normal["usage"]
    assert first == normal and len(normal["token_ids"]) == 8
    gpu.refuse = quota_exceeded()
    try:
        refused = call(url, model, prompt, "max_new_tokens=8")
    finally:
        gpu.refuse = None
    assert refused["token_ids"] == normal["token_ids"]
    assert refused["notes"] == normal["notes"] + [t("zerogpu_quota_left", left=12)]


def test_the_page_shows_why_a_run_went_to_the_cpu(served, one_thread):
    demo, _, gpu = served
    h = demo.playground_handlers
    zerogpu.install(zerogpu.ZeroGPU(gpu, device="cpu"))
    settings = UISettings(model="tiny-lm", prompt="Hello", max_new_tokens=6, lang="zh")
    values = [getattr(settings, f) for f in FIELDS]
    frames = list(h.stream.generate(gr.Request(session_hash="zgpu-ok", query_params={}), 0.0, *values))
    assert "ZeroGPU 时长" not in frames[-1][1] and frames[-1][0]["status"]["state"] == "done"
    assert "本次运行大约用了" in frames[-1][1]  # the GPU time this run used, on the page
    gpu.refuse = quota_exceeded()
    try:
        frames = list(h.stream.generate(gr.Request(session_hash="zgpu-refused", query_params={}), 0.0, *values))
    finally:
        gpu.refuse = None
    live, notes = frames[-1][0], frames[-1][1]
    assert t("zerogpu_quota_left", "zh", left=12) in notes and live["status"]["state"] == "done"
    ok = h.sessions.get("zgpu-ok").current
    refused = h.sessions.get("zgpu-refused").current
    assert refused.generated_ids == ok.generated_ids and len(ok.generated_ids) == 6
