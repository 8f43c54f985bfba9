"""The deep views' own tabs: the sections under the live screen, and the panels built here (the step inspector,
all heads, the KV cache, positional encoding, lessons, the model card); an experiment's tab comes from its own
layout (`playground.ui.experiment_tabs`), Class tools from `playground.ui.teacher_layout`. Components only: no
events are bound here (see wiring)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from playground.app import lessons as lesson_registry
from playground.app.words import t
from playground.ui.experiment_tabs import build_tab
from playground.ui.sections import SECTIONS
from playground.ui.teacher_layout import build_teacher_tab

LESSONS = tuple(lesson_registry.LESSONS)  # the app core's registry, in its order
LESSON_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int4")


def what_if_choices(kind: str, lang: str) -> list[tuple[str, str]]:
    """The KV calculator's attention or number-format choices; the first keeps the preset's own."""
    options = ("MHA", "GQA", "MQA") if kind == "attention" else LESSON_DTYPES
    return [(t("lesson_as_preset", lang), "")] + [(o, o) for o in options]


def lesson_choices(lang: str) -> list[tuple[str, str]]:
    return [(t(f"lesson_{name}", lang), name) for name in LESSONS]


def scale_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("scale_linear", lang), "linear"), (t("scale_log", lang), "log")]


def view_choices(lang: str, grouped: bool) -> list[tuple[str, str]]:
    """The large attention view's choices; "mean per KV group" only where heads share K/V."""
    choices = [(t("view_head", lang), "head"), (t("view_mean", lang), "mean"), (t("view_max", lang), "max")]
    return choices + ([(t("view_group", lang), "group")] if grouped else [])


def build_sections(c: dict[str, Any], named: Callable[..., Any], lang: str,
                   choices: dict[str, Callable[[str], list]], texts: dict[str, Callable[[str], str]],
                   labels: dict[str, tuple[str, str | None]]) -> None:
    """The deep views' sections (inside the outer Tabs `#deep-views`): each a tab with a one-line hint and its views
    as tabs of its own (`#<section>-tabs`); Class tools is one page. Component names: `section_<name>`,
    `section_<name>_hint`, `tabs_<name>`."""
    own = {"inspector": _inspector_tab, "attention": _attention_tab, "cache": _cache_tab,
           "positional": _positional_tab, "lessons": _lessons_tab, "card": _card_tab}
    for section in SECTIONS:
        if not section.tabs:  # Class tools: the teacher tab is the section
            build_teacher_tab(c, named, lang)
            continue
        name = section.name
        with gr.Tab(t(f"section_{name}", lang), id=name, elem_id=section.elem_id) as tab:
            c[f"section_{name}"] = tab
            labels[f"section_{name}"] = (f"section_{name}", None)
            texts[f"section_{name}_hint"] = lambda code, key=f"section_{name}_hint": t(key, code)
            c[f"section_{name}_hint"] = gr.Markdown(t(f"section_{name}_hint", lang), elem_classes=["pg-section-hint"])
            with gr.Tabs(elem_id=f"{name}-tabs", overflow_behavior="wrap", elem_classes=["pg-section-tabs"]) as inner:
                c[f"tabs_{name}"] = inner
                for tab_id in section.tabs:
                    if tab_id in own:
                        own[tab_id](c, named, lang)
                    else:
                        build_tab(tab_id, c, named, lang, choices, texts)


def _inspector_tab(c: dict[str, Any], named: Callable[..., Any], lang: str) -> None:
    with gr.Tab(t("tab_inspector", lang), id="inspector", elem_id="inspector-tab") as tab:
        c["tab_inspector"] = tab
        c["inspector_intro"] = gr.Markdown(t("inspector_intro", lang), elem_id="inspector-intro")
        c["caption"] = gr.Markdown(t("nothing_yet", lang), elem_id="step-caption")
        c["funnel"] = gr.Plot(elem_id="funnel-plot", show_label=False)
        c["beam_tree"] = gr.Plot(elem_id="beam-tree", show_label=False, visible=False)
        c["beam_table"] = gr.Plot(elem_id="beam-table", show_label=False, visible=False)


def _attention_tab(c: dict[str, Any], named: Callable[..., Any], lang: str) -> None:
    with gr.Tab(t("tab_attention", lang), id="attention", elem_id="attention-tab") as tab:
        c["tab_attention"] = tab
        c["attention_intro"] = gr.Markdown(t("attention_intro", lang), elem_id="attention-intro")
        with gr.Row():
            named("att_kind", gr.Radio([(t("kind_self", lang), "self")], value="self",
                                       label=t("attention_kind",
                                               lang), elem_id="att-kind"), "attention_kind")
            named("att_view", gr.Radio(view_choices(lang, grouped=True), value="head",
                                       label=t("large_view", lang), elem_id="att-view"), "large_view")
            named("att_scale", gr.Radio(scale_choices(lang),
                                        value="linear", label=t("colour_scale", lang),
                                        elem_id="att-scale"), "colour_scale")
        with gr.Row():
            named("att_layer", gr.Slider(0, 1, value=0, step=1, label=t("layer", lang),
                                         elem_id="att-layer"),
                  "layer")
            named("att_head", gr.Slider(0, 1, value=0, step=1, label=t("head", lang),
                                        elem_id="att-head"),
                  "head")
            named("att_query", gr.Slider(0, 1, value=0, step=1, label=t("query", lang),
                                         elem_id="att-query"),
                  "query")
            named("att_sink", gr.Checkbox(value=False, label=t("hide_sink", lang), elem_id="att-sink"),
                  "hide_sink")
        c["att_note"] = gr.Markdown(t("nothing_yet", lang), elem_id="att-note")
        c["att_grid"] = gr.Plot(elem_id="att-grid", show_label=False)
        c["att_heat"] = gr.Plot(elem_id="att-heat", show_label=False)
        c["att_row"] = gr.Plot(elem_id="att-row", show_label=False)
        c["att_summary"] = gr.Plot(elem_id="att-summary", show_label=False)


