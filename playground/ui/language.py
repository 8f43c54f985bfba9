"""The English / 中文 switch: relabels every component and tells the live screen. No model work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gradio as gr

from playground.app import describe
from playground.app.session import Sessions
from playground.app.words import t
from playground.ui.layout import Page
from playground.ui.models import session_key
from playground.ui.panel_tabs import view_choices


def relabelled(page: Page) -> list[Any]:
    """The components the switch updates, in the order `relabel` returns their updates."""
    return [*(page.component(name) for name in page.labels), *(page.component(name) for name in page.texts), page.notes]


def relabel(page: Page, sessions: Sessions, grouped: bool, lang: str, request: gr.Request | None,
            models: list[tuple[str, str]] | None = None, kinds: Sequence[str] = ("self",)) -> list[Any]:
    """Updates for `relabelled(page)`; `grouped`: the session's model shares K/V between heads; `models`:
    the model list's (label, name) in `lang` (its value stays); `kinds`: the model's attention kinds."""
    session = sessions.get(session_key(request))
    session.lang = lang
    updates = []
    for name, (label, info) in page.labels.items():
        if isinstance(page.component(name), gr.Button):
            updates.append(gr.update(value=t(label, lang)))
            continue
        words: dict[str, Any] = {"label": t(label, lang)}
        if info:
            words["info"] = t(info, lang)
        if name in page.choices:
            words["choices"] = page.choices[name](lang)
        elif name == "att_view":  # "mean per KV group" only where heads share K/V
            words["choices"] = view_choices(lang, grouped=grouped)
        elif name == "model" and models is not None:
            words["choices"] = models
        elif name == "att_kind":  # "decoder self-attention" stayed English in 中文
            words["choices"] = [(t(f"kind_{k}", lang), k) for k in kinds]
        updates.append(gr.update(**words))
    updates += [text(lang) for text in page.texts.values()]
    updates.append(describe.notes_markdown(session.notes, lang))  # keyed notes: said again in the new language
    return updates
