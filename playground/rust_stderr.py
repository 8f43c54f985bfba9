"""The command line's stderr without Rust's panic reports: the CLI says one line, never Rust's three.

When the `tokenizers` Rust code panics (a stranger's tokenizer.json whose split pattern backtracks), Rust's panic
hook writes its own report straight to file descriptor 2, before Python sees the exception (after a blank line):

    thread '<unnamed>' (26123) panicked at .../onig-6.5.3/src/lib.rs:647:23:
    Onig: Regex search error: retry-limit-in-match over
    note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

`checkpoints.tokenizer.guarded` turns the panic into a TokenizerError whose one line says what to do; the CLI
prints that line. Python cannot replace Rust's hook, so `panic_reports_dropped()` sends descriptor 2 to a
temporary file while a command runs and passes everything else on when it ends. Only for the CLI: the server's
threads share descriptor 2, and its log says the tokenizer panicked in its own words.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

# Rust's panic hook: "thread 'NAME' (ID) panicked at FILE:LINE:COL:" (no ID before Rust 1.88), the message, then
# "note: run with `RUST_BACKTRACE=1` ..." or, with a backtrace, "stack backtrace:", frames, "note: Some details ...".
_PANIC_START = re.compile(r"^thread '.*'( \(\d+\))? panicked at ")


def without_panic_reports(text: str) -> str:
    """`text` less every Rust panic report: the blank line Rust writes first, its "panicked at" line, and every
    line after it to the "note:" line that ends it."""
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if not inside and _PANIC_START.match(line):
            inside = True
            if kept and kept[-1] == "\n":
                kept.pop()
        elif inside and line.startswith("note: "):
            inside = False
        elif not inside:
            kept.append(line)
    return "".join(kept)


@contextmanager
def panic_reports_dropped() -> Iterator[None]:
    """Run the block with descriptor 2 in a temporary file, then write what it got, less Rust's panic reports,
    to the real stderr (what the block wrote comes when it ends, not as it was written)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            rest = without_panic_reports(held.read().decode("utf-8", errors="replace"))
            if rest:
                sys.stderr.write(rest)
                sys.stderr.flush()