def _cache_tab(c: dict[str, Any], named: Callable[..., Any], lang: str) -> None:
    with gr.Tab(t("tab_cache", lang), id="cache", elem_id="cache-tab") as tab:
        c["tab_cache"] = tab
        c["kv"] = gr.Markdown(t("cache_intro", lang), elem_id="kv-stats")
        c["growth"] = gr.Plot(elem_id="cache-growth", show_label=False)
        named("rerun", gr.Button(t("rerun", lang), elem_id="rerun-btn"), "rerun")
        c["compare_md"] = gr.Markdown("", elem_id="compare-md")
        c["compare"] = gr.Plot(elem_id="compare-plot", show_label=False)


def _positional_tab(c: dict[str, Any], named: Callable[..., Any], lang: str) -> None:
    with gr.Tab(t("tab_positional", lang), id="positional", elem_id="pe-tab") as tab:
        c["tab_positional"] = tab
        c["pe_md"] = gr.Markdown("", elem_id="pe-md")
        with gr.Row():
            named("pe_length", gr.Slider(8, 2048, value=64, step=8, label=t("pe_length", lang),
                                         elem_id="pe-length"), "pe_length")
            named("pe_base", gr.Number(value=1000, minimum=2, label=t("pe_base", lang),
                                       elem_id="pe-base"),
                  "pe_base")
            named("pe_pair", gr.Slider(0, 31, value=0, step=1, visible=False, label=t("pe_pair", lang),
                                       elem_id="pe-pair"), "pe_pair")
        c["pe1"] = gr.Plot(elem_id="pe-plot-1", show_label=False)
        c["pe2"] = gr.Plot(elem_id="pe-plot-2", show_label=False)
        c["pe3"] = gr.Plot(elem_id="pe-plot-3", show_label=False)
        c["pe4"] = gr.Plot(elem_id="pe-plot-4", show_label=False)
        c["pe5"] = gr.Plot(elem_id="pe-plot-5", show_label=False)


def _lessons_tab(c: dict[str, Any], named: Callable[..., Any], lang: str) -> None:
    with gr.Tab(t("tab_lessons", lang), id="lessons", elem_id="lessons-tab") as tab:
        c["tab_lessons"] = tab
        # the lessons, one at a time in this tab (each is one view of the run on screen)
        named("lesson", gr.Radio(lesson_choices(lang), value=LESSONS[0], elem_id="lesson-pick",
                                 label=t("lessons_pick", lang)), "lessons_pick")  # a session starts on the first
        with gr.Row():
            named("lesson_kind", gr.Radio([(t("kind_self", lang), "self")], value="self", visible=False,
                                          label=t("attention_kind", lang), elem_id="lesson-kind"),
                  "attention_kind")
            named("lesson_layer", gr.Slider(0, 1, value=0, step=1, label=t("layer", lang),
                                            elem_id="lesson-layer"), "layer")
            named("lesson_head", gr.Slider(0, 1, value=0, step=1, label=t("head", lang),
                                           elem_id="lesson-head"), "head")
        with gr.Row(visible=False) as memory_row:
            c["memory_row"] = memory_row
            named("lesson_preset", gr.Dropdown(choices=[], value=None, label=t("lesson_preset", lang),
                                               elem_id="lesson-preset", scale=3, min_width=360),
                  "lesson_preset")
            named("lesson_attention", gr.Radio(what_if_choices("attention", lang), value="",
                                               label=t("lesson_attention", lang), min_width=180,
                                               elem_id="lesson-attention"), "lesson_attention")
            named("lesson_dtype", gr.Radio(what_if_choices("dtype", lang), value="",
                                           label=t("lesson_dtype", lang), min_width=180,
                                           elem_id="lesson-dtype"), "lesson_dtype")
            named("lesson_batch", gr.Slider(1, 64, value=1, step=1, label=t("lesson_batch", lang),
                                            elem_id="lesson-batch", min_width=240), "lesson_batch")
            named("lesson_tokens", gr.Slider(0, 131072, value=0, step=256, label=t("lesson_tokens",
                                                                                   lang),
                                             elem_id="lesson-tokens", min_width=240), "lesson_tokens")
        with gr.Row():
            named("time_cache", gr.Button(t("lesson_time_cache", lang), visible=False,
                                          elem_id="time-cache-btn"), "lesson_time_cache")
            named("measure_sdpa", gr.Button(t("lesson_measure", lang), visible=False,
                                            elem_id="measure-sdpa-btn"), "lesson_measure")
        c["lesson_md"] = gr.Markdown(t("lesson_needs_run", lang), elem_id="lesson-md")
        c["lesson_plot1"] = gr.Plot(elem_id="lesson-plot-1", show_label=False)
        c["lesson_plot2"] = gr.Plot(elem_id="lesson-plot-2", show_label=False)


def _card_tab(c: dict[str, Any], named: Callable[..., Any], lang: str) -> None:
    with gr.Tab(t("tab_card", lang), id="card", elem_id="card-tab") as tab:
        c["tab_card"] = tab
        c["card"] = gr.HTML("", elem_id="model-card")
