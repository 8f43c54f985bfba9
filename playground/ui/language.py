"""The English / 中文 switch: relabels every component and tells the live screen. No model work."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.app import describe, views
from playground.app.session import Sessions
from playground.app.words import t
from playground.ui.layout import Page
from playground.ui.models import session_key


def relabelled(page: Page) -> list[Any]:
    """The components the switch updates, in the order `relabel` returns their updates."""
    return [*(page.component(name) for name in page.labels), *(page.component(name) for name in page.texts), page.notes]


def relabel(page: Page, sessions: Sessions, lm: Any, lang: str, request: gr.Request | None,
            models: list[tuple[str, str]] | None = None, as_built: bool = False) -> list[Any]:
    """Updates for `relabelled(page)`; `lm`: the session's model (None: none loaded), whose choices some widgets
    follow (`views.model_choices`); `models`: the model list's (label, name) in `lang` (its value stays).

    `as_built`: the page still shows the words it was built with (its load). In the language it was built in, only
    what follows the model and the notes are sent; every other update is skipped (`gr.skip()`: an empty
    `gr.update()` re-renders its component too). Measured: 0.6–0.9 s less of the browser's main thread per page load."""
    session = sessions.get(session_key(request))
    session.lang = lang
    of_model = views.model_choices(lm, lang)
    if as_built and lang == page.lang:
        return [_model_words(page, name, lang, of_model, models) for name in page.labels] + \
            [gr.skip() for _ in page.texts] + [describe.notes_markdown(session.notes, lang)]
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
    updates.append(describe.notes_markdown(session.notes, lang))  # keyed notes: said again in the new language
    return updates


def _model_words(page: Page, name: str, lang: str, of_model: dict[str, list], models: list | None) -> Any:
    """`name`'s update on a page as built: its choices where they follow the model or the model list, else none."""
    if name in page.choices or isinstance(page.component(name), gr.Button):
        return gr.skip()
    if name in of_model:
        return gr.update(choices=of_model[name])
    if name == "model" and models is not None:
        return gr.update(choices=models)
    return gr.skip()
