"""The English / 中文 switch: relabels every component and tells the live screen. No model work."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.app import describe
from playground.app.session import Sessions
from playground.app.words import t
from playground.ui.lab_layout import (
    INTRO_NAMES,
    draft_choices,
    intro_updates,
    kv_dtype_choices,
    precision_choices,
    rope_choices,
)
from playground.ui.layout import Page, lesson_choices, mode_choices, view_choices, what_if_choices
from playground.ui.models import session_key


def relabelled(page: Page) -> list[Any]:
    """The components the switch updates, in the order `relabel` returns their updates."""
    return [page.component(name) for name in page.labels] + [page.header, page.inspector_intro, page.attention_intro,
                                                              *(page.component(n) for n in INTRO_NAMES), page.notes]


def relabel(page: Page, sessions: Sessions, grouped: bool, lang: str, request: gr.Request | None,
            models: list[tuple[str, str]] | None = None) -> list[Any]:
    """Updates for `relabelled(page)`; `grouped`: the session's model shares K/V between heads; `models`:
    the model list's (label, name) in `lang` (its value stays)."""
    session = sessions.get(session_key(request))
    session.lang = lang
    updates = []
    for name, (label, info) in page.labels.items():
        component = page.component(name)
        if isinstance(component, gr.Button):
            updates.append(gr.update(value=t(label, lang)))
        elif name == "mode":
            updates.append(gr.update(label=t(label, lang), info=t(info, lang), choices=mode_choices(lang)))
        elif name == "lesson":
            updates.append(gr.update(label=t(label, lang), choices=lesson_choices(lang)))
        elif name in ("lesson_attention", "lesson_dtype"):
            updates.append(gr.update(label=t(label, lang), choices=what_if_choices(name.split("_")[1], lang)))
        elif name == "draft":
            updates.append(gr.update(label=t(label, lang), info=t(info, lang), choices=draft_choices(lang)))
        elif name == "weight_precision":
            updates.append(gr.update(label=t(label, lang), choices=precision_choices(lang)))
        elif name == "rope_scaling":
            updates.append(gr.update(label=t(label, lang), choices=rope_choices(lang)))
        elif name == "kv_dtype":
            updates.append(gr.update(label=t(label, lang), choices=kv_dtype_choices(lang)))
        elif name == "model" and models is not None:
            updates.append(gr.update(label=t(label, lang), choices=models))
        elif name == "att_scale":  # its choices are words too (线性 / 对数)
            updates.append(gr.update(label=t(label, lang), choices=[(t("scale_linear", lang), "linear"),
                                                                    (t("scale_log", lang), "log")]))
        elif name == "att_view":
            updates.append(gr.update(label=t(label, lang), choices=view_choices(lang, grouped=grouped)))
        elif info:
            updates.append(gr.update(label=t(label, lang), info=t(info, lang)))
        else:
            updates.append(gr.update(label=t(label, lang)))
    updates += [f"# {t('title', lang)}\n{t('tagline', lang)}", t("inspector_intro", lang), t("attention_intro", lang),
                *intro_updates(lang),
                describe.notes_markdown(session.notes, lang)]  # keyed notes: said again in the new language
    return updates
