"""The Gradio app: `build_app()` returns the Blocks; `launch_kwargs()` the page's CSS and theme.

A thin adapter over the app core (`playground.app`: runs, sessions, settings, experiments, views, words).
Modules: layout (components), sections (the deep views' sections and which tab sits where), guide (the guided
path), projector (projector mode), tabs (every tab, built from its declaration: `playground.app.tabs`), wiring
(events), handlers (holds the handler groups below), models (picking and loading models), streaming (generation,
Stop, branches, the script API), runs (the run on screen: its badge, the run history and a pick, the link box),
experiments (one handler for every tab's fork, job and stop), views (the one renderer of every view), language
(English / 中文), lanes (each event's concurrency), gradio_internals (every use of Gradio's private parts), assets/ (the live screen's, the history's, the sections' and the guide's scripts, the page's CSS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from playground.app.catalog import Catalog
from playground.app.registry import ModelRegistry
from playground.app.visitors import QueuePlaces
from playground.hosting import on_space
from playground.ui.gradio_internals import (
    EndStreamsOfGoneSessions,
    HeartbeatWatch,
    UploadCache,
    VisitorQueue,
    drop_state,
    slow_queue_polling,
    tolerate_streams_closing_together,
)
from playground.ui.handlers import Handlers
from playground.ui.lanes import FIGURES, LOAD, Lanes, ServerLane
from playground.ui.layout import CSS, build_page
from playground.ui.wiring import wire

DEFAULT_WEIGHTS = Path(__file__).resolve().parents[2] / "weights"


def build_app(
    weights_dir: Path | str | None = None,
    upload_dir: Path | str | None = None,
    *,
    max_models: int = 3,
    generate_concurrency: int = 4,
    extra_weights: list[Path | str] | tuple = (),
    prefer_preloaded: bool | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    default_model: str | None = None,
) -> gr.Blocks:
    """The playground as a Blocks app (not launched). One registry and catalog per app.

    `extra_weights`: more checkpoint folders offered beside `weights_dir` (`app.py --weights DIR`).
    `prefer_preloaded` (default: on a Space) opens pages on the real model the Space preloaded.
    `default_model`: a catalog name every new page opens on, when offered (`app.py --default-model`).
    """
    if prefer_preloaded is None:
        prefer_preloaded = on_space()
    catalog = Catalog(weights_dir or DEFAULT_WEIGHTS, upload_dir, private=True, extra_weights_dirs=extra_weights,
                      prefer_preloaded=prefer_preloaded, default_model=default_model)
    handlers = Handlers(catalog, ModelRegistry(capacity=max_models, device=device, default_dtype=dtype))
    # the page's server functions run outside Gradio's queue: in a lane of their own, one at a time per tab. Not
    # stop_at: Stop only marks where its run ends, and behind a streaming tab's calls it came after the run's end.
    lane = ServerLane(Lanes(generate=generate_concurrency).server, handlers.stream.tab_of)
    stream = handlers.stream
    page = build_page(server_functions=[*(lane.wrap(fn) for fn in (stream.attention_row, stream.set_view,
                                                                   stream.select_step, stream.live_state)),
                                        stream.stop_at])
    with page.demo:
        wire(page, handlers, generate_concurrency=generate_concurrency, server_lane=lane)
    handlers.stream.scripts.app = page.demo
    page.demo.playground_is_page = handlers.sessions.has  # Gradio drops other sessions' state first
    page.demo.playground_is_live = handlers.tabs.live  # and never an open tab's (its heartbeat connected)
    handlers.drop_state = lambda key: drop_state(page.demo, key)
    # Gradio's upload route takes files without any event: its copies stay within the uploads' quota.
    UploadCache(lambda: catalog.uploads.quota_bytes).start(page.demo)
    page.demo.playground_handlers = handlers  # for tests and the load test
    page.demo.playground_page = page
    page.demo.playground_server_lane = lane  # for tests
    return page.demo


# Gradio keeps about 0.4 MiB per tab (its copy of the page's components) for this many tabs, the least recently
# active idle ones dropped first (a live tab never: tabs are bounded per visitor instead); its default of 10,000
# would allow about 4 GiB.
TAB_CAPACITY = 1000


# Gradio's queue looks for work every 1 ms while idle (on Linux). Each look takes the GIL from the
# generating thread, which hands it back after every torch op: measured with SmolLM2-135M on 2
# cores, an idle server slowed decoding from ~33 to ~28 tokens/s. 20 ms is still far below a
# generation's own latency.
QUEUE_POLL_SECONDS = 0.02


def enable_queue(demo: gr.Blocks, *, max_size: int | None = None, default_concurrency_limit: int = 2) -> gr.Blocks:
    """`demo.queue(...)` with the queue's idle polling slowed to QUEUE_POLL_SECONDS, its places held per visitor
    (`app.visitors`: an address or an account, shared fairly by its tabs and scripts), and no way around it (`api_open=False`: a queued event is
    never run by a direct POST)."""
    demo.queue(max_size=max_size, default_concurrency_limit=default_concurrency_limit, api_open=False)
    slow_queue_polling(demo, QUEUE_POLL_SECONDS)
    tolerate_streams_closing_together(demo)
    is_page = getattr(demo, "playground_is_page", lambda key: False)
    handlers = getattr(demo, "playground_handlers", None)
    tabs_of = handlers.tabs.count if handlers is not None else (lambda who: 0)  # a visitor's scripts scale with it
    # a tab's newer redraw or model pick replaces its older one still waiting: only the last selection runs
    demo.playground_queue = VisitorQueue(demo, QueuePlaces(max_size), is_page, frozenset({FIGURES, LOAD}), tabs_of)
    return demo


def launch_kwargs(demo: gr.Blocks | None = None) -> dict[str, Any]:
    """Page-level options Gradio 6 takes at launch time; with the app, also the largest file Gradio's
    upload route takes: what one visitor may keep (`upload_limit_bytes`), and the watch on the tabs' heartbeats.

    Gradio's run history and server-side rendering are off explicitly (not left to GRADIO_RUN_HISTORY /
    GRADIO_SSR_MODE): the playground has its own run history, and the pinned Gradio is inside an advisory that
    both together open (`playground.hosting_advisories`)."""
    kwargs: dict[str, Any] = {"css": CSS, "theme": gr.themes.Soft(), "state_session_capacity": TAB_CAPACITY,
                              "run_history": False, "ssr_mode": False}
    if demo is not None:
        kwargs["max_file_size"] = upload_limit_bytes(demo)
        # an open tab's heartbeat keeps its session (and its uploads) alive: only a closed or gone tab expires
        handlers = demo.playground_handlers
        watch = Middleware(HeartbeatWatch, on_beat=lambda key: (handlers.sessions.touch(key), handlers.tabs.seen(key)),
                           on_connect=handlers.tabs.connect, on_disconnect=handlers.tabs.disconnect)
        kwargs["app_kwargs"] = {"middleware": [watch, Middleware(EndStreamsOfGoneSessions)]}
    return kwargs


def upload_limit_bytes(demo: gr.Blocks) -> int:
    """The largest upload the app could store: a checkpoint's weights limit, within one visitor's share."""
    models = demo.playground_handlers.models
    return min(models.limits.max_file_bytes, models.catalog.uploads.owner_quota_bytes)


__all__ = ["build_app", "enable_queue", "launch_kwargs"]
