"""Concurrency is declared once: no click may lower another event's limit for the server's life (round 5, row 1)."""

from __future__ import annotations

import gradio as gr
import pytest

from playground.ui import build_app, enable_queue
from playground.ui.lanes import GENERATE, JOBS, Lanes, check
from tests.ui_fixtures import save_tiny_decoder


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    app = build_app(weights, tmp_path_factory.mktemp("uploads"), generate_concurrency=16)
    return enable_queue(app, default_concurrency_limit=2)


def effective_limits(demo) -> dict[str, int | None]:
    return {name: q.concurrency_limit for name, q in demo._queue.event_queue_per_concurrency_id.items()}


def test_every_kind_of_click_leaves_every_lanes_limit_as_declared(demo):
    """Gradio makes an id's queue when its first event arrives and keeps the lowest limit any later event of the
    id names: each click is that call. Before the lanes, one click of "Run again without the cache" (or Time the
    cache, Measure SDPA, the head sweep: bound to the generate id without a limit) left every generation on the
    server two at a time instead of 16."""
    declared = Lanes(generate=16).limits()
    queued = [fn for fn in demo.fns.values() if fn.queue and fn.fn is not None
              and not any(trigger == "unload" for _, trigger in fn.targets)]
    names = {fn.name for fn in queued}
    assert {"generate", "job_rerun", "job_time_cache", "job_measure_sdpa", "job_lab_sweep", "fork_kvlab_fork", "pick", "generate_text"} <= names
    for _round in range(2):  # each lane's queue made by its first click, then every click again
        for fn in queued:
            demo._queue.create_event_queue_for_fn(fn)
            limits = effective_limits(demo)
            assert {k: limits[k] for k in declared if k in limits} == {k: declared[k] for k in declared if k in limits}, (
                f"after a click of {fn.name!r}")
    assert effective_limits(demo)[GENERATE] == 16
    assert effective_limits(demo)[JOBS] == 2


def test_the_page_refuses_an_event_bound_outside_the_lanes():
    lanes = Lanes(generate=8)
    with gr.Blocks() as page:
        button, box = gr.Button(), gr.Textbox()
        button.click(lambda: "ok", None, box, **lanes.lane(GENERATE))
    check(page.fns.values(), lanes.limits())  # the one lane, its one limit
    with page:
        button.click(lambda: "a job", None, box, concurrency_id=GENERATE)  # the limit left to Gradio's default
    with pytest.raises(ValueError, match="concurrency id 'generate' with limit 'default'"):
        check(page.fns.values(), lanes.limits())
