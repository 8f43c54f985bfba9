"""The page: builds every component and returns them by name. No events are bound here (see wiring).

One screen: the controls on the left (on a phone: above), the live screen on the right — the token
stream with the current step's panels, all updating while tokens stream — and the deeper views one
click below it. Every label and hint comes from `playground.app.words` (English and 中文); `Page.labels`, `Page.choices` and
`Page.texts` say which words each component shows, so the language switch can say them again. The deep views'
sections and tabs are built from their declarations by `playground.ui.tabs`. Above the token stream, the badge of what the run
on screen changes from a plain run; under the live screen, the tab's run history.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from playground.app.settings import DTYPES, MODES, RANGES, WIDGETS, UISettings
from playground.app.uploads import ALLOWED_SUFFIXES
from playground.app.words import LANGUAGES, live_strings, t
from playground.ui.guide import GUIDE_JS, guide_html
from playground.ui.sections import SECTIONS_JS
from playground.ui.tabs import build_sections
from playground.ui.teacher_layout import build_prompt_tokens, build_sign_in

ASSETS = Path(__file__).resolve().parent / "assets"
CSS = (ASSETS / "page.css").read_text(encoding="utf-8") + (ASSETS / "teacher.css").read_text(encoding="utf-8")
LIVE_JS = (ASSETS / "live.js").read_text(encoding="utf-8")
# Every plotly figure's toolbar gets an SVG download beside plotly's own PNG camera.
EXPORT_JS = (ASSETS / "export.js").read_text(encoding="utf-8")
HISTORY_JS = (ASSETS / "history.js").read_text(encoding="utf-8")  # a click on a run of the history asks for it
# Gradio's own copies of uploads (the catalog links them into a visitor's folder) are removed every
# minute once 5 minutes old (long enough for an upload still waiting in the queue); beyond the uploads' quota,
# the oldest go sooner (`UploadCache`).
GRADIO_CACHE_SECONDS = (60, 300)
LIVE_TEMPLATE = """<div class="pg-live">
  <div class="pg-head"><div id="gen-status" class="pg-status" role="status" aria-live="polite"></div><div class="pg-rate"></div></div>
  <div id="token-stream" role="list"></div>
  <div class="pg-legend"></div>
  <div class="pg-stepbar"></div>
  <div id="step-panels"><section class="pg-panel pg-cands"></section><section class="pg-panel pg-att"></section><section class="pg-panel pg-kv"></section></div>
  <div class="pg-beams" hidden></div>
  <div class="pg-branches" hidden></div>
