"""The Gradio app: `build_app()` returns the Blocks; `launch_kwargs()` the page's CSS and head.

Modules: layout (components), wiring (events), handlers (thin adapters over the engine and the
figures), registry (one shared copy of each model), catalog (which checkpoints, safe paths,
uploads), settings (query-parameter round trip), views (engine output -> figure inputs), arrays
(model tensors -> numpy for the panels).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from playground.ui.catalog import Catalog
from playground.ui.handlers import Handlers
from playground.ui.layout import CSS, HEAD, build_page
from playground.ui.registry import ModelRegistry
from playground.ui.wiring import wire

DEFAULT_WEIGHTS = Path(__file__).resolve().parents[2] / "weights"


def build_app(
    weights_dir: Path | str | None = None,
    upload_dir: Path | str | None = None,
    *,
    max_models: int = 3,
    generate_concurrency: int = 4,
) -> gr.Blocks:
    """The playground as a Blocks app (not launched). One registry and catalog per app."""
    catalog = Catalog(weights_dir or DEFAULT_WEIGHTS, upload_dir)
    handlers = Handlers(catalog, ModelRegistry(capacity=max_models))
    page = build_page()
    with page.demo:
        wire(page, handlers, generate_concurrency=generate_concurrency)
    page.demo.playground_handlers = handlers  # for tests and the load test
    return page.demo


def launch_kwargs() -> dict[str, Any]:
    """Page-level options Gradio 6 takes at launch time."""
    return {"css": CSS, "head": HEAD, "theme": gr.themes.Soft()}


__all__ = ["build_app", "launch_kwargs"]
