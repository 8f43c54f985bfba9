"""Every tab of the page, built from its declaration (`playground.app.tabs`): the deep views' sections, and in each
its tabs' words, widgets, buttons and the outputs their views draw (no events here: `playground.ui.experiments`
binds every tab's buttons, `playground.ui.views` their views' redraws). Nothing here knows one tab from another."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from playground.app import tabs as registry
from playground.app.tab import Action, Out, Row, Stack, Tab, Widget, Words
from playground.app.words import t
from playground.ui.sections import SECTIONS
from playground.ui.teacher_layout import build_teacher_tab


def build_sections(c: dict[str, Any], named: Callable[..., Any], lang: str,
                   choices: dict[str, Callable[[str], list]], texts: dict[str, Callable[[str], str]],
                   labels: dict[str, tuple[str, str | None]]) -> None:
    """The deep views' sections (inside the outer Tabs `#deep-views`): each a tab with a one-line hint and its tabs
    as tabs of its own (`#<section>-tabs`); a section of tools with no view (Class tools) is one page, its tools one
    after another. Component names: `section_<name>`, `section_<name>_hint`, `tabs_<name>`."""
    for section in SECTIONS:
        if not section.tabs:  # Class tools: the teacher tab is the section
            tools = registry.in_section(section.name)
            build_teacher_tab(c, named, lang, lambda tools=tools: [build_tool(tool, c, named, lang, choices, texts)
                                                                   for tool in tools])
            continue
        name = section.name
        with gr.Tab(t(f"section_{name}", lang), id=name, elem_id=section.elem_id) as tab:
            c[f"section_{name}"] = tab
            labels[f"section_{name}"] = (f"section_{name}", None)
            texts[f"section_{name}_hint"] = lambda code, key=f"section_{name}_hint": t(key, code)
            c[f"section_{name}_hint"] = gr.Markdown(t(f"section_{name}_hint", lang), elem_classes=["pg-section-hint"])
            with gr.Tabs(elem_id=f"{name}-tabs", overflow_behavior="wrap", elem_classes=["pg-section-tabs"]) as inner:
                c[f"tabs_{name}"] = inner
                for held in registry.in_section(name):
                    build_tab(held, c, named, lang, choices, texts)


def build_tab(tab: Tab, page_parts: dict[str, Any], named: Callable[..., Any], lang: str,
              choices: dict[str, Callable[[str], list]], texts: dict[str, Callable[[str], str]]) -> None:
    """`tab` (inside its section's Tabs). `named(name, component, label, info)` keeps a component and its words'
    keys; `choices` and `texts` collect what the language switch says again."""
    with gr.Tab(t(f"tab_{tab.tab}", lang), id=tab.tab, elem_id=tab.elem_id) as built:
        page_parts[f"tab_{tab.tab}"] = built
        _layout(tab, page_parts, named, lang, choices, texts)


def build_tool(tab: Tab, page_parts: dict[str, Any], named: Callable[..., Any], lang: str,
               choices: dict[str, Callable[[str], list]], texts: dict[str, Callable[[str], str]]) -> None:
    """A tab of no view (a class tool) as one self-contained part of its section's page (`#<elem_id>`)."""
    with gr.Column(elem_id=tab.elem_id, elem_classes=["pg-teacher-part"]):
        _layout(tab, page_parts, named, lang, choices, texts)


def _layout(tab: Tab, page_parts: dict[str, Any], named: Callable[..., Any], lang: str,
            choices: dict[str, Callable[[str], list]], texts: dict[str, Callable[[str], str]]) -> None:
    forks_said = False
    for part in tab.layout:
        if isinstance(part, Row):
            with gr.Row(elem_id=part.elem_id, visible=part.visible, equal_height=part.equal_height) as row:
                if part.name:
                    page_parts[part.name] = row  # a row its view (or its tool) shows or hides
                for inner in part.parts:
                    if isinstance(inner, Stack):
                        with gr.Column(scale=inner.scale, min_width=inner.min_width):
                            for stacked in inner.parts:
                                _build(stacked, page_parts, named, lang, choices, texts)
                    else:
                        _build(inner, page_parts, named, lang, choices, texts)
        else:
            _build(part, page_parts, named, lang, choices, texts)
        inner = part.parts if isinstance(part, Row) else (part,)
        if not forks_said and any(isinstance(p, Action) and p.kind == "fork" for p in inner):
            _fork_lines(tab, page_parts, named, lang)  # under the lab's (first) fork button
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
        c[part.name] = gr.Markdown(texts[part.name](lang), elem_id=part.elem_id, elem_classes=list(part.classes) or None)
    elif isinstance(part, Out):
        c[part.name] = _out(part, lang)
    elif isinstance(part, Action):
        variant = "stop" if part.kind == "stop" else ("primary" if part.primary else "secondary")
        named(part.name, gr.Button(t(part.label, lang), variant=variant, elem_id=part.elem_id,
                                   min_width=part.min_width, visible=part.visible, scale=part.scale), part.label)
    elif isinstance(part, Widget):
        if part.choices is not None and part.relabel:
            choices[part.name] = part.choices
        named(part.name, _widget(part, lang), part.label, part.info)


def _out(part: Out, lang: str) -> Any:
    if part.kind == "markdown":
        return gr.Markdown(t(part.words, lang) if part.words else "", elem_id=part.elem_id)
    if part.kind == "html":
        value = part.initial(lang) if part.initial is not None else ""
        if part.plain:
            return gr.HTML(value, elem_id=part.elem_id, apply_default_css=False, js_on_load=None)
        return gr.HTML(value, elem_id=part.elem_id)
    if part.kind == "state":
        return gr.State(None)
    if part.kind == "data":
        return gr.Textbox(visible=False, elem_id=part.elem_id)
    if part.kind == "timer":
        return gr.Timer(part.every, active=False)
    return gr.Plot(elem_id=part.elem_id, show_label=False, visible=bool(part.visible))


def _widget(w: Widget, lang: str) -> Any:
    common = dict(label=t(w.label, lang), elem_id=w.elem_id, visible=w.visible)
    for name in ("min_width", "scale"):
        if getattr(w, name) is not None:
            common[name] = getattr(w, name)
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
    if w.kind == "number":
        return gr.Number(value=w.default, minimum=w.low if w.bounded else None, maximum=w.high if w.capped else None,
                         step=w.step, precision=w.precision, **common)
    return gr.Textbox(value=w.default, interactive=w.interactive, buttons=["copy"] if w.copy else None,
                      max_length=w.max_length, **common)


def field_widgets() -> list[tuple[str, str]]:
    """(widget, run setting) of every tab's widget that edits a run setting (a link opens it set)."""
    return [(w.name, w.field) for tab in registry.TABS for w in tab.widgets() if w.field is not None]

