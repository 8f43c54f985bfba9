"""The Causal lab tab's components, and the SVG button every figure's toolbar gets (no events here)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.app.limits import RANGES
from playground.app.words import t
from playground.models.quantize import PRECISIONS

# Every plotly figure on the page gets an SVG download beside plotly's own PNG camera: the button is
# added to each toolbar as it appears (plotly rebuilds toolbars on redraws, so it watches the page).
EXPORT_JS = """
(() => {
  if (window.__pgSvgExport) return;
  window.__pgSvgExport = true;
  const icon = '<svg viewBox="0 0 1000 1000" class="icon" height="1em" width="1em"><path d="M500 80v560m0 0l-200-200m200 200l200-200M140 720v180h720V720" stroke="currentColor" stroke-width="90" fill="none"/></svg>';
  const add = (gd) => {
    const bar = gd.querySelector('.modebar');
    if (!bar || bar.querySelector('.pg-svg-btn') || !window.Plotly) return;
    const group = document.createElement('div');
    group.className = 'modebar-group';
    const a = document.createElement('a');
    a.className = 'modebar-btn pg-svg-btn';
    a.setAttribute('rel', 'tooltip');
    a.setAttribute('data-title', document.documentElement.lang === 'zh-CN' ? '下载为 SVG' : 'Download as SVG');
    a.innerHTML = icon;
    a.addEventListener('click', () => {
      const holder = gd.closest('[id]');
      window.Plotly.downloadImage(gd, { format: 'svg', filename: holder && holder.id ? holder.id : 'figure' });
    });
    group.appendChild(a);
    bar.prepend(group);
  };
  let queued = false;
  const scan = () => { queued = false; document.querySelectorAll('.js-plotly-plot').forEach(add); };
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(scan); } })
    .observe(document.body, { childList: true, subtree: true });
  scan();
})();
"""


def build_tab(c: dict[str, Any], named, lang: str) -> None:
    """The Lab tab's components (inside the deep views' Tabs)."""
    with gr.Tab(t("tab_lab", lang), id="lab", elem_id="lab-tab") as tab:
        c["tab_lab"] = tab
        c["lab_intro"] = gr.Markdown(t("lab_intro", lang), elem_id="lab-intro")
        with gr.Row():
            named("lab_layer", gr.Slider(0, 1, value=0, step=1, label=t("lab_layer", lang), elem_id="lab-layer"),
                  "lab_layer")
            named("lab_head", gr.Slider(0, 1, value=0, step=1, label=t("lab_head", lang), elem_id="lab-head"),
                  "lab_head")
        with gr.Row(elem_id="lab-buttons"):
            named("lab_ablate_head", gr.Button(t("lab_ablate_head", lang), variant="primary",
                                               elem_id="lab-ablate-head"), "lab_ablate_head")
            named("lab_ablate_mlp", gr.Button(t("lab_ablate_mlp", lang), elem_id="lab-ablate-mlp"), "lab_ablate_mlp")
        c["lab_md"] = gr.Markdown(t("lab_needs_run", lang), elem_id="lab-divergence-md")
        c["lab_div"] = gr.Plot(elem_id="lab-divergence-plot", show_label=False, visible=False)
        # An edited run's results read the run on screen or, switched, its original (shown once there is one).
        named("lab_run", gr.Radio([("shown", "shown"), ("original", "original")], value="shown", visible=False,
                                  label=t("lab_run", lang), elem_id="lab-run"), "lab_run")
        named("lab_versus", gr.Checkbox(value=False, label=t("lab_versus", lang), elem_id="lab-versus"), "lab_versus")
        c["lab_attr_md"] = gr.Markdown("", elem_id="lab-attribution-md")
        c["lab_attr"] = gr.Plot(elem_id="lab-attribution-plot", show_label=False, visible=False)
        with gr.Row(elem_id="lab-sweep-buttons"):
            named("lab_sweep", gr.Button(t("lab_sweep", lang), elem_id="lab-sweep-btn"), "lab_sweep")
            named("lab_sweep_stop", gr.Button(t("lab_sweep_stop", lang), variant="stop", elem_id="lab-sweep-stop",
                                              min_width=80), "lab_sweep_stop")
        c["lab_sweep_md"] = gr.Markdown("", elem_id="lab-sweep-md")
        c["lab_sweep_plot"] = gr.Plot(elem_id="lab-sweep-plot", show_label=False, visible=False)
        c["lab_steer_title"] = gr.Markdown(t("lab_steer_title", lang), elem_id="lab-steer-title")
        with gr.Row():
            named("lab_positive", gr.Textbox(label=t("lab_positive", lang), elem_id="lab-positive"), "lab_positive")
            named("lab_negative", gr.Textbox(label=t("lab_negative", lang), elem_id="lab-negative"), "lab_negative")
        with gr.Row():
            named("lab_steer_layer", gr.Slider(0, 1, value=0, step=1, label=t("lab_layer", lang),
                                               elem_id="lab-steer-layer"), "lab_layer")
            named("lab_scale", gr.Slider(-16, 16, value=4, step=0.5, label=t("lab_scale", lang), elem_id="lab-scale"),
                  "lab_scale")
        named("lab_steer", gr.Button(t("lab_steer", lang), variant="primary", elem_id="lab-steer-btn"), "lab_steer")
        c["lab_steer_md"] = gr.Markdown("", elem_id="lab-steer-md")
        # Activation patching: another prompt's residual at one position and block, put into this run.
        c["lab_patch_title"] = gr.Markdown(patch_title(lang), elem_id="lab-patch-title")
        named("lab_patch_prompt", gr.Textbox(label=t("lab_patch_prompt", lang), elem_id="lab-patch-prompt"),
              "lab_patch_prompt")
        with gr.Row():
            named("lab_patch_layer", gr.Slider(0, 1, value=0, step=1, label=t("lab_patch_layer", lang),
                                               elem_id="lab-patch-layer"), "lab_patch_layer")
            named("lab_patch_position", gr.Slider(-1, 1, value=-1, step=1, label=t("lab_patch_position", lang),
                                                  elem_id="lab-patch-position"), "lab_patch_position")
        named("lab_patch", gr.Button(t("lab_patch", lang), variant="primary", elem_id="lab-patch-btn"), "lab_patch")
        c["lab_patch_md"] = gr.Markdown("", elem_id="lab-patch-md")


def build_kv_tab(c: dict[str, Any], named, lang: str) -> None:
    """The KV-cache lab tab: the cache policy (these are run settings: links carry them) and the fork button;
    what the lab draws is its View's (`playground.app.views.kv_policy`)."""
    with gr.Tab(t("tab_kvlab", lang), id="kvlab", elem_id="kvlab-tab") as tab:
        c["tab_kvlab"] = tab
        c["kvlab_intro"] = gr.Markdown(t("kvlab_intro", lang), elem_id="kvlab-intro")
        with gr.Row(elem_id="kvlab-policy"):
            for name, key, elem in (("kv_window", "kvlab_window", "kv-window"), ("kv_sink", "kvlab_sink", "kv-sink"),
                                    ("kv_heavy", "kvlab_heavy", "kv-heavy")):
                named(name, gr.Slider(*RANGES[name], value=0, step=1, label=t(key, lang), info=t(f"{key}_info", lang),
                                      elem_id=elem, min_width=200), key, f"{key}_info")
            named("kv_dtype", gr.Radio(kv_dtype_choices(lang), value="", label=t("kvlab_dtype", lang),
                                       elem_id="kv-dtype", min_width=200), "kvlab_dtype")
            named("rope_scaling", gr.Dropdown(rope_choices(lang), value="", label=t("kvlab_rope", lang),
                                              elem_id="rope-scaling", min_width=200), "kvlab_rope")
        named("kvlab_fork", gr.Button(t("kvlab_fork", lang), variant="primary", elem_id="kvlab-fork-btn"), "kvlab_fork")
        c["kvlab_md"] = gr.Markdown(t("kvlab_needs_run", lang), elem_id="kvlab-md")
        c["kvlab_bytes"] = gr.Plot(elem_id="kvlab-bytes-plot", show_label=False, visible=False)
        c["kvlab_div"] = gr.Plot(elem_id="kvlab-divergence-plot", show_label=False, visible=False)
        c["kvlab_sink"] = gr.Plot(elem_id="kvlab-sink-plot", show_label=False, visible=False)


