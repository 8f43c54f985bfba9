"""Notes the page shows: made with a key and values, put into words in the visitor's language at the edge.

    note("top_k_vocab", k=500, vocab=96)   # a Note: its English text, its key, its values
    render(n, "zh")                         # "top_k 500 超过词表大小(96 个 token):改用 96"

The words are the locale files' "notes" table (and, for the older keys, the page's words, `words.STRINGS`); a
value that is itself a note (a reason inside a note) is rendered in the same language, and a knob a note names is
said as the page's control names it (the "knobs" table: "Top-k", "Beam width", never the library's `top_k`). A
note made by the library (the plan's context fit) carries the same kind of key, so nothing is ever translated by
matching English text. No Gradio.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from playground import locales
from playground.app.words import STRINGS, t
from playground.errors import PlaygroundError
from playground.notes import Note

log = logging.getLogger("playground.app")

__all__ = ["Note", "error_line", "error_note", "known", "knob_word", "note", "render", "render_all"]

_NOTES = locales.section("notes")
NOTE_WORDS: dict[str, tuple[str, str]] = {key: (en, _NOTES["zh"][key]) for key, en in _NOTES["en"].items()}
_KNOBS = locales.section("knobs")
# The notes whose {name} is a knob or a flag of the run (playground.app.limits): the page says its control's name.
KNOB_NOTES = frozenset({"not_a_flag", "not_whole", "not_finite", "knob_range", "knob_range_off", "knob_cap", "kv_range"})


def knob_word(name: str, lang: str) -> str:
    """The page's name of the knob or flag `name` in `lang` (a name it does not know, as it is)."""
    return _KNOBS["zh" if lang == "zh" else "en"].get(name, name)


def known(key: str) -> bool:
    return key in NOTE_WORDS or key in STRINGS


def _words(key: str, lang: str, values: dict[str, Any]) -> str:
    en, zh = NOTE_WORDS[key] if key in NOTE_WORDS else STRINGS[key]
    shown = {name: render(value, lang) if isinstance(value, Note) else value for name, value in values.items()}
    if key in KNOB_NOTES and isinstance(shown.get("name"), str):  # a knob as the page's control names it
        shown["name"] = knob_word(shown["name"], lang)
    return (zh if lang == "zh" else en).format(**shown)


def note(key: str, **values: Any) -> Note:
    """A note of the app: its English text from the words, its key and values for every other language."""
    return Note(_words(key, "en", values), key, **values)


def render(text: str, lang: str = "en") -> str:
    """`text` in `lang`: a keyed note in its words; any other text as it is (a checkpoint's own message)."""
    if isinstance(text, Note) and known(text.key):
        return _words(text.key, lang, text.values)
    return str(text)


def render_all(notes: Iterable[str], lang: str = "en") -> list[str]:
    return [render(n, lang) for n in notes]


def error_note(exc: BaseException) -> str:
    """The first line of an error a person can read, keyed when the error was raised with a Note."""
    first = exc.args[0] if exc.args else ""
    if isinstance(first, Note):
        return first
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def error_line(exc: BaseException, lang: str = "en", where: str = "") -> str:
    """The line a person sees for an exception, in `lang`; unexpected ones are logged in full."""
    if isinstance(exc, (PlaygroundError, ValueError)):
        return render(error_note(exc), lang)
    log.error("unexpected error%s", f" in {where}" if where else "", exc_info=exc)
    return t("unexpected", lang, what=type(exc).__name__)
