"""Tokenizer files a stranger could upload that make the `tokenizers` Rust code panic (issue 42, row 8)."""

from __future__ import annotations

import json
from pathlib import Path

# A split pattern that backtracks exponentially on a run of "a" not followed by "b": Oniguruma gives up at its
# retry limit, and `tokenizers` answers that with a Rust panic (pyo3's PanicException, a BaseException).
BACKTRACKING = "(a+)+b"
PANIC_PROMPT = "a" * 60 + "!"


def backtracking_split(folder: Path) -> Path:
    """Put a split on BACKTRACKING before the pre-tokenizer of `folder`'s tokenizer.json: ordinary prompts read
    as before, PANIC_PROMPT panics."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    split = {"type": "Split", "pattern": {"Regex": BACKTRACKING}, "behavior": "Isolated", "invert": False}
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, data["pre_tokenizer"]]}
    path.write_text(json.dumps(data))
    return folder


def backtracking_decoder(folder: Path) -> Path:
    """Fuse the decoded pieces, then replace BACKTRACKING in the text: decoding many "a" tokens panics."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    replace = {"type": "Replace", "pattern": {"Regex": BACKTRACKING}, "content": ""}
    data["decoder"] = {"type": "Sequence", "decoders": [{"type": "Fuse"}, replace]}
    path.write_text(json.dumps(data))
    return folder
