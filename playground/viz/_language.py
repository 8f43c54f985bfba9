"""The language the figure builders write in: English unless the caller asks for another.

    with viz.language("zh"):
        fig = viz.attention_heatmap(weights, labels, labels)  # axes, hover, colour bar in 中文

The choice lives in a `contextvars.ContextVar`, so each thread and each asyncio task has its own:
two requests drawing in different languages at the same moment never see each other's choice.
Every module's words live in the locale files (`playground/locales/en.json`, `zh.json`, under
"figures" → the module's name); `texts(module)[key]` is the string in the current language, and the
module keeps the two tables as `TEXT` and `TEXT_ZH`. Titles a caller passes in are drawn as given.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from playground import locales

LANGUAGES = ("en", "zh")
_current: ContextVar[str] = ContextVar("playground_viz_language", default="en")


def current_language() -> str:
    """The language figures are drawn in here: "en" or "zh"."""
    return _current.get()


@contextmanager
def language(lang: str) -> Iterator[str]:
    """Draw every figure and caption built inside the block in `lang` ("en" or "zh").

    Enter and leave it in the same thread or task, around the building only (not across a `yield`
    of a streaming handler, whose next step may run in another thread)."""
    if lang not in LANGUAGES:
        raise ValueError(f"language {lang!r} is not drawn; use one of {', '.join(LANGUAGES)}")
    token = _current.set(lang)
    try:
        yield lang
    finally:
        _current.reset(token)


def fields(template: str) -> set[tuple[str, str]]:
    """The {placeholders} of a str.format template, as (name, format spec) pairs."""
    return {(name, spec or "") for _, name, spec, _ in string.Formatter().parse(template) if name is not None}


def _mismatches(en: Any, zh: Any, path: str = "") -> list[str]:
    if isinstance(en, Mapping) != isinstance(zh, Mapping):
        return [f"{path or 'the table'}: one language has a table where the other has a string"]
    if not isinstance(en, Mapping):
        if fields(en) != fields(zh):
            return [f"{path}: placeholders {sorted(fields(en))} in English but {sorted(fields(zh))} in 中文"]
        return []
    problems = [f"{path}{k!r}: missing in {'中文' if k in en else 'English'}" for k in en.keys() ^ zh.keys()]
    for k in en.keys() & zh.keys():
        problems += _mismatches(en[k], zh[k], f"{path}{k!r} → ")
    return problems


class Texts(Mapping[str, Any]):
    """One module's strings in every language: `texts[key]` is the current language's string (or
    nested table). Both tables must have the same keys and the same {placeholders}."""

    def __init__(self, en: Mapping[str, Any], zh: Mapping[str, Any]) -> None:
        problems = _mismatches(en, zh)
        if problems:
            raise ValueError("the 中文 strings do not match the English ones: " + "; ".join(sorted(problems)))
        self.tables = {"en": en, "zh": zh}

    def __getitem__(self, key: str) -> Any:
        return self.tables[_current.get()][key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tables["en"])

    def __len__(self) -> int:
        return len(self.tables["en"])


def texts(module: str) -> Texts:
    """The words of one figure module (its name under "figures" in the locale files), in every language."""
    tables = locales.section("figures")
    return Texts(tables["en"][module], tables["zh"][module])
