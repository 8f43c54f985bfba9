"""Every experiment's tab, built from its layout (`playground.app.experiments`): its words, widgets, buttons and the
outputs its view draws (no events here: `playground.ui.experiments` binds them). Nothing here knows one experiment
from another."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from playground.app.experiments import EXPERIMENTS
from playground.app.experiments.base import Action, Out, Row, Widget, Words
from playground.app.words import t


def build_tab(tab_id: str, page_parts: dict[str, Any], named: Callable[..., Any], lang: str,
              choices: dict[str, Callable[[str], list]], texts: dict[str, Callable[[str], str]]) -> None:
    """The tab of the experiment whose tab id is `tab_id` (inside its section's Tabs). `named(name, component,
    label, info)` keeps a component and its words' keys; `choices` and `texts` collect what the language switch
    says again."""
    experiment = next(e for e in EXPERIMENTS if e.tab == tab_id)
    with gr.Tab(t(f"tab_{experiment.tab}", lang), id=experiment.tab, elem_id=experiment.elem_id) as tab:
        page_parts[f"tab_{experiment.tab}"] = tab
        forks_said = False
        for part in experiment.layout:
            if isinstance(part, Row):
                with gr.Row(elem_id=part.elem_id):
                    for inner in part.parts:
                        _build(inner, page_parts, named, lang, choices, texts)
            else:
                _build(part, page_parts, named, lang, choices, texts)
            inner = part.parts if isinstance(part, Row) else (part,)
            if not forks_said and any(isinstance(p, Action) and p.kind == "fork" for p in inner):
                _fork_lines(experiment, page_parts, named, lang)  # under the lab's (first) fork button
                forks_said = True


def fork_parts(experiment: Any) -> tuple[str, str, str]:
    """The names of the parts every lab with a fork has under its fork button: the line that says what a fork of
    the run on screen keeps, the box that keeps it, and the line where a press that cannot run says why."""
    return f"{experiment.name}_fork_from", f"{experiment.name}_keep", f"{experiment.name}_said"


def _fork_lines(experiment: Any, c: dict[str, Any], named: Callable[..., Any], lang: str) -> None:
    line, keep, said = fork_parts(experiment)
    c[line] = gr.Markdown("", elem_id=f"{experiment.tab}-fork-from", elem_classes=["pg-fork-from"])
    named(keep, gr.Checkbox(value=False, label=t("fork_keep", lang), elem_id=f"{experiment.tab}-fork-keep",
                            visible=False), "fork_keep")
    c[said] = gr.Markdown("", elem_id=f"{experiment.tab}-fork-said", elem_classes=["pg-fork-said"])


def _build(part: Any, c: dict[str, Any], named: Callable[..., Any], lang: str,
           choices: dict[str, Callable[[str], list]], texts: dict[str, Callable[[str], str]]) -> None:
    if isinstance(part, Words):
        texts[part.name] = lambda code, keys=part.keys: "\n\n".join(t(k, code) for k in keys)
        c[part.name] = gr.Markdown(texts[part.name](lang), elem_id=part.elem_id)
    elif isinstance(part, Out):
        c[part.name] = (gr.Markdown(t(part.words, lang) if part.words else "", elem_id=part.elem_id)
                        if part.kind == "markdown" else gr.HTML("", elem_id=part.elem_id) if part.kind == "html"
                        else gr.Plot(elem_id=part.elem_id, show_label=False, visible=False))
    elif isinstance(part, Action):
        variant = "stop" if part.kind == "stop" else ("primary" if part.primary else "secondary")
        named(part.name, gr.Button(t(part.label, lang), variant=variant, elem_id=part.elem_id,
                                   min_width=part.min_width), part.label)
    elif isinstance(part, Widget):
        if part.choices is not None:
            choices[part.name] = part.choices
        named(part.name, _widget(part, lang), part.label, part.info)


def _widget(w: Widget, lang: str) -> Any:
    common = dict(label=t(w.label, lang), elem_id=w.elem_id, visible=w.visible)
    if w.min_width is not None:
        common["min_width"] = w.min_width
    if w.info is not None:
        common["info"] = t(w.info, lang)
    if w.kind == "slider":
        return gr.Slider(w.low, w.high, value=w.default, step=w.step, **common)
    if w.kind == "radio":
        return gr.Radio(w.choices(lang), value=w.default, **common)
    if w.kind == "dropdown":
        return gr.Dropdown(w.choices(lang), value=w.default, allow_custom_value=w.custom, **common)
    if w.kind == "checkbox":
        return gr.Checkbox(value=bool(w.default), **common)
    return gr.Textbox(value=w.default or "", **common)


def field_widgets() -> list[tuple[str, str]]:
    """(widget, run setting) of every experiment's widget that edits a run setting (a link opens it set)."""
    return [(w.name, w.field) for e in EXPERIMENTS for w in e.widgets() if w.field is not None]


def view_controls() -> dict[str, str]:
    """Every experiment's widget its view reads, and the tab it is in."""
    return {name: e.tab for e in EXPERIMENTS for name in e.view_controls()}
