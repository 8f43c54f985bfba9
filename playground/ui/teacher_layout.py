"""The teacher's parts of the page (components only; events in `playground.ui.teacher`): the prompt's tokens under
the prompt box, the GPU quota's sign-in, and the Class tools tab, whose tools (temperature side by side, the "guess
the next token" game, the activities, export a run) are declared tabs of its section (`playground.app.activities`),
built by `playground.ui.tabs`, each one self-contained block (its own elem_id: `#temperature-compare`, `#game`,
`#many-samples`, `#lens-guess`, `#export-run`).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import gradio as gr

from playground.app.words import t
from playground.hosting import zero_gpu

# The sign-in's Markdown, relabelled by the teacher's language handler (component name -> locale key); the tools'
# own words are their tabs' `Words`, relabelled with the page's.
TEACHER_TEXTS = {"gpu_md": "zerogpu_signin_md", "gpu_link_md": "zerogpu_signin_link"}


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


def build_teacher_tab(c: dict[str, Any], named, lang: str, tools: Callable[[], Any] = lambda: None) -> None:
    """The Class tools tab (inside the deep views' Tabs, after the others so their order stays). `tools()` builds the
    section's declared tools (`playground.app.tabs`, from `playground.app.activities`): temperature side by side, the
    game, the activities, export."""
    with gr.Tab(t("tab_teacher", lang), id="teacher", elem_id="teacher-tab") as tab:
        c["tab_teacher"] = tab
        tools()
