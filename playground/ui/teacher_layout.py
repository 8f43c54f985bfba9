"""The teacher's tools on the page (components only; events in `playground.ui.teacher`): the prompt's tokens under
the prompt box, and the Class tools tab: temperature side by side, the "guess the next token" game, the activities
(`playground.ui.activities_layout`), export a run.

Each part is one self-contained block (its own elem_id: `#prompt-tokens`, `#temperature-compare`, `#game`,
`#export-run`) so the page's sections can move them as they are.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import gradio as gr

from playground.app import game
from playground.app.settings import RANGES
from playground.app.side_by_side import TEMPERATURES
from playground.app.words import t
from playground.hosting import zero_gpu
from playground.ui.activities_layout import build_activities

# Markdown blocks of the tab, relabelled by the language switch (component name -> locale key).
TEACHER_TEXTS = {"gpu_md": "zerogpu_signin_md", "gpu_link_md": "zerogpu_signin_link", "sbs_title_md": "sbs_title", "sbs_intro_md": "sbs_intro", "game_title_md": "game_title",
                 "game_intro_md": "game_intro", "export_title_md": "export_title", "export_intro_md": "export_intro"}


# Gradio's sign-in needs the Space's OAuth app (`hf_oauth: true` in its card sets these) and its oauth extra.
OAUTH_VARIABLES = ("OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES", "OPENID_PROVIDER_URL")


def sign_in_ready() -> bool:
    """Whether Gradio's "Sign in with Hugging Face" can work here: a Space with its OAuth app and the packages."""
    return all(os.environ.get(v) for v in OAUTH_VARIABLES) and all(
        importlib.util.find_spec(m) is not None for m in ("authlib", "itsdangerous"))


def build_sign_in(c: dict[str, Any], lang: str) -> None:
    """On ZeroGPU: what the GPU quota is, and the sign-in that gives each visitor a quota of their own (Gradio's
    login button where the Space has its OAuth app; else a link to sign in on huggingface.co, which the quota
    follows too). Elsewhere the words are hidden and there is no button."""
    on = zero_gpu()
    button = on and sign_in_ready()
    with gr.Row(elem_id="gpu-quota", visible=on, equal_height=True) as row:
        c["gpu_row"] = row
        c["gpu_md"] = gr.Markdown(t("zerogpu_signin_md", lang), elem_id="gpu-quota-md")
        c["gpu_link_md"] = gr.Markdown(t("zerogpu_signin_link", lang), visible=not button, elem_id="gpu-signin-link")
        if button:  # its label stays as built: the button's own script compares it to tell signed in from out
            c["sign_in"] = gr.LoginButton("Sign in with Hugging Face · 登录", logout_value="Sign out ({}) · 退出",
                                          size="sm", scale=0, min_width=220, elem_id="sign-in")


def build_prompt_tokens(c: dict[str, Any]) -> None:
    """The tokenizer view, under the prompt box: filled as the prompt is typed."""
    c["prompt_tokens"] = gr.HTML("", elem_id="prompt-tokens", apply_default_css=False, js_on_load=None)


def build_teacher_tab(c: dict[str, Any], named, lang: str) -> None:
    """The Class tools tab (inside the deep views' Tabs, after the others so their order stays)."""
    with gr.Tab(t("tab_teacher", lang), id="teacher", elem_id="teacher-tab") as tab:
        c["tab_teacher"] = tab
        build_side_by_side(c, named, lang)
        build_game(c, named, lang)
        build_activities(c, named, lang)  # "Is it a database?" (#many-samples), "Which layer knows?" (#lens-guess)
        build_export(c, named, lang)


