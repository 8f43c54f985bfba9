"""A class on a `--compile` server decodes through one captured step (issue 43, item 1): concurrent `/generate_text`
requests from visitors at different addresses (a trusted proxy, as on a Space) all say `captured: true`, one step of
at least 4 rows served them, and each got the tokens it gets alone. The step runs uncompiled here
(`PLAYGROUND_COMPILE=eager`: the module torch.compile and CUDA graphs take, without minutes of compiling)."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest
from gradio_client import Client

from playground.app.visitors import TRUSTED_PROXIES_ENV
from tests.ui_fixtures import save_tiny_decoder, served_app

PROMPTS = ["the quick brown fox", "gone with the wind", "a tale of two cities", "pride and prejudice"]
QUERY = "max_new_tokens=200"  # long enough for the four runs to overlap, even on a loaded machine


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv(TRUSTED_PROXIES_ENV, "1")
    mp.setenv("PLAYGROUND_COMPILE", "eager")  # what `app.py --compile` sets, with the uncompiled step
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    # app.py's default lanes (--concurrency 16): scripts take up to 8 places at once
    with served_app(weights, tmp_path_factory.mktemp("uploads"), concurrency=16) as (_, served):
        yield served
    mp.undo()


def client_at(url: str, address: str) -> Client:
    return Client(url, verbose=False, headers={"X-Forwarded-For": address})


def ask(client: Client, prompt: str) -> dict:
    return client.predict("tiny-lm", prompt, QUERY, api_name="/generate_text")


def together(url: str) -> list[dict]:
    """The four visitors' requests at once (their clients connected first, then released together)."""
    clients = [client_at(url, f"10.0.0.{i + 1}") for i in range(len(PROMPTS))]
    start = threading.Barrier(len(clients))

    def go(i: int) -> dict:
        start.wait()
        return ask(clients[i], PROMPTS[i])

    try:
        with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
            return list(pool.map(go, range(len(clients))))
    finally:
        for c in clients:
            c.close()


def test_four_visitors_on_a_warm_compile_server_decode_in_one_captured_step(url):
    solo = client_at(url, "10.0.0.99")
    first = ask(solo, PROMPTS[0])  # the server's first run: its step shape is prepared aside meanwhile
    assert first["decoding"]["captured"] is False and "compiled aside" in first["decoding"]["reason"]
    time.sleep(2)  # the compile worker prepares the shape's buckets of 1, 2 and 4 rows (uncompiled: at once)
    answers = together(url)
    assert [a["decoding"]["captured"] for a in answers] == [True] * 4, [a["decoding"] for a in answers]
    assert max(a["decoding"]["rows"] for a in answers) >= 4
    assert {a["decoding"]["backend"] for a in answers} == {"eager"}
    for prompt, answer in zip(PROMPTS, answers):  # each visitor's tokens are its own run's, alone
        alone = ask(solo, prompt)
        assert alone["decoding"]["captured"] is True and alone["token_ids"] == answer["token_ids"]
    solo.close()
