"""English text that exists offline on every machine: the Python reference docs in `pydoc_data`.

`pydoc_data.topics.topics` maps ~80 help topics ("assert", "assignment", ...) to plain-text pages
from the Python documentation (PSF licence). Pages are cut into paragraphs at blank lines; a
paragraph is held out when the CRC-32 of its text falls in a fixed residue class, so the split is
deterministic, independent of dict order, and a paragraph lands on the same side in every Python
version that ships it unchanged.
"""

from __future__ import annotations

import re
import sys
import zlib
from dataclasses import dataclass

SOURCE = "pydoc_data.topics (Python {} reference documentation, PSF licence)"
HELD_OUT_MODULUS = 10  # one paragraph in ten, by hash


@dataclass(frozen=True)
class TextSplit:
    train: list[str]  # documents (one per topic, held-out paragraphs removed)
    held_out: list[str]  # documents (one per topic that has held-out paragraphs)

    @property
    def train_chars(self) -> int:
        return sum(map(len, self.train))

    @property
    def held_out_chars(self) -> int:
        return sum(map(len, self.held_out))


def source_label() -> str:
    return SOURCE.format(".".join(map(str, sys.version_info[:3])))


def is_held_out(paragraph: str) -> bool:
    return zlib.crc32(paragraph.encode("utf-8")) % HELD_OUT_MODULUS == 0


def load_split() -> TextSplit:
    """Train / held-out documents from pydoc_data, deterministically."""
    from pydoc_data.topics import topics

    train, held_out = [], []
    for key in sorted(topics):
        paragraphs = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", topics[key]) if p.strip()]
        kept = [p for p in paragraphs if not is_held_out(p)]
        out = [p for p in paragraphs if is_held_out(p)]
        if kept:
            train.append("\n\n".join(kept))
        if out:
            held_out.append("\n\n".join(out))
    return TextSplit(train=train, held_out=held_out)
