"""The page's own path under load: many visitors streaming, stopping, switching models and uploading.

    python -m playground.tools.loadtest --page --clients 16 --seconds 150      # starts app.py on a free port

Each virtual visitor is a Gradio session talking the protocol the browser speaks: `queue/join` for
queued events (Generate, a model switch, an upload), `run/predict` for immediate ones (Stop), and the
session's `queue/data` event stream for the frames. Event ids come from the page's own config (by
the buttons' element ids), so the test follows the page as it is. For `--seconds` every visitor loops
over a mix: a full generation, Stop in the middle of one, Stop while still queued, a switch to the
other model and back, an upload of a small checkpoint, and a `generate_text` call (`--lab` adds the labs,
the lessons, forks of the four experiments, dtype switches, drafted runs, selection storms and a script's
flood: `LAB_MIX`; the script calls name their own client addresses, as a Space's proxy would). Checks and
numbers: errors, cross-talk (every finished run equals what that visitor got alone), time from the
visitor's turn (`process_starts`) to the first frame, p50/p95 of whole runs, and the server's memory
(VmRSS of its process tree from /proc) sampled every half second, before, at the peak and after.
"Before" is the idle server after `--warmup` seconds of the same crowd: one-time growth (thread
pools, allocator arenas, first uses of each path) is not a leak; the cold figure is printed too. Before and
after, the server says what it keeps on purpose (`kill -USR1`: its models, precision copies and recorded runs,
`playground.app.holdings`); what the crowd asked it to keep may grow within those budgets, and the rest of its
memory must come back (within 110%).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import secrets
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from playground.app.holdings import Holdings
from playground.tools.server import (
    AS_BEHIND_A_PROXY,
    PROMPTS,
    client_headers,
    holdings_of,
    rss_bytes,
    start_server,
    stop_server,
)

IDLE_SECONDS = 12.0  # before the baseline and after the crowd: script sessions go 5-10 s after their last use
MIX = "generate,generate,generate,generate,generate,stop running,stop queued,switch,upload,api"
# The causal lab and the lessons mixed in (reliability round 4's soak): the cache-less rerun, a head sweep,
# the KV timing and the SDPA measurement are jobs sliced between the decode steps; a lesson's numbers too.
# Round 5 adds a fork of each of the four experiments (an ablated head, a KV policy with heavy hitters, a
# precision copy, a draft), dtype switches, runs drafted by a second model, a storm of selections from one tab
# and a flood of script calls from one address (its extra calls refused at once, never an error).
LAB_MIX = MIX + ",rerun,sweep,measure,lesson,fork,fork,dtype,draft,storm,flood"
LESSONS = ("steps", "lens", "kv", "memory", "patterns", "anatomy", "lab")
FORKS = ("head", "kv", "precision", "draft")
STORM, FLOOD = 20, 6  # selections posted at once by a tab; script calls sent at once from one address


@dataclass
class Page:
    """What a visitor's browser knows from the page's config: event ids and the order of the settings."""

    url: str
    opened: int  # the page-load event: fills the tab's model list (Gradio checks choices per session)
    generate: int
    stop: int
    load: int
    upload: int
    settings: list[str]  # the Generate event's inputs after the ticket (the left column's widgets), by UISettings field
    rerun: int = -1  # the KV tab's "without the cache", the lab's head sweep, the lessons' measurements
    sweep: int = -1
    time_cache: int = -1
    sdpa: int = -1
    lesson: int = -1  # picking a lesson (its inputs: the lesson, then the lesson controls)
    dtype: int = -1  # the dtype radio (a reload of the model in another dtype)
    forks: dict[str, tuple[int, list[str]]] = field(default_factory=dict)  # each experiment's fork: event, inputs
    select: int = -1  # a token selected in the live screen (the open view redraws)
    select_inputs: list[Any] = field(default_factory=list)  # its inputs' values as the page first holds them
    lesson_inputs: list[Any] = field(default_factory=list)  # a lesson pick's inputs (the lesson at `lesson_at`)
    lesson_at: int = 0
    api: int = -1  # /generate_text

    @classmethod
    def read(cls, url: str) -> Page:
        from playground.app.settings import WIDGETS

        config = httpx.get(url + "config", timeout=30).json()
        ids = {c["props"].get("elem_id"): c["id"] for c in config["components"] if c.get("props", {}).get("elem_id")}

        def event(elem: str, kind: str) -> int:
            target = ids[elem]
            for i, dep in enumerate(config["dependencies"]):
                if [target, kind] in [list(t) for t in dep["targets"]]:
                    return dep.get("id", i)
            raise SystemExit(f"the page has no {kind} event on #{elem}")

        root = config.get("layout", {}).get("id", 0)  # the page itself (0 unless the process built other pages)
        opened = next(d.get("id", i) for i, d in enumerate(config["dependencies"]) if [root, "load"] in
                      [list(t) for t in d["targets"]])
        select, lesson = event("token-output", "select"), event("lesson-pick", "input")
        values = {c["id"]: c.get("props", {}).get("value") for c in config["components"]}

        def inputs_of(fn: int) -> list[int]:
            return next(d["inputs"] for i, d in enumerate(config["dependencies"]) if d.get("id", i) == fn)
        api = next(d.get("id", i) for i, d in enumerate(config["dependencies"]) if d.get("api_name") == "generate_text")
        names = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
        forks = {kind: (fn, [names[c] for c in inputs_of(fn)]) for kind, fn in (
            ("head", event("lab-ablate-head", "click")), ("kv", event("kvlab-fork-btn", "click")),
            ("precision", event("precision-fork-btn", "click")), ("draft", event("spec-fork-btn", "click")))}
        return cls(url, opened, event("generate-btn", "click"), event("stop-btn", "click"),
                   event("model-select", "input"), event("upload", "upload"), list(WIDGETS),
                   event("rerun-btn", "click"), event("lab-sweep-btn", "click"), event("time-cache-btn", "click"),
                   event("measure-sdpa-btn", "click"), lesson, dtype=event("dtype", "input"), forks=forks,
                   select=select, select_inputs=[values.get(c) for c in inputs_of(select)], api=api,
                   lesson_inputs=[values.get(c) for c in inputs_of(lesson)],
                   lesson_at=inputs_of(lesson).index(ids["lesson-pick"]))


def follow(client: httpx.Client, url: str, session: str, event_id: str, on_message=None) -> dict[str, Any]:
    """Read `session`'s event stream until `event_id` completes; timings, the final outputs and, for a
    generation, the run's path entries as the page holds them ("path": its frames send only what is new)."""
    from gradio_client.utils import apply_diff

    from playground.app.frames import fold

    out: dict[str, Any] = {"started": None, "first": None, "done": None, "output": None, "success": False,
                           "path": []}
    values: list[Any] | None = None  # each output's value: the first frame whole, then Gradio's diffs
    with client.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}, timeout=300) as stream:
        for line in stream.iter_lines():
            if not line.startswith("data:"):
                continue
            msg = json.loads(line[5:])
            if msg.get("event_id") not in (None, event_id):
                continue
            kind = msg.get("msg")
            now = time.perf_counter()
            if kind == "process_starts":
                out["started"] = now
            elif kind == "process_generating":
                out["first"] = out["first"] or now
                data = (msg.get("output") or {}).get("data") or []
                values = data if values is None else [apply_diff(v, d) for v, d in zip(values, data)]
                if values and isinstance(values[0], dict) and values[0].get("run"):
                    out["path"] = fold(out["path"], values[0])
            if on_message is not None:
                on_message(kind)
            if kind == "process_completed":
                out["done"] = now
                out["success"] = bool(msg.get("success"))
                out["output"] = (msg.get("output") or {}).get("data")
                out["error"] = (msg.get("output") or {}).get("error")
                return out
    return out


