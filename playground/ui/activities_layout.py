"""The class activities' components, in the Class tools tab (events in `playground.ui.activities`): "Is it a
database?" (`#many-samples`) and "Which layer knows?" (`#lens-guess`), each one self-contained block like the tab's
other parts."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.app.activities import lens_guess, samples
from playground.app.words import t

# Markdown blocks relabelled by the language switch (component name -> locale key).
ACTIVITY_TEXTS = {"acts_samples_title_md": "acts_samples_title", "acts_samples_intro_md": "acts_samples_intro",
                  "acts_lens_title_md": "acts_lens_title", "acts_lens_intro_md": "acts_lens_intro"}


def build_activities(c: dict[str, Any], named, lang: str) -> None:
    build_many_samples(c, named, lang)
    build_lens_guess(c, named, lang)


def build_many_samples(c: dict[str, Any], named, lang: str) -> None:
    with gr.Column(elem_id="many-samples", elem_classes=["pg-teacher-part"]):
        c["acts_samples_title_md"] = gr.Markdown(t("acts_samples_title", lang))
        c["acts_samples_intro_md"] = gr.Markdown(t("acts_samples_intro", lang), elem_classes=["pg-hint"])
        # no bounds on the boxes: the activity says its own range in words (Gradio's would be an English pop-up)
        with gr.Row(equal_height=True, elem_id="samples-controls"):
            named("samples_n", gr.Number(value=samples.DEFAULT_SAMPLES, precision=0, min_width=110,
                                         label=t("acts_samples_n", lang), elem_id="samples-n"), "acts_samples_n")
            named("samples_guess", gr.Number(value=None, precision=0, min_width=150,
                                             label=t("acts_samples_predict", lang), elem_id="samples-guess"),
                  "acts_samples_predict")
            named("samples_run", gr.Button(t("acts_samples_run", lang), variant="primary", min_width=140,
                                           elem_id="samples-run-btn"), "acts_samples_run")
        c["samples_view"] = gr.HTML("", elem_id="many-samples-view", apply_default_css=False, js_on_load=None)
        c["samples_state"] = gr.State(None)  # the visitor's last outcome, drawn again in the other language


def build_lens_guess(c: dict[str, Any], named, lang: str) -> None:
    with gr.Column(elem_id="lens-guess", elem_classes=["pg-teacher-part"]):
        c["acts_lens_title_md"] = gr.Markdown(t("acts_lens_title", lang))
        c["acts_lens_intro_md"] = gr.Markdown(t("acts_lens_intro", lang), elem_classes=["pg-hint"])
        with gr.Row(equal_height=True, elem_id="lens-controls"):
            named("lens_at", gr.Number(value=0, precision=0, label=t("acts_lens_at", lang), min_width=90,
                                       elem_id="lens-at"), "acts_lens_at")
            named("lens_ask", gr.Button(t("acts_lens_start", lang), variant="primary", min_width=150,
                                        elem_id="lens-ask-btn"), "acts_lens_start")
            named("lens_next", gr.Button(t("acts_lens_next", lang), min_width=90, visible=False,
                                         elem_id="lens-next-btn"), "acts_lens_next")
        c["lens_view"] = gr.HTML(lens_guess.html(None, lang), elem_id="lens-guess-view", apply_default_css=False,
                                 js_on_load=None)
        with gr.Row(equal_height=True, visible=False, elem_id="lens-player") as row:
            c["lens_player"] = row  # shown once a step is asked
            named("lens_pick", gr.Slider(0, 5, value=0, step=1, label=t("acts_lens_guess", lang), scale=3,
                                         elem_id="lens-pick"), "acts_lens_guess")
            named("lens_reveal", gr.Button(t("acts_lens_reveal", lang), variant="primary", min_width=120, scale=1,
                                           elem_id="lens-reveal-btn"), "acts_lens_reveal")
        c["lens_state"] = gr.State(None)  # the visitor's question and board: their own, per tab
