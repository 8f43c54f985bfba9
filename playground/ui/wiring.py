"""Binds the page's events to the handlers: what triggers what, queues and concurrency limits."""

from __future__ import annotations

import gradio as gr

from playground.ui.handlers import Handlers
from playground.ui.layout import COPY_LINK_JS, Page
from playground.ui.settings import FIELDS

SAMPLE_ONLY = ("temperature", "top_k", "top_p")
BEAM_ONLY = ("num_beams", "length_penalty", "early_stopping")


def mode_visibility(mode: str) -> tuple:
    sample, beam = mode == "sample", mode == "beam"
    return tuple(gr.update(visible=sample) for _ in SAMPLE_ONLY) + tuple(gr.update(visible=beam) for _ in BEAM_ONLY)


def wire(page: Page, h: Handlers, *, generate_concurrency: int = 4) -> None:
    p, s = page, page.settings
    settings_inputs = [s[f] for f in FIELDS]
    mode_outputs = [s[f] for f in SAMPLE_ONLY + BEAM_ONLY]
    load_outputs = [s["model"], p.card, p.model_status, p.session, s["prompt"], s["chat"], p.att_kind]
    pe_inputs = [p.session, p.pe_length, p.pe_base, p.pe_pair]
    pe_outputs = [p.pe_md, p.pe1, p.pe2, p.pe3, p.pe4, p.pe_pair]
    att_inputs = [p.session, p.att_kind, p.att_layer, p.att_head, p.att_view, p.att_query]
    att_outputs = [p.att_grid, p.att_heat, p.att_row, p.att_summary, p.att_note, p.att_layer, p.att_head,
                   p.att_query]
    load_kw = dict(concurrency_limit=2, concurrency_id="load")

    def after_load(dep):
        return dep.success(h.positional_for_session, pe_inputs, pe_outputs, concurrency_limit=2, concurrency_id="figures")

    # Page load: settings from the URL, then the selected model, its PE panel and the mode's knobs.
    start = p.demo.load(h.on_page_load, None, [*settings_inputs, p.notes], queue=False)
    start.then(mode_visibility, s["mode"], mode_outputs, queue=False)
    after_load(start.then(h.load, [s["model"], s["dtype"], p.session], load_outputs, **load_kw))

    s["mode"].change(mode_visibility, s["mode"], mode_outputs, queue=False)
    for trigger in (s["model"].input, s["dtype"].input):
        after_load(trigger(h.load, [s["model"], s["dtype"], p.session], load_outputs, **load_kw))
    after_load(p.upload.upload(h.upload, [p.upload, s["dtype"], p.session], load_outputs, **load_kw))
    for trigger in (p.hub_load.click, p.hub_id.submit):
        after_load(trigger(h.load_hub, [p.hub_id, s["dtype"], p.session], load_outputs, **load_kw))

    # Generation: streamed. Stop sets the session's stop event: the engine ends at its next step and the
    # handler paints a final "stopped" frame. (Gradio's `cancels=` would also halt it, but marks every
    # output of the cancelled event with an "Error" badge and skips the final frame, so it is not used.)
    gen_outputs = [p.output, p.gen_status, p.notes, p.timing, p.kv, p.growth, p.step, p.funnel, p.beam_tree,
                   p.beam_table, p.caption, p.session]
    gen_kw = dict(concurrency_limit=generate_concurrency, concurrency_id="generate", trigger_mode="once",
                  show_progress="minimal")
    for trigger in (p.generate.click, s["prompt"].submit):
        run = trigger(h.generate, [*settings_inputs, p.session], gen_outputs, **gen_kw)
        run.success(h.attention_latest, att_inputs[:-1], att_outputs, concurrency_limit=2, concurrency_id="figures")
    p.stop.click(h.stop, None, p.gen_status, queue=False)

    # Step inspector: slider, or a click on a token (forwarded by page JS through a hidden textbox).
    inspect_outputs = [p.funnel, p.beam_tree, p.beam_table, p.caption, p.output]
    p.step.release(h.inspect, [p.step, p.session], inspect_outputs, concurrency_id="figures")
    p.clicked.change(h.clicked_step, p.clicked, p.step, queue=False).then(
        h.inspect, [p.step, p.session], inspect_outputs, concurrency_id="figures")

    # KV cache comparison, attention explorer, positional encodings.
    p.rerun.click(h.rerun_without_cache, p.session, [p.compare, p.compare_md], concurrency_id="generate")
    for control in (p.att_kind.change, p.att_view.change, p.att_layer.release, p.att_head.release,
                    p.att_query.release):
        control(h.attention, att_inputs, att_outputs, concurrency_id="figures")
    for control in (p.pe_length.release, p.pe_base.submit, p.pe_pair.release):
        control(h.positional_for_session, pe_inputs, pe_outputs, concurrency_id="figures")

    # Sharing: the server writes the query string; the browser turns it into a full URL.
    p.copy_link.click(h.make_link, settings_inputs, p.link, queue=False).then(
        None, p.link, p.link, js=COPY_LINK_JS, queue=False)

    # Scripts (gradio_client, the load test) call generation by name.
    gr.api(h.generate_text, api_name="generate_text", concurrency_limit=generate_concurrency,
           concurrency_id="generate")
    p.demo.unload(h.unload)