def follow_all(client: httpx.Client, url: str, session: str, event_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Read `session`'s event stream until every one of `event_ids` completes: their completion messages."""
    ended: dict[str, dict[str, Any]] = {}
    with client.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}, timeout=300) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed" and msg.get("event_id") in event_ids:
                    ended[msg["event_id"]] = msg
                    if len(ended) == len(event_ids):
                        break
    return ended


@dataclass
class Visitor:
    """One browser tab: its session hash, its own prompt and seed, and what it measured."""

    page: Page
    index: int
    model: str
    other_model: str
    max_new_tokens: int
    session: str = field(default_factory=lambda: secrets.token_hex(6))
    reference: list[int] | None = None
    token: str = ""  # the tab's current run (what a selection names)
    steps: int = 0
    first_token_s: list[float] = field(default_factory=list)
    run_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    crosstalk: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    address: str | None = None  # what the proxy says the tab's requests come from (None: the connection's own)
    think: float = 0.0  # seconds the visitor waits between two actions, on average (0: none)

    def headers(self) -> dict[str, str]:
        return {"X-Forwarded-For": self.address} if self.address else {}

    def settings(self, **changes: Any) -> Any:
        """The tab's `UISettings`: its own prompt and seed, sampling, with `changes`."""
        from playground.app.settings import UISettings

        settings = UISettings(model=self.model, prompt=PROMPTS[self.index % len(PROMPTS)], mode="sample",
                              temperature=0.9, top_k=40, seed=1000 + self.index, max_new_tokens=self.max_new_tokens)
        for key, value in changes.items():
            setattr(settings, key, value)
        return settings

    def values(self, **changes: Any) -> list[Any]:
        settings = self.settings(**changes)
        return [getattr(settings, f) for f in self.page.settings]

    # --- the protocol -------------------------------------------------------------------------------

    def join(self, client: httpx.Client, fn: int, data: list[Any]) -> str:
        body = {"data": data, "event_data": None, "fn_index": fn, "trigger_id": fn, "session_hash": self.session}
        response = client.post(self.page.url + "gradio_api/queue/join", json=body, timeout=60)
        response.raise_for_status()
        return response.json()["event_id"]

    def predict(self, client: httpx.Client, fn: int, data: list[Any], query: str = "") -> dict[str, Any]:
        """An immediate event; `query`: the page's own query string (`?game=...`: Gradio's client sends it along)."""
        body = {"data": data, "event_data": None, "fn_index": fn, "trigger_id": fn, "session_hash": self.session}
        response = client.post(self.page.url + "gradio_api/run/predict" + query, json=body, timeout=60)
        response.raise_for_status()
        return response.json()

    def follow(self, client: httpx.Client, event_id: str, on_message=None) -> dict[str, Any]:
        """Read the session's event stream until `event_id` completes; timings, the final outputs and, for a
        generation, the run's path entries as the page holds them ("path": its frames send only what is new)."""
        return follow(client, self.page.url, self.session, event_id, on_message)

    # --- what a visitor does --------------------------------------------------------------------------

    def generate(self, client: httpx.Client, stop: str | None = None, **changes: Any) -> list[int] | None:
        """One Generate press; `stop`: "running" presses Stop after the first frame, "queued" right away; `changes`:
        settings other than the tab's own (a longer run)."""
        ticket = time.time() * 1000
        event = self.join(client, self.page.generate, [ticket, *self.values(**changes)])
        if stop == "queued":
            self.predict(client, self.page.stop, [time.time() * 1000])
        pressed = threading.Event()

        def on_message(kind: str) -> None:
            if stop == "running" and kind == "process_generating" and not pressed.is_set():
                pressed.set()
                self.predict(client, self.page.stop, [time.time() * 1000])

        out = self.follow(client, event, on_message)
        if not out["success"]:
            self.errors.append(f"visitor {self.index}: generate failed: {out.get('error')}")
            return None
        live = (out["output"] or [None])[0]
        if isinstance(live, dict) and live.get("run"):
            self.token, self.steps = live["run"], len(live.get("path", []))
        if stop is None:
            if out["started"] and out["first"]:
                self.first_token_s.append(out["first"] - out["started"])
            if out["started"] and out["done"]:
                self.run_s.append(out["done"] - out["started"])
        if not isinstance(live, dict):
            return None  # a run refused before it started (Stop while queued) sends no frame
        state = (live.get("status") or {}).get("state")
        if state == "error":
            self.errors.append(f"visitor {self.index}: {live['status'].get('error')}")
            return None
        return [int(p[1]) for p in out["path"]] if state == "done" else None

    def job(self, client: httpx.Client, fn: int, data: list[Any], what: str) -> None:
        """A lab or lesson button after a run: it must end in success (its own one-line refusal is fine)."""
        out = self.follow(client, self.join(client, fn, data))
        if not out["success"]:
            self.errors.append(f"visitor {self.index}: {what} failed: {out.get('error')}")

    def lab_and_lessons(self, client: httpx.Client, action: str, rng: random.Random) -> None:
        self.generate(client)  # the lab and the lessons read the tab's current run
        if action == "rerun":
            self.job(client, self.page.rerun, [], "rerun without the cache")
        elif action == "sweep":
            self.job(client, self.page.sweep, [rng.randrange(2), "shown"], "head sweep")  # layer, which run
        elif action == "measure":
            fn = rng.choice([self.page.time_cache, self.page.sdpa])
            self.job(client, fn, [], "measurement")
        else:
            lesson = rng.choice(LESSONS)
            data = list(self.page.lesson_inputs)  # the controls as the page holds them, the lesson picked
            data[self.page.lesson_at] = lesson
            self.job(client, self.page.lesson, data, f"lesson {lesson}")

    def streamed(self, client: httpx.Client, fn: int, data: list[Any], what: str) -> None:
        """A run streamed into the live screen by another button than Generate (a fork): it must end, done or
        refused with its one line (a setting this model cannot take), never with an error of the server."""
        out = self.follow(client, self.join(client, fn, data))
        live = (out.get("output") or [None])[0]
        state = (live.get("status") or {}).get("state") if isinstance(live, dict) else None
        if not out["success"] or state not in ("done", "error", None):
            self.errors.append(f"visitor {self.index}: {what} failed: {out.get('error') or state}")

    def fork(self, client: httpx.Client, rng: random.Random) -> None:
        """A fork of the tab's run in one of the four experiments."""
        self.generate(client)
        kind = rng.choice(FORKS)
        values = {"lab-layer": 0, "lab-head": 0, "kv-window": 16, "kv-sink": 2, "kv-heavy": 4, "kv-dtype": "",
                  "rope-scaling": "", "weight-precision": rng.choice(["int8", "int4", "bfloat16"]),
                  "draft": rng.choice(["ngram", "layer:1", f"model:{self.model}"]), "draft-tokens": 3}
        fn, inputs = self.page.forks[kind]  # the fork's widgets, by element id, in the event's order
        self.streamed(client, fn, [values.get(name) for name in inputs], f"{kind} fork")

    def draft(self, client: httpx.Client) -> None:
        """A run drafted by a second model (the visitor's own model: its vocabulary by definition), forked from the
        tab's run (Generate is always plain)."""
        self.generate(client)
        fn, inputs = self.page.forks["draft"]
        values = {"draft": f"model:{self.model}", "draft-tokens": 3}
        self.streamed(client, fn, [values.get(name) for name in inputs], "model draft")

    def dtype(self, client: httpx.Client, rng: random.Random) -> None:
        """The model in another dtype, then back: each a load the registry may have to do again."""
        for dtype in (rng.choice(["bfloat16", "float16"]), "float32"):
            out = self.follow(client, self.join(client, self.page.dtype, [self.model, dtype, "en"]))
            if not out["success"]:
                self.errors.append(f"visitor {self.index}: switching to {dtype} failed: {out.get('error')}")

    def storm(self, client: httpx.Client) -> None:
        """STORM selections posted at once by the tab: each ends (the older ones replaced, changing nothing)."""
        self.generate(client)
        if not getattr(self, "steps", 0):
            return
        events = []
        for k in range(STORM):
            body = {"data": self.page.select_inputs, "event_data": {"run": self.token, "step": k % self.steps},
                    "fn_index": self.page.select, "trigger_id": self.page.select, "session_hash": self.session}
            response = client.post(self.page.url + "gradio_api/queue/join", json=body, timeout=60)
            if response.status_code != 200 and "actions waiting" in response.text:
                break  # the tab's fair share of its address's places (a class behind one address): one line
            if response.status_code != 200:
                self.errors.append(f"visitor {self.index}: a selection was refused: {response.text[:120]}")
                return
            events.append(response.json()["event_id"])
        if not events:  # a tab with nothing waiting holds at least 2 places (`QueuePlaces.min_tab`)
            self.errors.append(f"visitor {self.index}: every selection of a storm was refused")
            return
        ended = follow_all(client, self.page.url, self.session, events)  # one stream: the older end first
        failed = [e for e in events if not ended.get(e, {}).get("success")]
        if failed:
            self.errors.append(f"visitor {self.index}: {len(failed)} of {len(events)} selections failed")

    def flood(self) -> None:
        """FLOOD script calls at once from the visitor's address: two places, the rest refused at once."""
        results: list[tuple[bool, str]] = []

        def call() -> None:
            query = (f"mode=sample&temperature=0.9&top_k=40&seed={1000 + self.index}"
                     f"&max_new_tokens={self.max_new_tokens}&chat=false")
            body = {"data": [self.model, PROMPTS[self.index % len(PROMPTS)], query], "fn_index": self.page.api,
                    "trigger_id": None, "session_hash": secrets.token_hex(8)}
            with httpx.Client(headers=client_headers(self.index)) as own:
                response = own.post(self.page.url + "gradio_api/queue/join", json=body, timeout=60)
                if response.status_code != 200:
                    results.append((False, response.json().get("detail", "")))
                    return
                out = follow(own, self.page.url, body["session_hash"], response.json()["event_id"])
                data = (out.get("output") or [None])[0]
                results.append((bool(out["success"]) and isinstance(data, dict), json.dumps(data)[:200]))
                if isinstance(data, dict) and [int(i) for i in data["token_ids"]] != self.reference:
                    self.crosstalk += 1
                    self.errors.append(f"visitor {self.index}: a flood's call differs from its solo run")

        calls = [threading.Thread(target=call) for _ in range(FLOOD)]
        for th in calls:
            th.start()
        for th in calls:
            th.join()
        served = [r for r in results if r[0]]
        refused = [r for r in results if not r[0]]
        if not served or any("calls from your address" not in why for _, why in refused):
            self.errors.append(f"visitor {self.index}: the flood was not served 2 at a time: {refused[:2]}")

    def switch_model(self, client: httpx.Client) -> None:
        for name in (self.other_model, self.model):
            out = self.follow(client, self.join(client, self.page.load, [name, "float32", "en"]))
            if not out["success"]:
                self.errors.append(f"visitor {self.index}: loading {name} failed: {out.get('error')}")

    def upload(self, client: httpx.Client, checkpoint: Path) -> None:
        with open(checkpoint, "rb") as f:
            files = {"files": (checkpoint.name, f, "application/octet-stream")}
            stored = client.post(self.page.url + "gradio_api/upload", files=files, timeout=60).json()
        data = [[{"path": stored[0], "orig_name": checkpoint.name, "meta": {"_type": "gradio.FileData"}}], "float32", "en"]
        out = self.follow(client, self.join(client, self.page.upload, data))
        status = str((out.get("output") or [None, ""])[1])
        if not out["success"] or "Uploaded" not in status:
            self.errors.append(f"visitor {self.index}: upload failed: {out.get('error') or status[:120]}")
        self.switch_back(client)

    def switch_back(self, client: httpx.Client) -> None:
        self.follow(client, self.join(client, self.page.load, [self.model, "float32", "en"]))

    def api(self) -> None:
        from gradio_client import Client

        # chat named as the page's press has it: a query that does not name it gets the model's default, as a link
        query = (f"mode=sample&temperature=0.9&top_k=40&seed={1000 + self.index}&max_new_tokens={self.max_new_tokens}"
                 "&chat=false")
        client = Client(self.page.url, verbose=False, headers=self.headers() or client_headers(self.index))
        out = client.predict(self.model, PROMPTS[self.index % len(PROMPTS)], query, api_name="/generate_text")
        if [int(i) for i in out["token_ids"]] != self.reference:
            self.crosstalk += 1
            self.errors.append(f"visitor {self.index}: generate_text differs from its solo run")

    def check(self, ids: list[int] | None) -> None:
        if ids is not None and self.reference is not None and ids != self.reference:
            self.crosstalk += 1
            self.errors.append(f"visitor {self.index}: a finished run differs from its solo run (cross-talk?)")

    def open(self, client: httpx.Client) -> None:
        """What the browser does when the page opens: the page-load event (no inputs)."""
        self.predict(client, self.page.opened, [])

    def loop(self, until: float, checkpoint: Path, rng: random.Random, actions: list[str]) -> None:
        with httpx.Client(headers=self.headers()) as client:
            self.open(client)
            while time.perf_counter() < until:
                action = rng.choice(actions)
                self.actions[action] = self.actions.get(action, 0) + 1
                try:
                    self.act(client, action, checkpoint, rng)
                except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                    self.errors.append(f"visitor {self.index}: {action}: {type(exc).__name__}: {exc}")
                if self.think:  # a person reads what came back before the next click
                    time.sleep(max(0.0, min(rng.uniform(0.5, 1.5) * self.think, until - time.perf_counter())))

    def act(self, client: httpx.Client, action: str, checkpoint: Path, rng: random.Random) -> None:
        if action == "generate":
            self.check(self.generate(client))
        elif action == "stop running":
            self.generate(client, stop="running")
        elif action == "stop queued":
            self.generate(client, stop="queued")
        elif action == "switch":
            self.switch_model(client)
        elif action == "upload":
            self.upload(client, checkpoint)
        elif action in ("rerun", "sweep", "measure", "lesson"):
            self.lab_and_lessons(client, action, rng)
        elif action == "fork":
            self.fork(client, rng)
        elif action == "dtype":
            self.dtype(client, rng)
        elif action == "draft":
            self.draft(client)
        elif action == "storm":
            self.storm(client)
        elif action == "flood":
            self.flood()
        else:
            self.api()


