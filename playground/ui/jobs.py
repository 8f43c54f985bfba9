"""Following a tab's job from a streaming handler: its progress lines, then its result or its one-line error.

    job = Followed(session, work, lang, "kv")
    for line in job.lines(lambda p: t("time_cache_progress", lang, done=p.done, total=p.total)):
        yield line
    if job.error: ...                      # one line for the visitor
    elif job.result is None: ...           # stopped (Stop, a closed or expired tab)

The work runs as a job of the process's server (`playground.app.serving.run_job`), between the batch's
steps; the tab's Stop ends it (`Session.begin_job`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from playground.app import describe, serving
from playground.app.jobs import Progress
from playground.app.session import Session
from playground.ui.models import one_line

PROGRESS_SECONDS = 0.5  # a job's progress line is rewritten at most this often


class Followed:
    """One job of a tab, followed by its handler."""

    def __init__(self, session: Session, work: Iterator[Any], lang: str, what: str) -> None:
        self.session, self.work, self.lang, self.what = session, work, lang, what
        self.result: Any = None  # the last item that is not Progress; None when stopped
        self.error: str | None = None  # one line, inert, in the visitor's language

    def lines(self, progress: Callable[[Progress], str]) -> Iterator[str]:
        """The job's progress as lines for the page (the first at once, then at most every PROGRESS_SECONDS)."""
        stop = self.session.begin_job()
        shown = 0.0
        try:
            for item in serving.run_job(self.work, stop, self.session.key):
                if not isinstance(item, Progress):
                    self.result = item
                elif time.monotonic() - shown >= PROGRESS_SECONDS:
                    shown = time.monotonic()
                    yield progress(item)
        except Exception as exc:  # noqa: BLE001 - one line where the result would be
            self.error = describe.inert(one_line(exc, self.lang, self.what))
        finally:
            self.session.end_job(stop)
