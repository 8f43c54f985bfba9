"""The page: builds every component and returns them by name. No events are bound here (see wiring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from playground.ui.handlers import VIEWS, new_session
from playground.ui.limits import RANGES
from playground.ui.settings import DTYPES, MODES, UISettings

INTRO = """# Transformer Playground
Load a checkpoint into a Transformer written from scratch, turn the decoding knobs, and watch it work:
each token appears as it is chosen (shaded by its probability — hover for id and probability, click to
inspect the step), with the candidates it was picked from, the KV cache filling up, every attention
head and the model's positional encoding."""

CSS = """
.gradio-container { max-width: 1260px !important; margin: 0 auto; }
#token-output .token-stream { min-height: 4.5em; padding: 10px; border: 1px solid var(--border-color-primary);
  border-radius: 8px; font-size: 15px; overflow-wrap: anywhere; }
#token-output .tok.prompt { color: var(--body-text-color-subdued); }
#token-output .tok[data-step]:hover { outline: 2px solid #ff9800; }
.visually-hidden { position: absolute !important; left: -10000px !important; width: 1px !important;
  height: 1px !important; overflow: hidden !important; }
#gen-status p, #model-status p { margin: 0; }
.js-plotly-plot, .plot-container { max-width: 100%; }
"""

# Clicking a generated token selects its step in the inspector: the click is forwarded through a
# hidden textbox (value "step:N:time" so that clicking the same token twice still fires).
HEAD = """
<script>
document.addEventListener('click', (e) => {
  const tok = e.target.closest && e.target.closest('#token-output .tok[data-step]');
  if (!tok) return;
  const box = document.querySelector('#clicked-token textarea, #clicked-token input');
  if (!box) return;
  box.value = 'step:' + tok.dataset.step + ':' + Date.now();
  box.dispatchEvent(new Event('input', { bubbles: true }));
});
</script>
"""

# After the server returns the query string, make the full URL, show it, put it in the address bar
# and copy it (the clipboard needs a secure context; the text box is the fallback).
COPY_LINK_JS = """
(query) => {
  const url = window.location.origin + window.location.pathname + query;
  try { window.history.replaceState(null, '', url); } catch (e) {}
  if (navigator.clipboard && window.isSecureContext) { navigator.clipboard.writeText(url).catch(() => {}); }
  return url;
}
"""


@dataclass
class Page:
    demo: gr.Blocks
    settings: dict[str, gr.components.Component]  # keyed by UISettings field name
    c: dict[str, Any] = field(default_factory=dict)  # every other component by name

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["c"][name]
        except KeyError:
            raise AttributeError(name) from None