def small_checkpoint(folder: Path) -> Path:
    """A tiny random decoder in our own format, to upload."""
    import torch

    from playground.checkpoints.own_format import save_checkpoint
    from playground.config import ModelConfig
    from playground.models import build_model
    from playground.models.layers import init_weights

    config = ModelConfig(family="llama", vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_positions=64)
    torch.manual_seed(0)
    model = build_model(config)
    init_weights(model)
    return save_checkpoint(folder / "model.safetensors", model, config)


def run(args: argparse.Namespace, day: Any = None) -> dict[str, Any]:
    """The crowd against a server of its own; `day` (`loadtest_class.ClassDay`): the class's students instead of
    plain visitors, its solo references and its teacher (a thread beside the crowd)."""
    log = Path(tempfile.mkdtemp()) / "server.log"
    proc, url = start_server(args.weights, args.concurrency, env=AS_BEHIND_A_PROXY, log=log,
                             port=getattr(args, "port", None))
    try:
        page = Page.read(url)
        visitors = (day.visitors(page) if day is not None else
                    [Visitor(page, i, args.model, args.other_model, args.max_new_tokens, think=args.think_seconds)
                     for i in range(args.clients)])
        for v in visitors:  # what each visitor gets alone, before the crowd arrives
            with httpx.Client(headers=v.headers()) as client:
                v.open(client)
                v.reference = v.generate(client)
        if day is not None:
            day.references()
        folder = Path(tempfile.mkdtemp())
        checkpoint = small_checkpoint(folder)
        mix = (LAB_MIX if getattr(args, "lab", False) else args.mix).split(",")

        def crowd(seconds: float, seed: int) -> None:
            until = time.perf_counter() + seconds
            threads = [threading.Thread(target=v.loop, args=(until, checkpoint, random.Random(seed + v.index), mix))
                       for v in visitors]
            if day is not None:
                threads.append(threading.Thread(target=day.teach, args=(until, random.Random(seed - 1))))
            for th in threads:
                th.start()
            for th in threads:
                th.join()

        cold = rss_bytes(proc.pid)
        solo_first = [s for v in visitors for s in v.first_token_s]
        # A short crowd first: the server's one-time growth (thread pools, allocator arenas, first uses of
        # every path) is not a leak, so the baseline is the idle server after it.
        crowd(args.warmup, 10_000)
        warm_actions = sum(n for v in visitors for n in v.actions.values())
        for v in visitors:
            v.first_token_s.clear(), v.run_s.clear(), v.actions.clear()
        time.sleep(IDLE_SECONDS)
        baseline, load_before = rss_bytes(proc.pid), os.getloadavg()[0]
        held_before = holdings_of(proc, log)
        samples = Samples(proc, log, getattr(args, "holdings_every", 0.0))
        samples.start()
        crowd(args.seconds, 0)
        wall = time.perf_counter() - samples.t0
        samples.stop()
        time.sleep(IDLE_SECONDS)  # the queue drains, tabs' runs end, script sessions pass their grace
        after, load_after = rss_bytes(proc.pid), os.getloadavg()[0]
        held_after = holdings_of(proc, log)
    finally:
        stop_server(proc)
    first = sorted(s for v in visitors for s in v.first_token_s)
    runs = sorted(s for v in visitors for s in v.run_s)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

    actions: dict[str, int] = {}
    for v in visitors:
        for k, n in v.actions.items():
            actions[k] = actions.get(k, 0) + n
    if day is not None:
        for k, n in day.actions.items():
            actions[k] = actions.get(k, 0) + n
    return {
        "clients": args.clients, "seconds": round(wall, 1), "actions": actions,
        "errors": [e for v in visitors for e in v.errors] + (day.errors if day is not None else []),
        "crosstalk": sum(v.crosstalk for v in visitors),
        "first_token_p50": pct(first, 0.5), "first_token_p95": pct(first, 0.95), "first_token_max": max(first or [0]),
        "solo_first_token_p50": statistics.median(solo_first) if solo_first else float("nan"),
        "run_p50": pct(runs, 0.5), "run_p95": pct(runs, 0.95), "runs": len(runs),
        "rss_cold": cold, "warmup_seconds": args.warmup, "warmup_actions": warm_actions, "rss_before": baseline,
        "rss_peak": max([m for _, m in samples.memory] or [baseline]), "rss_after": after,
        "memory": samples.memory, "load_before": load_before, "load_after": load_after,
        "load_peak": max([x for _, x in samples.load] or [load_before]),
        "held_before": dataclasses.asdict(held_before) if held_before else None,
        "held_after": dataclasses.asdict(held_after) if held_after else None,
        "held_during": samples.held,
    }


