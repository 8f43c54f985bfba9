"""Reliability round 4, row 1, on a served app: a visitor's "Rerun without the cache" after a long run is a
job sliced between the decode steps, so another visitor's requests keep their turn (before: the rerun was
one call on the torch thread, 472 s on smolshape, and the probe got no turn at all)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from gradio_client import Client

from playground.tools.loadtest_page import Page, Visitor
from playground.tools.server import holdings_of, start_server, stop_server
from tests.hf_tiny import llama_like, save_decoder
from tests.ui_fixtures import CHARS, SPECIALS, save_char_tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served_process(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    folder = weights / "wide"
    folder.mkdir()
    save_decoder(folder, "llama", llama_like(vocab_size=len(SPECIALS) + len(CHARS), hidden_size=256,
                                             intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
                                             num_key_value_heads=2, eos_token_id=2, max_position_embeddings=1024),
                 init_std=0.05)
    save_char_tokenizer(folder)
    log = tmp_path_factory.mktemp("log") / "server.log"
    proc, url = start_server(str(weights), 4, log=log)
    try:
        yield url, proc, log
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def served(served_process):
    return served_process[0]


def test_a_rerun_without_the_cache_leaves_other_visitors_their_turn(served):
    page = Page.read(served)
    a = Visitor(page, 0, "wide", "tiny-lm", 120)
    prompt = ("the cache keeps keys and values " * 20)[:600]
    with httpx.Client() as client:
        a.open(client)
        event = a.join(client, page.generate, [time.time() * 1000, *a.values(prompt=prompt, mode="greedy")])
        assert a.follow(client, event)["success"]
        probes: list[float] = []
        done = threading.Event()

        def probe() -> None:
            b = Client(served, verbose=False)
            while not done.is_set():
                began = time.perf_counter()
                out = b.predict("wide", "hello", "max_new_tokens=4&mode=greedy", api_name="/generate_text")
                probes.append(time.perf_counter() - began)
                assert len(out["token_ids"]) == 4
                time.sleep(0.3)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        time.sleep(1.0)  # the probe's client is connected and has had a turn
        began = time.perf_counter()
        rerun = a.follow(client, a.join(client, page.rerun, []))
        rerun_seconds = time.perf_counter() - began
        done.set()
        prober.join(timeout=60)
    assert rerun["success"]
    # The job's last line is empty: it ended with its result kept on the run (a stop or an error says so there);
    # the KV tab's redraw that follows draws it (its note, "same tokens", is checked where the view is drawn)
    assert rerun["output"] == [""], rerun["output"]
    during = probes[1:]  # the first includes the client's own start
    print(f"\nrerun {rerun_seconds:.1f} s; probe requests during it: {len(during)}, slowest {max(during):.2f} s")
    assert rerun_seconds > 3.0, "the rerun must be real work for the comparison to mean anything"
    assert len(during) >= 3 and max(during) < 0.3 * rerun_seconds


def test_the_server_logs_what_it_keeps_when_asked(served_process):
    """`kill -USR1`: the app logs its holdings (a load test tells memory kept on purpose from memory not returned)."""
    url, proc, log = served_process
    with httpx.Client() as client:  # one run of its own, so that it holds a model and a recorded run
        visitor = Visitor(Page.read(url), 1, "wide", "tiny-lm", 8)
        visitor.open(client)
        visitor.generate(client)
    held = holdings_of(proc, log)
    assert held is not None and held.models >= 1 and held.model_bytes > 0 and held.runs >= 1
    assert held.total_bytes == (held.model_bytes + held.copy_bytes + held.capture_bytes + held.run_bytes
                                + held.tab_state_bytes + held.step_bytes + held.prefix_bytes + held.live_value_bytes
                                + held.pool_bytes + held.token_text_bytes)
    assert holdings_of(proc, log) is not None  # and again: each signal its own line