</div>"""

# After the server returns the query string (inside a Space: the Space's huggingface.co address and
# the query): make the full URL, show it, put its query in the address bar and copy it (the clipboard
# needs a secure context; the text box is the fallback).
COPY_LINK_JS = """
(query) => {
  const url = /^https?:[/][/]/.test(query) ? query : window.location.origin + window.location.pathname + query;
  try { window.history.replaceState(null, '', window.location.pathname + url.slice(url.indexOf('?'))); } catch (e) {}
  if (navigator.clipboard && window.isSecureContext) { navigator.clipboard.writeText(url).catch(() => {}); }
  return url;
}
"""
# A ticket per Generate press (the client's clock): Stop refuses every ticket issued before it, so a
# run still waiting in the queue never starts.
TICKET_JS = "(...args) => { args[0] = Date.now(); return args; }"
STOP_JS = "(t) => Date.now()"
# A press that acts at the step on screen (Start game, a lab's fork or job, "Which layer knows?") waits for the server to
# know it: the page tells it by a call of its own as a token is clicked (`select_step`), which queues in the tab's lane
# behind the attention row drawn for that click; a quick press overtook it and acted on the step the server knew before.
AFTER_STEP_TOLD_JS = "async (...inputs) => { await window.__pgStepTold; return inputs; }"


@dataclass
class Page:
    demo: gr.Blocks
    settings: dict[str, gr.components.Component]  # the left column's widgets, keyed by their setting's name
    c: dict[str, Any] = field(default_factory=dict)  # every other component by name
    labels: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # name -> (label key, info key)
    choices: dict[str, Callable[[str], list]] = field(default_factory=dict)  # name -> its choices in a language
    texts: dict[str, Callable[[str], str]] = field(default_factory=dict)  # a Markdown of words -> them in a language

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["c"][name]
        except KeyError:
            raise AttributeError(name) from None

    def component(self, name: str) -> gr.components.Component:
        return self.settings[name] if name in self.settings else self.c[name]


def empty_live_value(lang: str = "en") -> dict[str, Any]:
    return {"run": None, "lang": lang, "path": [], "status": {}}


def mode_choices(lang: str) -> list[tuple[str, str]]:
    return [(t(f"mode_{m}", lang), m) for m in MODES]


def seed_box(seed: int | None, lang: str) -> gr.Textbox:
    """The seed as a one-line text box, empty for "draw one". Gradio's Number box shows an empty value as 0 once it
    is made visible (the Sampling mode shows it), and every sampling press then repeated seed 0."""
    return gr.Textbox(value="" if seed is None else str(seed), lines=1, max_lines=1, elem_id="seed",
                      label=t("seed", lang), info=t("seed_info", lang))


def header(lang: str) -> str:
    return f"# {t('title', lang)}\n{t('tagline', lang)}"


def build_page(server_functions: list[Callable] = (), lang: str = "en") -> Page:
    """All components, in English (`lang`); the page load and the language switch relabel them."""
    d = UISettings()
    r = RANGES
    s: dict[str, Any] = {}
    c: dict[str, Any] = {}
    labels: dict[str, tuple[str, str | None]] = {}
    choices: dict[str, Callable[[str], list]] = {"mode": mode_choices}  # and every tab's (`build_sections`)
    texts: dict[str, Callable[[str], str]] = {"header": header}

    def named(name: str, component: Any, label: str | None = None, info: str | None = None) -> Any:
        (s if name in WIDGETS else c)[name] = component
        if label:
            labels[name] = (label, info)
        return component

    with gr.Blocks(title=t("title", lang), delete_cache=GRADIO_CACHE_SECONDS) as demo:
        with gr.Row(elem_id="topbar", equal_height=True):
            c["header"] = gr.Markdown(header(lang), elem_id="header")
            named("lang", gr.Radio([(n, v) for n, v in LANGUAGES], value=lang, show_label=False, container=False,
                                   elem_id="lang", scale=0, min_width=160))
            # the guided path's entry (its steps move the page: sections.js and guide.js)
            texts["start_here"] = guide_html
            c["start_here"] = gr.HTML(guide_html(lang), js_on_load=GUIDE_JS, elem_id="start-here",
                                      apply_default_css=False)
            # projector mode: large type, the settings column hidden (a link field: `projector=1`)
            named("projector", gr.Checkbox(value=d.projector, elem_id="projector", label=t("projector", lang),
                                           container=False, scale=0, min_width=150), "projector")
        build_sign_in(c, lang)  # on ZeroGPU: the GPU quota and the sign-in
        with gr.Row(elem_id="main", equal_height=False):
            with gr.Column(scale=1, min_width=330, elem_id="sidebar"):
                with gr.Column(elem_id="sidebar-top"):
                    # The catalog checks every name for its visitor (one line for anything else), so the
                    # value never depends on Gradio's per-tab copy of the choices, which a flood of other
                    # sessions can push out (it would then read "not in the list of choices: []").
                    named("model", gr.Dropdown(choices=[], value=None, allow_custom_value=True, elem_id="model-select",
                                               label=t("model", lang)), "model")
                    c["model_status"] = gr.Markdown(t("loading", lang), elem_id="model-status")
                    c["model_about"] = gr.Markdown("", elem_id="model-about")
                    named("prompt", gr.Textbox(lines=3, max_lines=10, elem_id="prompt", label=t("prompt", lang)),
                          "prompt")
                    build_prompt_tokens(c)
                    named("chat", gr.Checkbox(value=d.chat, visible=False, elem_id="chat", label=t("chat", lang),
                                              info=t("chat_info", lang)), "chat", "chat_info")
                    named("target_lang", gr.Dropdown(choices=[("", "")], value="", visible=False, elem_id="target-lang",
                                                     allow_custom_value=True, label=t("target_lang", lang),
                                                     info=t("target_lang_info",
                                                            lang)), "target_lang", "target_lang_info")
                    with gr.Row(elem_id="run-buttons"):
                        named("generate", gr.Button(t("generate", lang), variant="primary", elem_id="generate-btn",
                                                    min_width=80, scale=2), "generate")
                        named("stop", gr.Button(t("stop", lang), variant="stop", elem_id="stop-btn", min_width=60,
                                                scale=1), "stop")
                        named("copy_link", gr.Button(t("copy_link", lang), elem_id="copy-link-btn", min_width=80,
                                                     scale=1), "copy_link")
                    named("link", gr.Textbox(label=t("link", lang), interactive=False, elem_id="share-link",
                                             buttons=["copy"], visible=False), "link")
                with gr.Accordion(t("decoding", lang), open=True, elem_id="decoding",
                                  elem_classes=["pg-settings"]) as acc:
                    c["decoding_acc"] = acc
                    named("mode", gr.Radio(mode_choices(lang), value=d.mode, elem_id="mode", label=t("mode", lang),
                                           info=t("mode_info", lang)), "mode", "mode_info")
                    for name, key, step, visible in (
                        ("temperature", "temperature", 0.05, False), ("top_k", "top-k", 1, False),
                        ("top_p", "top-p", 0.01, False), ("num_beams", "num-beams", 1, False),
                        ("length_penalty", "length-penalty", 0.1, False),
                    ):
                        named(name, gr.Slider(*r[name], value=getattr(d, name), step=step, visible=visible,
                                              elem_id=key, label=t(name, lang), info=t(f"{name}_info", lang)),
                              name, f"{name}_info")
                    named("early_stopping", gr.Checkbox(value=d.early_stopping, visible=False, elem_id="early-stopping",
                                                        label=t("early_stopping", lang),
                                                        info=t("early_stopping_info", lang)),
                          "early_stopping", "early_stopping_info")
                    named("repetition_penalty", gr.Slider(*r["repetition_penalty"], value=d.repetition_penalty, step=0.05,
                                                          elem_id="repetition-penalty", label=t("repetition_penalty",
                                                                                                lang),
                                                          info=t("repetition_penalty_info", lang)),
                          "repetition_penalty", "repetition_penalty_info")
                    named("max_new_tokens", gr.Slider(*r["max_new_tokens"], value=d.max_new_tokens, step=1,
                                                      elem_id="max-new-tokens", label=t("max_new_tokens", lang),
                                                      info=t("max_new_tokens_info", lang)),
                          "max_new_tokens", "max_new_tokens_info")
                    named("seed", seed_box(d.seed, lang), "seed", "seed_info")
                with gr.Accordion(t("live_view", lang), open=False, elem_id="live-settings",
                                  elem_classes=["pg-settings"]) as acc:
                    c["live_acc"] = acc
                    named("top_candidates", gr.Slider(*r["top_candidates"], value=d.top_candidates, step=1,
                                                      elem_id="top-candidates", label=t("top_candidates", lang),
                                                      info=t("top_candidates_info", lang)),
                          "top_candidates", "top_candidates_info")
                    named("attention", gr.Checkbox(value=d.attention, elem_id="record-attention",
                                                   label=t("record_attention", lang), info=t("record_attention_info",
                                                                                             lang)),
                          "record_attention", "record_attention_info")
                    named("pace_ms", gr.Slider(*r["pace_ms"], value=d.pace_ms, step=10, elem_id="pace",
                                               label=t("pace", lang), info=t("pace_info", lang)), "pace", "pace_info")
                with gr.Accordion(t("load_own", lang), open=False, elem_id="load-own",
                                  elem_classes=["pg-settings"]) as acc:
                    c["load_acc"] = acc
                    named("dtype", gr.Radio(list(DTYPES), value=d.dtype, elem_id="dtype", label=t("dtype", lang)),
                          "dtype")
                    named("upload", gr.File(file_count="multiple", file_types=list(ALLOWED_SUFFIXES),
                                            height=110, elem_id="upload", label=t("upload", lang)), "upload")
                    with gr.Row(equal_height=True):
                        named("hub_id", gr.Textbox(placeholder="owner/name", scale=3, elem_id="hub-id",
                                                   label=t("hub_id", lang)), "hub_id")
                        named("hub_load", gr.Button(t("hub_load", lang), scale=1, min_width=60, elem_id="hub-load-btn"),
                              "hub_load")
            with gr.Column(scale=3, min_width=320, elem_id="workspace"):
                c["notes"] = gr.Markdown("", elem_id="notes")
                # What the run on screen changes from a plain run (hidden for a plain run), right above its tokens.
                c["active_settings"] = gr.HTML("", elem_id="active-settings", apply_default_css=False)  # empty: hidden
                # Server functions go in as a constructor argument: Gradio rebuilds a component from those
                # when a handler updates it, and functions attached afterwards would be lost (404s).
                c["live"] = gr.HTML(value=empty_live_value(lang), html_template=LIVE_TEMPLATE, js_on_load=LIVE_JS,
                                    elem_id="token-output", strings=live_strings(), apply_default_css=False,
                                    server_functions=[_plain(fn) for fn in server_functions])
                c["ticket"] = gr.Number(value=0, visible=False, elem_id="ticket")
                c["run_history"] = gr.HTML("", js_on_load=HISTORY_JS, elem_id="run-history", apply_default_css=False)
                c["figure_export"] = gr.HTML("", js_on_load=EXPORT_JS, elem_id="figure-export", apply_default_css=False)
                # the branches that led to the run on screen (what its link replays)
                c["branches"] = gr.Textbox(value="", visible=False, elem_id="branches")
                # The deep views in a few sections, each one click away; both rows wrap (no hidden tabs). The
                # views' tab on screen reaches the server by #open-view's script, whatever opened it.
                c["open_view"] = gr.HTML("inspector", html_template="", js_on_load=SECTIONS_JS, elem_id="open-view",
                                         apply_default_css=False)
                with gr.Tabs(elem_id="deep-views", overflow_behavior="wrap") as tabs:
                    c["tabs"] = tabs
                    build_sections(c, named, lang, choices, texts, labels)
    for name, key in (("decoding_acc", "decoding"), ("live_acc", "live_view"), ("load_acc", "load_own")):
        labels[name] = (key, None)
    for name in c:
        if name.startswith("tab_"):  # every tab's words: tab_<its id>
            labels[name] = (name, None)
    return Page(demo=demo, settings=s, c=c, labels=labels, choices=choices, texts=texts)


def _plain(fn: Callable) -> Callable:
    """A plain function calling `fn` (Gradio marks server functions with an attribute; methods take none). A
    coroutine function is one already (a server lane's, `lanes.ServerLane.wrap`): Gradio awaits it."""
    if inspect.iscoroutinefunction(fn):
        return fn

    def call(*args: Any) -> Any:
        return fn(*args)

    call.__name__ = fn.__name__
    return call