class Samples:
    """The server's memory (VmRSS of its process tree) every half second and the machine's 1-minute load average,
    and every `held_every` seconds (0: never) what it keeps on purpose (its holdings line): a thread of its own."""

    def __init__(self, proc: Any, log: Path, held_every: float) -> None:
        self.proc, self.log, self.held_every = proc, log, held_every
        self.memory: list[tuple[float, int]] = []
        self.load: list[tuple[float, float]] = []
        self.held: list[tuple[float, dict[str, int]]] = []
        self.done = threading.Event()
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def _sample(self) -> None:
        next_held = self.held_every
        while not self.done.wait(0.5):
            t = time.perf_counter() - self.t0
            self.memory.append((t, rss_bytes(self.proc.pid)))
            self.load.append((t, os.getloadavg()[0]))
            if self.held_every and t >= next_held:
                next_held += self.held_every
                held = holdings_of(self.proc, self.log)
                if held is not None:
                    self.held.append((t, dataclasses.asdict(held)))


def held_total(held: dict[str, int] | None) -> int:
    """The bytes a `Holdings` (as a dict) keeps on purpose; 0 when the server did not say."""
    return Holdings(**held).total_bytes if held else 0


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def table(r: dict[str, Any]) -> str:
    errors = len(r["errors"]) - r["crosstalk"]
    return "\n".join([
        "| visitors | seconds | actions | errors | cross-talk | first frame after the visitor's turn, p50 / p95 / max "
        "| whole run p50 / p95 | server RSS before | peak | after |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {r['clients']} | {r['seconds']:.0f} | {sum(r['actions'].values())} | {errors} | {r['crosstalk']} | "
        f"{r['first_token_p50']:.2f} / {r['first_token_p95']:.2f} / {r['first_token_max']:.2f} s | "
        f"{r['run_p50']:.2f} / {r['run_p95']:.2f} s | {mib(r['rss_before'])} | {mib(r['rss_peak'])} | "
        f"{mib(r['rss_after'])} |",
        "",
        "Actions: " + ", ".join(f"{k} {n}" for k, n in sorted(r["actions"].items())) + ". "
        f"RSS before is the idle server after {r['warmup_seconds']:.0f} s of the same crowd "
        f"({r['warmup_actions']} actions; {mib(r['rss_cold'])} when it had served one run per visitor); "
        f"after is {IDLE_SECONDS:.0f} s after the crowd left.",
        "",
        f"Kept on purpose (the server's own count): before {held_words(r['held_before'])}; "
        f"after {held_words(r['held_after'])}. The rest of RSS (the interpreter, libraries, what the allocator has "
        f"not given back): {mib(r['rss_before'] - held_total(r['held_before']))} before, "
        f"{mib(r['rss_after'] - held_total(r['held_after']))} after.",
    ])


