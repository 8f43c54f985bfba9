"""Progress reporting: a tqdm bar on a terminal, one plain line every few steps in a log file."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """`update(step, loss, lr)` after each step; `write(text)` for evaluation lines."""

    def __init__(self, total: int, *, every: int = 10, stream: TextIO | None = None, bar: bool | None = None) -> None:
        self.total, self.every = total, max(1, every)
        self.stream = stream or sys.stderr
        self.started = time.perf_counter()
        self._bar = None
        want_bar = self.stream.isatty() if bar is None else bar
        if want_bar:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # tqdm is optional: fall back to plain lines
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, file=self.stream, dynamic_ncols=True)

    def update(self, step: int, loss: float, lr: float) -> None:
        """`step` counts completed optimiser steps (1-based)."""
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", refresh=False)
        elif step % self.every == 0 or step == self.total:
            elapsed = time.perf_counter() - self.started
            rate = step / elapsed if elapsed > 0 else 0.0
            print(
                f"step {step:>6}/{self.total}  loss {loss:.4f}  lr {lr:.2e}  {elapsed:7.1f}s  {rate:.2f} step/s",
                file=self.stream, flush=True,
            )

    def write(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
