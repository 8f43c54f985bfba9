"""Every word the app shows, one file per language: `en.json` and `zh.json` beside this module.

A translator edits the JSON files only. Each holds four tables with the same keys in every language:
`page` (the page's words, read by `playground.app.words.t`), `figures` (one table per figure module, read by
`playground.viz`), `notes` (the notes and one-line refusals, read by `playground.app.notes`) and `knobs` (each
knob and flag as the page's controls name it, in notes). Strings are `str.format` templates: keep every
`{placeholder}`, and in figure strings every `%{{plotly field}}` and `<b>`/`<br>` tag, as they are.
tests/app/test_locales.py checks that both files have the same keys and placeholders.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

LANGUAGES = ("en", "zh")
_HERE = Path(__file__).resolve().parent


@cache
def load(lang: str) -> dict[str, Any]:
    """The whole locale table of `lang` ("en" or "zh"), read once."""
    if lang not in LANGUAGES:
        raise ValueError(f"no words in {lang!r}; the languages are {', '.join(LANGUAGES)}")
    return json.loads((_HERE / f"{lang}.json").read_text(encoding="utf-8"))


def section(name: str) -> dict[str, dict[str, Any]]:
    """One top-level table (e.g. "page") in every language: {"en": {...}, "zh": {...}}."""
    return {lang: load(lang)[name] for lang in LANGUAGES}