def held_words(held: dict[str, int] | None) -> str:
    if not held:
        return "not reported"
    h = Holdings(**held)
    return (f"{mib(h.total_bytes)} ({h.models} models {mib(h.model_bytes)}, {h.copies} precision copies "
            f"{mib(h.copy_bytes)}, {h.runs} runs of {h.tabs} tabs {mib(h.run_bytes)} + their recorded arrays "
            f"{mib(h.capture_bytes)}, Gradio's state of {h.tab_states} tabs {mib(h.tab_state_bytes)}, "
            f"{h.steps} captured steps {mib(h.step_bytes)}, {h.live_values} live screens kept "
            f"{mib(h.live_value_bytes)}, {h.token_texts} token texts {mib(h.token_text_bytes)})")


def arguments() -> argparse.ArgumentParser:
    """The page load test's flags (`loadtest_class` adds the class's day to them)."""
    parser = argparse.ArgumentParser(prog="python -m playground.tools.loadtest --page", description=__doc__.splitlines()[0])
    parser.add_argument("--page", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--model", default="tiny-lm")
    parser.add_argument("--other-model", default="tiny-seq2seq", help="what a model switch loads and leaves again")
    parser.add_argument("--weights", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds of the same crowd before the baseline")
    parser.add_argument("--mix", default=MIX, help="the actions each visitor picks from at random (default: %(default)s)")
    parser.add_argument("--lab", action="store_true", help=f"mix in the lab and the lessons: --mix {LAB_MIX}")
    parser.add_argument("--json", help="write the results (with the memory samples) to this file")
    parser.add_argument("--port", type=int, default=None, help="the server's port (default: a free one)")
    parser.add_argument("--think-seconds", type=float, default=0.0,
                        help="a visitor waits about this long between two actions (0.5x to 1.5x; default none)")
    parser.add_argument("--holdings-every", type=float, default=0.0,
                        help="ask the server what it keeps (kill -USR1) every this many seconds of the crowd")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    results = run(args)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print("\n".join(results["errors"][:20]))
    failed = verdict(results)
    print("\n".join(failed) if failed else "PASS: every target met")
    return 1 if failed else 0


def verdict(r: dict[str, Any]) -> list[str]:
    """The targets a public Space must meet under this load; one line per target missed."""
    missed = []
    if r["errors"]:
        missed.append(f"FAIL: {len(r['errors'])} errors (target 0)")
    if r["crosstalk"]:
        missed.append(f"FAIL: {r['crosstalk']} runs differ from the visitor's solo run (target 0)")
    # what the server keeps on purpose (models, copies, recordings: each within its own budget) may grow with what
    # the crowd asked for; the rest of its memory must come back
    rest_before = r["rss_before"] - held_total(r.get("held_before"))
    rest_after = r["rss_after"] - held_total(r.get("held_after"))
    if rest_after > 1.10 * rest_before:
        missed.append(f"FAIL: RSS after the crowd, less what the server keeps on purpose, is "
                      f"{rest_after / 2**20:,.0f} MiB: over 110% of {rest_before / 2**20:,.0f} MiB before")
    if r["first_token_max"] > 2.0:
        missed.append(f"FAIL: a first frame came {r['first_token_max']:.2f} s after the visitor's turn (target ≤ 2 s)")
    return missed
