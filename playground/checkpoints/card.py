"""What a checkpoint says it is for: a one-line description (English and 中文) and an example prompt.

Read from our own format's "card" metadata, or from a `playground.json` file beside a Hugging Face
checkpoint folder's config.json (the SmolLM2 importer writes one). Both are optional; the text is
data from a file, never markup: the app escapes it wherever it shows it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playground.checkpoints.folder_files import read_folder_text
from playground.checkpoints.own_format import is_own_format
from playground.checkpoints.safetensors_io import read_header

CARD_FILE = "playground.json"
MAX_CARD_BYTES = 64 * 1024
MAX_TEXT = 300  # characters kept of a description or an example


@dataclass(frozen=True)
class Card:
    description: dict[str, str] = field(default_factory=dict)  # language code -> one line
    example_prompt: str | None = None

    def describe(self, lang: str) -> str | None:
        return self.description.get(lang) or self.description.get("en")


def _text(value: Any) -> str | None:
    return value.strip()[:MAX_TEXT] if isinstance(value, str) and value.strip() else None


def parse_card(data: Any) -> Card:
    """A Card from untrusted JSON: unknown keys and wrong types are ignored, long text is cut."""
    if not isinstance(data, dict):
        return Card()
    raw = data.get("description")
    if isinstance(raw, str):
        raw = {"en": raw}
    description = {lang: text for lang, value in (raw or {}).items()
                   if lang in ("en", "zh") and (text := _text(value))} if isinstance(raw, dict) else {}
    return Card(description, _text(data.get("example_prompt")))


def read_card(path: Path) -> Card:
    """The card of a checkpoint file or folder (an empty Card when there is none or it is unreadable)."""
    try:
        if path.is_dir():
            text = read_folder_text(path, CARD_FILE, MAX_CARD_BYTES)  # a regular file inside, within budget
            if text is not None:
                return parse_card(json.loads(text))
            own = [p for p in sorted(path.glob("*.safetensors"))[:1]]
            if not own:
                return Card()
            path = own[0]
        metadata = read_header(path).metadata
        if is_own_format(metadata) and "card" in metadata:
            return parse_card(json.loads(metadata["card"]))
    except Exception:  # noqa: BLE001 - an unreadable card is no card: it must never stop a model from loading
        return Card()
    return Card()


def write_card(directory: Path, card: dict[str, Any]) -> Path:
    """Write `playground.json` into a checkpoint folder."""
    target = directory / CARD_FILE
    target.write_text(json.dumps(card, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return target
