"""What the server keeps on purpose, in bytes: the loaded models, their precision copies, the tabs' runs, what Gradio
keeps per tab and the models' kept captured decode steps.

A process's memory after a crowd has left is that plus what the allocator has not given back. `holdings` says the
first; `report_on_signal` writes it to the log when the process gets SIGUSR1 (`kill -USR1 <pid>`), so that a load
test can tell memory kept by design from memory that was not returned, without any route a visitor could call.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass

from playground.app import heap
from playground.app.registry import ModelRegistry
from playground.app.serving import pools_held, prefix_held
from playground.app.session import Sessions
from playground.loaded import token_texts_held
from playground.variants import VARIANTS

log = logging.getLogger("playground.memory")
MIB = 2**20
PREFIX = "holding"  # the log line's first word (a load test looks for it)


@dataclass(frozen=True)
class Holdings:
    models: int
    model_bytes: int
    copies: int
    copy_bytes: int
    tabs: int
    runs: int
    capture_bytes: int
    tab_states: int = 0  # sessions Gradio keeps state for (its copy of the page per tab, `ui.gradio_state`)
    tab_state_bytes: int = 0
    steps: int = 0  # the models' kept captured decode steps (`app.py --compile`)
    step_bytes: int = 0
    run_bytes: int = 0  # the runs' records: events, path, prompt (`Run.record_bytes`; their arrays are capture_bytes)
    prefix_blocks: int = 0  # prompt-prefix K/V blocks kept for reuse (`app.serving.prefix_held`)
    prefix_bytes: int = 0
    live_values: int = 0  # the whole live-screen values `live_state` keeps per run version (`ui.streaming`)
    live_value_bytes: int = 0
    pools: int = 0  # the running requests' KV caches: rows of the shared batch's pools (`app.serving.pools_held`)
    pool_bytes: int = 0
    token_texts: int = 0  # the tokenizers' remembered token texts (`loaded.token_texts_held`)
    token_text_bytes: int = 0
    # Not kept on purpose, so not in the total: glibc's own account of the whole process (`heap.allocator`), which
    # tells what the rest of RSS is: still allocated by something, or freed and kept by the allocator
    heap_in_use: int = 0
    heap_free_kept: int = 0
    heap_mmapped: int = 0

    @property
    def total_bytes(self) -> int:
        # Gradio's copy of each tab's state is kept on purpose too (row 2: 0.42 MiB a tab that nothing counted).
        return (self.model_bytes + self.copy_bytes + self.capture_bytes + self.run_bytes + self.tab_state_bytes
                + self.step_bytes + self.prefix_bytes + self.live_value_bytes + self.pool_bytes
                + self.token_text_bytes)

    def line(self) -> str:
        """One log line, machine-readable after the prefix: `key=value` pairs, bytes as integers."""
        return (f"{PREFIX} total={self.total_bytes} models={self.models} model_bytes={self.model_bytes} "
                f"copies={self.copies} copy_bytes={self.copy_bytes} tabs={self.tabs} runs={self.runs} "
                f"capture_bytes={self.capture_bytes} tab_states={self.tab_states} "
                f"tab_state_bytes={self.tab_state_bytes} steps={self.steps} step_bytes={self.step_bytes} "
                f"run_bytes={self.run_bytes} prefix_blocks={self.prefix_blocks} prefix_bytes={self.prefix_bytes} "
                f"live_values={self.live_values} live_value_bytes={self.live_value_bytes} "
                f"pools={self.pools} pool_bytes={self.pool_bytes} "
                f"token_texts={self.token_texts} token_text_bytes={self.token_text_bytes} "
                f"heap_in_use={self.heap_in_use} heap_free_kept={self.heap_free_kept} "
                f"heap_mmapped={self.heap_mmapped} ({self.total_bytes / MIB:,.0f} MiB)")


def holdings(registry: ModelRegistry, sessions: Sessions,
             tab_states: Callable[[], tuple[int, int]] = lambda: (0, 0),
             prefixes: Callable[[], tuple[int, int]] = prefix_held,
             live_values: Callable[[], tuple[int, int]] = lambda: (0, 0),
             pools: Callable[[], tuple[int, int]] = pools_held,
             token_texts: Callable[[], tuple[int, int]] = token_texts_held) -> Holdings:
    """`tab_states`: (sessions, bytes) of Gradio's per-tab state (`ui.gradio_state.tab_states`; no Gradio here);
    `prefixes`: (blocks, bytes) of the prefix stores (the process's server's); `live_values`: (values, bytes) of
    the whole live-screen values kept for `live_state` (`Streaming.live_values`); `token_texts`: (texts, bytes) the
    tokenizers remember (the process's)."""
    models, model_bytes = registry.held()
    copies, copy_bytes = VARIANTS.held()
    tabs, runs, capture_bytes, run_bytes = sessions.held()
    steps, step_bytes = registry.steps_held()
    malloc = heap.allocator() or heap.Allocator(0, 0, 0)
    return Holdings(models, model_bytes, copies, copy_bytes, tabs, runs, capture_bytes, *tab_states(), steps,
                    step_bytes, run_bytes, *prefixes(), *live_values(), *pools(), *token_texts(), malloc.in_use,
                    malloc.free_kept, malloc.mmapped)


def parse(line: str) -> Holdings | None:
    """A `Holdings.line` back (None for any other line)."""
    head, _, rest = line.partition(PREFIX + " ")
    if not rest:
        return None
    try:
        values = dict(pair.split("=", 1) for pair in rest.split(" (", 1)[0].split())
        fields = Holdings.__dataclass_fields__  # a field a line of an older server lacks is 0 when it has a default
        return Holdings(**{k: int(values[k] if k in values or f.default is dataclasses.MISSING else f.default)
                           for k, f in fields.items()})
    except (KeyError, ValueError):
        return None


def report_on_signal(measure: Callable[[], Holdings]) -> bool:
    """Log `measure()`'s line whenever the process gets SIGUSR1 (Python runs the handler in the main thread, between
    two of its bytecodes). False where there is no such signal (Windows) or no main thread to run it."""
    signum = getattr(signal, "SIGUSR1", None)
    if signum is None:
        return False
    try:
        signal.signal(signum, lambda *_: log.info(measure().line()))
    except ValueError:  # not the main thread
        return False
    return True
