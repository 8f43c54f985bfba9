"""Gradio's copies of uploaded files that no upload event stored, held to the app's upload quota (a reach into
Gradio's internals: `Blocks.upload_file_set`; re-exported by `gradio_internals`, where every such reach is listed)."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import gradio as gr


class UploadCache:
    """Gradio's copies of uploaded files that no upload event has stored, held to `budget()` bytes.

    `POST /gradio_api/upload` takes files without any event of the page: Gradio keeps them until its
    `delete_cache` age. Every `interval` seconds this removes the oldest of this app's copies (those in
    its `upload_file_set`) while they hold more than the budget. A copy the catalog stored is a hard link
    (two names): it costs nothing more and is left to Gradio's own sweep.
    """

    def __init__(self, budget: Callable[[], int], interval: float = 2.0) -> None:
        self.budget = budget
        self.interval = interval
        self._app: Callable[[], Any] = lambda: None

    def sweep(self) -> int:
        """Remove the oldest unstored copies beyond the budget; returns the bytes removed."""
        files = getattr(self._app(), "upload_file_set", None)
        if not files:
            return 0
        entries = []
        for name in list(files):
            try:
                st = os.stat(name)
            except OSError:
                files.discard(name)
                continue
            if st.st_nlink == 1:
                entries.append((st.st_ctime, name, st.st_size))
        held = sum(size for _, _, size in entries)
        removed = 0
        for _, name, size in sorted(entries):
            if held <= self.budget():
                break
            try:
                os.remove(name)
            except OSError:
                pass
            files.discard(name)
            held -= size
            removed += size
        return removed

    def start(self, demo: gr.Blocks) -> None:
        """Sweep `demo`'s copies in a background thread for as long as `demo` exists."""
        ref = weakref.ref(demo)
        self._app = ref

        def loop() -> None:
            while ref() is not None:
                time.sleep(self.interval)
                self.sweep()

        threading.Thread(target=loop, daemon=True, name="upload-cache").start()
