"""The English / 中文 switch: relabels every component and tells the live screen. No model work."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.app import describe, views
from playground.app.session import Sessions
from playground.app.words import t
from playground.ui.layout import Page
from playground.ui.models import session_key


def relabelled(page: Page, *, notes: bool = True) -> list[Any]:
    """The components the switch updates, in the order `relabel` returns their updates (`notes`: with the notes)."""
    labels = [*(page.component(name) for name in page.labels), *(page.component(name) for name in page.texts)]
    return [*labels, page.notes] if notes else labels


def relabel(page: Page, sessions: Sessions, lm: Any, lang: str, request: gr.Request | None,
            models: list[tuple[str, str]] | None = None, *, notes: bool = True) -> list[Any]:
    """Updates for `relabelled(page)`; `lm`: the session's model (None: none loaded), whose choices some widgets
    follow (`views.model_choices`); `models`: the model list's (label, name) in `lang` (its value stays)."""
    session = sessions.get(session_key(request))
    session.lang = lang
    of_model = views.model_choices(lm, lang)
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
        elif name in of_model:  # e.g. "mean per KV group" only where heads share K/V
            words["choices"] = of_model[name]
        elif name == "model" and models is not None:
            words["choices"] = models
        updates.append(gr.update(**words))
    updates += [text(lang) for text in page.texts.values()]
    if notes:
        updates.append(describe.notes_markdown(session.notes, lang))  # keyed notes: said again in the new language
    return updates
