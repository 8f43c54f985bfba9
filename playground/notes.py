"""A note: one line that says what a run changed or ignored, with a key and its values.

The library writes its notes in English (a `Note` is a `str`, so a script prints it as it always did);
the key and the values let the app say the same thing in the visitor's language
(`playground.app.notes.render`), never by pattern-matching the English afterwards.
"""

from __future__ import annotations

from typing import Any


class Note(str):
    """English text with the `key` and `values` it was made from."""

    key: str
    values: dict[str, Any]

    def __new__(cls, text: str, key: str, **values: Any) -> Note:
        made = super().__new__(cls, text)
        made.key, made.values = key, values
        return made

    def __reduce__(self) -> tuple:  # pickled with its key (ZeroGPU's worker sends plans and events back)
        return (_remake, (str(self), self.key, self.values))

    def __repr__(self) -> str:
        return f"Note({self.key!r}, {str(self)!r})"


def _remake(text: str, key: str, values: dict[str, Any]) -> Note:
    return Note(text, key, **values)