def build_page(title: str = "Transformer Playground") -> Page:
    d = UISettings()
    r = RANGES
    s: dict[str, Any] = {}
    c: dict[str, Any] = {}
    with gr.Blocks(title=title) as demo:
        c["session"] = gr.State(new_session(), time_to_live=3 * 3600)
        gr.Markdown(INTRO)
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=300):
                with gr.Group():
                    s["model"] = gr.Dropdown(label="Model (from weights/ or uploaded)", choices=[], value=None,
                                             allow_custom_value=False, elem_id="model-select")
                    s["dtype"] = gr.Radio(list(DTYPES), value=d.dtype, label="dtype", elem_id="dtype")
                    c["upload"] = gr.File(label="Upload a .safetensors file, or a checkpoint folder's files "
                                          "(config.json, model.safetensors, tokenizer files)",
                                          file_count="multiple", file_types=[".safetensors", ".json", ".txt"],
                                          height=120, elem_id="upload")
                    with gr.Row(equal_height=True):
                        c["hub_id"] = gr.Textbox(label="or a Hugging Face Hub repo id (online only)",
                                                 placeholder="owner/name", scale=3, elem_id="hub-id")
                        c["hub_load"] = gr.Button("Load", scale=1, min_width=60, elem_id="hub-load-btn")
                c["model_status"] = gr.Markdown("Loading the default model…", elem_id="model-status")
                with gr.Accordion("Decoding settings", open=True):
                    s["mode"] = gr.Radio(list(MODES), value=d.mode, label="Decoding",
                                         info="greedy: most likely token · sample: random by probability · "
                                              "beam: keep the best few sequences", elem_id="mode")
                    s["temperature"] = gr.Slider(*r["temperature"], value=d.temperature, step=0.05,
                                                 label="Temperature", visible=False, elem_id="temperature")
                    s["top_k"] = gr.Slider(*r["top_k"], value=d.top_k, step=1, label="Top-k (0 = off)", visible=False,
                                           elem_id="top-k")
                    s["top_p"] = gr.Slider(*r["top_p"], value=d.top_p, step=0.01, label="Top-p (1 = off)",
                                           visible=False, elem_id="top-p")
                    s["num_beams"] = gr.Slider(*r["num_beams"], value=d.num_beams, step=1, label="Beam width",
                                               visible=False, elem_id="num-beams")
                    s["length_penalty"] = gr.Slider(*r["length_penalty"], value=d.length_penalty, step=0.1,
                                                    label="Length penalty", visible=False, elem_id="length-penalty")
                    s["early_stopping"] = gr.Checkbox(value=d.early_stopping, label="Early stopping", visible=False,
                                                      elem_id="early-stopping")
                    s["repetition_penalty"] = gr.Slider(*r["repetition_penalty"], value=d.repetition_penalty,
                                                        step=0.05, label="Repetition penalty (1 = off)",
                                                        elem_id="repetition-penalty")
                    s["max_new_tokens"] = gr.Slider(*r["max_new_tokens"], value=d.max_new_tokens, step=1, label="Max new tokens",
                                                    elem_id="max-new-tokens")
                    s["seed"] = gr.Number(value=d.seed, precision=0, minimum=0, label="Seed (empty = random)",
                                          elem_id="seed")
                with gr.Accordion("Display", open=False):
                    s["top_candidates"] = gr.Slider(*r["top_candidates"], value=d.top_candidates, step=1,
                                                    label="Candidates shown per step", elem_id="top-candidates")
                    s["attention"] = gr.Checkbox(value=d.attention, label="Record attention (for the Attention tab)",
                                                 elem_id="record-attention")
                    s["pace_ms"] = gr.Slider(*r["pace_ms"], value=d.pace_ms, step=10,
                                             label="Slow motion: pause after each token (ms)", elem_id="pace")
            with gr.Column(scale=2, min_width=480):
                s["prompt"] = gr.Textbox(label="Prompt", lines=3, max_lines=12, elem_id="prompt")
                s["chat"] = gr.Checkbox(value=d.chat, label="Chat (wrap in the model's chat template)",
                                        visible=False, elem_id="chat")
                with gr.Row():
                    c["generate"] = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                    c["stop"] = gr.Button("Stop", variant="stop", elem_id="stop-btn")
                    c["copy_link"] = gr.Button("Copy link", elem_id="copy-link-btn")
                c["notes"] = gr.Markdown("", elem_id="notes")
                c["output"] = gr.HTML('<div class="token-stream"></div>', elem_id="token-output",
                                      label="Output")
                c["gen_status"] = gr.Markdown("", elem_id="gen-status")
                c["timing"] = gr.Markdown("", elem_id="timing")
                c["link"] = gr.Textbox(label="Link to this exact run (every setting in the URL)", interactive=False,
                                       elem_id="share-link", buttons=["copy"])
                c["clicked"] = gr.Textbox(elem_id="clicked-token", elem_classes=["visually-hidden"],
                                          show_label=False, container=False)
        with gr.Tabs(elem_id="panels"):
            with gr.Tab("Model card", id="card-tab", elem_id="card-tab"):
                c["card"] = gr.Markdown("", elem_id="model-card")
            with gr.Tab("Step inspector", id="inspector-tab", elem_id="inspector-tab"):
                gr.Markdown("Pick a step (or click a token above) to see the candidates the model chose from: "
                            "the raw probability and the probability after each processor (repetition penalty → "
                            "temperature → top-k → top-p). Grey bars were removed by a filter.")
                c["step"] = gr.Slider(0, 1, value=0, step=1, label="Step", interactive=False, elem_id="step-slider")
                c["caption"] = gr.Markdown("", elem_id="step-caption")
                c["funnel"] = gr.Plot(label="Candidates", elem_id="funnel-plot")
                c["beam_tree"] = gr.Plot(label="Beams", elem_id="beam-tree")
                c["beam_table"] = gr.Plot(label="Beam table", elem_id="beam-table")
            with gr.Tab("KV cache", id="cache-tab", elem_id="cache-tab"):
                c["kv"] = gr.Markdown("No KV-cache statistics yet.", elem_id="kv-stats")
                c["growth"] = gr.Plot(label="Cache growth", elem_id="cache-growth")
                c["rerun"] = gr.Button("Rerun the same request without the KV cache", elem_id="rerun-btn")
                c["compare_md"] = gr.Markdown("", elem_id="compare-md")
                c["compare"] = gr.Plot(label="With vs without cache", elem_id="compare-plot")
            with gr.Tab("Attention", id="attention-tab", elem_id="attention-tab"):
                with gr.Row():
                    c["att_kind"] = gr.Radio([("decoder self-attention", "self")], value="self", label="Attention",
                                             elem_id="att-kind")
                    c["att_view"] = gr.Radio(VIEWS, value=VIEWS[0], label="Large view", elem_id="att-view")
                with gr.Row():
                    c["att_layer"] = gr.Slider(0, 1, value=0, step=1, label="Layer", elem_id="att-layer")
                    c["att_head"] = gr.Slider(0, 1, value=0, step=1, label="Head", elem_id="att-head")
                    c["att_query"] = gr.Slider(0, 1, value=0, step=1, label="Query token (row)", elem_id="att-query")
                c["att_note"] = gr.Markdown("Generate something first; attention maps appear here.",
                                            elem_id="att-note")
                c["att_heat"] = gr.Plot(label="One head", elem_id="att-heat")
                c["att_grid"] = gr.Plot(label="All heads", elem_id="att-grid")
                c["att_row"] = gr.Plot(label="One query", elem_id="att-row")
                c["att_summary"] = gr.Plot(label="Per-head summary", elem_id="att-summary")
            with gr.Tab("Positional encoding", id="pe-tab", elem_id="pe-tab"):
                c["pe_md"] = gr.Markdown("", elem_id="pe-md")
                with gr.Row():
                    c["pe_length"] = gr.Slider(8, 512, value=64, step=8, label="Positions shown", elem_id="pe-length")
                    c["pe_base"] = gr.Number(value=1000, label="Compare with base", minimum=2, elem_id="pe-base")
                    c["pe_pair"] = gr.Slider(0, 31, value=0, step=1, label="RoPE dimension pair", visible=False,
                                             elem_id="pe-pair")
                c["pe1"] = gr.Plot(elem_id="pe-plot-1", show_label=False)
                c["pe2"] = gr.Plot(elem_id="pe-plot-2", show_label=False)
                c["pe3"] = gr.Plot(elem_id="pe-plot-3", show_label=False)
                c["pe4"] = gr.Plot(elem_id="pe-plot-4", show_label=False)
    return Page(demo=demo, settings=s, c=c)
