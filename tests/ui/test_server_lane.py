"""The page's server functions in a lane of their own (issue 42, item 7), against a served app.

Gradio runs a server function (`live_state`, `attention_row`, ...) at once on a thread of its own, outside the queue
and its lanes: one tab calling `live_state` from 16 threads computed its run's whole value 16 times at once and took
the GIL from every generation (others' 16-token requests 3.3-9.2 s, 0.22-0.38 s alone). Now each call waits for its
tab's earlier ones, and a run's whole value is computed once per version of it. The calls go through Gradio's own
route (`/gradio_api/component_server`), as the page's script sends them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import httpx
import pytest

from playground.app.settings import WIDGETS, UISettings
from playground.ui.lanes import Lanes
from playground.ui.streaming import WHOLE_VALUES_KEPT
from tests.ui_fixtures import save_tiny_decoder, served_app

CALLS = 16


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with served_app(weights, tmp_path_factory.mktemp("uploads")) as served:
        yield served


def request(tab: str) -> gr.Request:
    return gr.Request(session_hash=tab, query_params={})


def run_in(demo, tab: str, prompt: str) -> str:
    """A finished run of `tab` (Generate pressed in that tab); its token."""
    h = demo.playground_handlers
    h.models.load("tiny-lm", "float32", "en", request(tab))
    settings = UISettings(model="tiny-lm", prompt=prompt, max_new_tokens=6)
    list(h.stream.generate(request(tab), 0.0, *[getattr(settings, f) for f in WIDGETS]))
    return h.sessions.get(tab).current.token


class Computed:
    """Counts the real computations of a whole value (the real `_value` runs), and how many ran at once per tab.
    Each holds its place a little longer (sleep), so that calls that could overlap do."""

    def __init__(self, stream):
        self.real = stream._value
        self.lock = threading.Lock()
        self.runs: Counter[str] = Counter()
        self.active: Counter[str] = Counter()
        self.most: Counter[str] = Counter()  # the most computations at once, per tab; "*": the whole server

    def __call__(self, session, run, meta):
        with self.lock:
            self.runs[run.token] += 1
            for key in (run.owner, "*"):
                self.active[key] += 1
                self.most[key] = max(self.most[key], self.active[key])
        try:
            time.sleep(0.05)
            return self.real(session, run, meta)
        finally:
            with self.lock:
                self.active[run.owner] -= 1
                self.active["*"] -= 1


def call(url: str, demo, fn: str, args: list) -> dict:
    body = {"session_hash": "page-script", "component_id": demo.playground_page.live._id, "fn_name": fn,
            "data": args}
    response = httpx.post(url + "gradio_api/component_server", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def at_once(url: str, demo, calls: list[tuple[str, list]]) -> list[dict]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda c: call(url, demo, *c), calls))


def test_sixteen_calls_for_one_runs_whole_value_compute_it_once(app, monkeypatch):
    demo, url = app
    token = run_in(demo, "flooder", "The cat")
    computed = Computed(demo.playground_handlers.stream)
    monkeypatch.setattr(demo.playground_handlers.stream, "_value", computed)
    values = at_once(url, demo, [("live_state", [token])] * CALLS)
    assert computed.runs[token] == 1  # before: 16
    assert computed.most["flooder"] == 1
    assert all(v == values[0] for v in values) and values[0]["run"] == token and values[0]["status"]["state"] == "done"
    assert values[0]["status"]["n"] == 6  # the whole run: its 6 tokens


def test_a_tabs_calls_run_one_at_a_time_and_the_lane_bounds_the_server(app, monkeypatch):
    demo, url = app
    first, second = run_in(demo, "two-runs", "Hello"), run_in(demo, "two-runs", "World")
    # two runs of this tab and two others: as many whole values as are kept (a fifth could evict one meanwhile)
    others = [run_in(demo, f"other-{i}", "Hi") for i in range(WHOLE_VALUES_KEPT - 2)]
    computed = Computed(demo.playground_handlers.stream)
    monkeypatch.setattr(demo.playground_handlers.stream, "_value", computed)
    calls = [("live_state", [first]), ("live_state", [second])] * 4 + [("live_state", [t]) for t in others]
    calls += [("attention_row", [first, 0, "self", 0, "mean"]), ("stop_at", [second, 3])]  # a finished run: no stop
    answers = at_once(url, demo, calls)
    assert computed.runs[first] == computed.runs[second] == 1 and all(computed.runs[t] == 1 for t in others)
    assert computed.most["two-runs"] == 1  # one at a time per tab, whichever of its runs a call names
    assert computed.most["*"] <= Lanes().server  # and no more than the lane's threads on the server
    assert answers[-2]["row"] is not None and answers[-1] == {}  # the other server functions answer as before


def test_a_whole_value_is_computed_again_once_its_run_or_tab_changes(app, monkeypatch):
    demo, url = app
    stream = demo.playground_handlers.stream
    token = run_in(demo, "changing", "The dog")
    computed = Computed(stream)
    monkeypatch.setattr(stream, "_value", computed)
    english = call(url, demo, "live_state", [token])
    assert call(url, demo, "live_state", [token]) == english and computed.runs[token] == 1
    stream.current_value("zh", request("changing"))  # the language switch: the tab's value is in Chinese now
    chinese = call(url, demo, "live_state", [token])
    assert computed.runs[token] == 2 and chinese["lang"] == "zh"  # the switch's own value, kept: computed once
    call(url, demo, "select_step", [token, 2, 7])  # the visitor looks at step 2
    assert call(url, demo, "live_state", [token])["selected"] == 2 and computed.runs[token] == 3
    assert call(url, demo, "live_state", ["x" * 32]) == {"run": None}  # a token of no run


def test_a_tabs_own_events_outside_the_queue_take_turns_in_the_lane(app):
    """The tokens view and a language switch's redraw are bound outside Gradio's queue: through `for_tab` each waits
    for its tab's earlier calls (never two at once per tab), tabs apart, and Gradio still hands each its request."""
    demo, url = app
    lane = demo.playground_server_lane
    events = {fn.fn.__wrapped__.__name__: i for i, fn in demo.fns.items() if hasattr(fn.fn, "__wrapped__")}
    assert {"page_load", "switch_language", "refresh", "relabel", "prompt_tokens", "relabelled_value",
            "export_json", "export_csv"} <= set(events)
    for name, data in (("page_load", []), ("switch_language", ["zh"])):  # a tab opened, then switched to Chinese
        body = {"data": data, "fn_index": events[name], "session_hash": "opener"}
        response = httpx.post(url + "gradio_api/run/predict", json=body, timeout=120)
        assert response.status_code == 200 and response.json()["data"], response.text
    assert demo.playground_handlers.sessions.get("opener").lang == "zh"
    run_in(demo, "typist", "The bird")  # the tab has a model: the tokens view asks only a model the tab loaded
    body = {"data": ["Hello there", False, "en"], "fn_index": events["prompt_tokens"], "session_hash": "typist"}
    response = httpx.post(url + "gradio_api/run/predict", json=body, timeout=120)
    assert response.status_code == 200, response.text
    # the prompt's tokens, read in the typist's tab (the tiny model's tokenizer reads characters)
    assert "What the model reads: 11 tokens" in str(response.json()["data"][0])

    active, most = Counter(), Counter()
    lock = threading.Lock()

    def handler(text: str, request: gr.Request) -> str:
        with lock:
            active[request.session_hash] += 1
            most[request.session_hash] = max(most[request.session_hash], active[request.session_hash])
        time.sleep(0.05)
        with lock:
            active[request.session_hash] -= 1
        return text + request.session_hash

    wrapped = lane.for_tab(handler)

    async def calls() -> list[str]:
        return await asyncio.gather(*(wrapped(str(i), request(tab)) for i in range(4) for tab in ("a", "b")))

    assert asyncio.run(calls()) == [f"{i}{tab}" for i in range(4) for tab in ("a", "b")]
    assert most == {"a": 1, "b": 1}