def build_side_by_side(c: dict[str, Any], named, lang: str) -> None:
    low, high = RANGES["temperature"]
    with gr.Column(elem_id="temperature-compare", elem_classes=["pg-teacher-part"]):
        c["sbs_title_md"] = gr.Markdown(t("sbs_title", lang))
        c["sbs_intro_md"] = gr.Markdown(t("sbs_intro", lang), elem_classes=["pg-hint"])
        with gr.Row(equal_height=True, elem_id="sbs-controls"):
            for name, key, value in zip(("sbs_t1", "sbs_t2", "sbs_t3"), ("sbs_temp_low", "sbs_temp_mid", "sbs_temp_high"),
                                        TEMPERATURES):
                named(name, gr.Number(value=value, minimum=max(low, 0.05), maximum=high, step=0.05, min_width=110,
                                      label=t(key, lang), elem_id=name.replace("_", "-")), key)
            named("sbs_run", gr.Button(t("sbs_run", lang), variant="primary", min_width=140, elem_id="sbs-run-btn"),
                  "sbs_run")
        c["sbs_view"] = gr.HTML("", elem_id="temperature-compare-view", apply_default_css=False, js_on_load=None)
        c["sbs_columns"] = gr.State(None)  # the last comparison, drawn again in the other language


def build_game(c: dict[str, Any], named, lang: str) -> None:
    with gr.Column(elem_id="game", elem_classes=["pg-teacher-part"]):
        c["game_title_md"] = gr.Markdown(t("game_title", lang))
        c["game_intro_md"] = gr.Markdown(t("game_intro", lang), elem_classes=["pg-hint"])
        with gr.Row(equal_height=True, elem_id="game-teacher") as row:
            c["game_teacher"] = row  # hidden on a player's page (a game link): the room's teacher moves it
            named("game_at", gr.Number(value=0, precision=0, label=t("game_at", lang), min_width=90,
                                       elem_id="game-at"), "game_at")
            named("game_start", gr.Button(t("game_start", lang), variant="primary", min_width=150,
                                          elem_id="game-start-btn"), "game_start")
            named("game_reveal", gr.Button(t("game_reveal", lang), visible=False, min_width=90,
                                           elem_id="game-reveal-btn"), "game_reveal")
            named("game_next", gr.Button(t("game_next", lang), visible=False, min_width=90, elem_id="game-next-btn"),
                  "game_next")
        named("game_link", gr.Textbox(label=t("game_link", lang), interactive=False, visible=False, buttons=["copy"],
                                      elem_id="game-link"), "game_link")
        # the player link as a QR code, under the link: shown in projector mode only (teacher.css)
        c["game_qr"] = gr.HTML("", elem_id="game-qr", apply_default_css=False, js_on_load=None)
        c["game_view"] = gr.HTML(game.html(None, lang), elem_id="game-view", apply_default_css=False, js_on_load=None)
        with gr.Row(equal_height=True, visible=False, elem_id="game-player") as row:
            c["game_player"] = row
            named("game_choice", gr.Radio([], value=None, label=t("game_choice", lang), elem_id="game-choice",
                                          scale=3), "game_choice")
            with gr.Column(scale=1, min_width=160):
                named("game_name", gr.Textbox(label=t("game_name", lang), max_length=40, elem_id="game-name"),
                      "game_name")
                named("game_guess", gr.Button(t("game_guess", lang), variant="primary", elem_id="game-guess-btn"),
                      "game_guess")
        c["game_state"] = gr.State(None)  # {"room", "version", "lang"}: the room this tab is in
        c["game_timer"] = gr.Timer(2.0, active=False)  # the room's changes reach every page within two seconds


def build_export(c: dict[str, Any], named, lang: str) -> None:
    with gr.Column(elem_id="export-run", elem_classes=["pg-teacher-part"]):
        c["export_title_md"] = gr.Markdown(t("export_title", lang))
        c["export_intro_md"] = gr.Markdown(t("export_intro", lang), elem_classes=["pg-hint"])
        with gr.Row(equal_height=True):
            named("export_json", gr.Button(t("export_json", lang), min_width=120, elem_id="export-json-btn"),
                  "export_json")
            named("export_csv", gr.Button(t("export_csv", lang), min_width=120, elem_id="export-csv-btn"), "export_csv")
        c["export_md"] = gr.Markdown("", elem_id="export-md")
        c["export_file"] = gr.Textbox(visible=False, elem_id="export-file")  # {"name", "type", "text"} for the browser
        c["page_address"] = gr.Textbox(visible=False, elem_id="page-address")  # the page's own address, from its script
