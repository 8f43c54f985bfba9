"""The words the figure builders write, in the language each builder is asked for.

    fig = viz.attention_heatmap(weights, labels, labels, lang="zh")  # axes, hover, colour bar in 中文

Every builder and caption takes `lang` ("en" or "zh", English by default) as an argument: nothing about the
language lives outside the call, so two requests drawing in different languages at once never see each other's.
Every module's words live in the locale files (`playground/locales/en.json`, `zh.json`, under "figures" → the
module's name); `texts(module)(lang)[key]` is the string in that language. Titles a caller passes in are drawn as
given.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from playground import locales

LANGUAGES = ("en", "zh")


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


class Texts:
    """One module's strings in every language: `texts(lang)[key]` is the string (or nested table) in `lang`. Both
    tables must have the same keys and the same {placeholders}."""

    def __init__(self, en: Mapping[str, Any], zh: Mapping[str, Any]) -> None:
        problems = _mismatches(en, zh)
        if problems:
            raise ValueError("the 中文 strings do not match the English ones: " + "; ".join(sorted(problems)))
        self.tables = {"en": en, "zh": zh}

    def __call__(self, lang: str) -> Mapping[str, Any]:
        if lang not in self.tables:
            raise ValueError(f"language {lang!r} is not drawn; use one of {', '.join(LANGUAGES)}")
        return self.tables[lang]


def texts(module: str) -> Texts:
    """The words of one figure module (its name under "figures" in the locale files), in every language."""
    tables = locales.section("figures")
    return Texts(tables["en"][module], tables["zh"][module])