def build_precision_tab(c: dict[str, Any], named, lang: str) -> None:
    """The precision what-if tab: the weight precision (a run setting: links carry it) and the fork button; what
    the lab draws is its View's (`playground.app.views.precision`)."""
    with gr.Tab(t("tab_precision", lang), id="precision", elem_id="precision-tab") as tab:
        c["tab_precision"] = tab
        c["precision_intro"] = gr.Markdown(t("precision_intro", lang), elem_id="precision-intro")
        named("weight_precision", gr.Radio(precision_choices(lang), value="", label=t("precision_pick", lang),
                                           elem_id="weight-precision"), "precision_pick")
        named("precision_fork", gr.Button(t("precision_fork", lang), variant="primary", elem_id="precision-fork-btn"),
              "precision_fork")
        c["precision_md"] = gr.Markdown(t("precision_needs_run", lang), elem_id="precision-md")
        c["precision_steps"] = gr.Plot(elem_id="precision-steps-plot", show_label=False, visible=False)
        c["precision_layers"] = gr.Plot(elem_id="precision-layers-plot", show_label=False, visible=False)


def build_speculative_tab(c: dict[str, Any], named, lang: str) -> None:
    """The speculative decoding tab: the drafter and K (run settings: links carry them) and the fork button; what
    the lab draws is its View's (`playground.app.views.speculative`)."""
    with gr.Tab(t("tab_speculative", lang), id="speculative", elem_id="spec-tab") as tab:
        c["tab_speculative"] = tab
        c["spec_intro"] = gr.Markdown(t("spec_intro", lang), elem_id="spec-intro")
        with gr.Row():
            named("draft", gr.Dropdown(draft_choices(lang), value="", allow_custom_value=True, label=t("spec_pick", lang),
                                       info=t("spec_pick_info", lang), elem_id="draft", min_width=240),
                  "spec_pick", "spec_pick_info")
            named("draft_tokens", gr.Slider(*RANGES["draft_tokens"], value=4, step=1, label=t("spec_tokens", lang),
                                            elem_id="draft-tokens", min_width=240), "spec_tokens")
        named("spec_fork", gr.Button(t("spec_fork", lang), variant="primary", elem_id="spec-fork-btn"), "spec_fork")
        c["spec_md"] = gr.Markdown(t("spec_needs_run", lang), elem_id="spec-md")
        c["spec_checks"] = gr.Plot(elem_id="spec-checks-plot", show_label=False, visible=False)
        c["spec_residual"] = gr.Plot(elem_id="spec-residual-plot", show_label=False, visible=False)


def draft_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("spec_off", lang), ""), ("ngram", "ngram"), *((f"layer:{k}", f"layer:{k}") for k in (1, 2, 4, 8, 12))]


def precision_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("precision_asloaded", lang), ""), *((p, p) for p in PRECISIONS)]


def rope_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("kvlab_dtype_none", lang), ""), *((f"{k}:{f}", f"{k}:{f}") for f in (2, 4) for k in ("linear", "ntk", "yarn"))]


def kv_dtype_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("kvlab_dtype_none", lang), ""), ("int8", "int8"), ("int4", "int4")]


INTRO_NAMES = ("lab_intro", "lab_steer_title", "lab_patch_title", "kvlab_intro", "precision_intro", "spec_intro")  # the lab's plain Markdown texts


def patch_title(lang: str) -> str:
    return t("lab_patch_title", lang) + "\n\n" + t("lab_patch_intro", lang)


def intro_updates(lang: str) -> list[str]:
    """The lab's plain Markdown texts in `lang`, in the order of `INTRO_NAMES` (for the language switch)."""
    return [t("lab_intro", lang), t("lab_steer_title", lang), patch_title(lang), t("kvlab_intro", lang),
            t("precision_intro", lang), t("spec_intro", lang)]
