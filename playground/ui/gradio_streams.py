"""Gradio's event streams (`/queue/data`), two of their endings made quiet (see `gradio_internals`, pinned to the
same Gradio):

- `tolerate_streams_closing_together`: a session's message queue (`Queue.pending_messages_per_session`) deleted twice
  when two event streams of one tab are cut at once is no error.
- `EndStreamsOfGoneSessions`: an event stream opened for a session whose message queue is gone (a closing tab) ends
  without a traceback in the server log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import gradio as gr
import gradio.utils

QUEUE_DATA_PATH = re.compile(r"/queue/data$")


def _session_was_gone(error: BaseException) -> bool:
    """Whether `error` is, or was raised from, Gradio's "no such session" (an HTTP 404) in its event stream."""
    seen: BaseException | None = error
    while seen is not None:
        if getattr(seen, "status_code", None) == 404:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class EndStreamsOfGoneSessions:
    """ASGI middleware: an event stream (`/queue/data`) that opens after its session's message queue was deleted
    ends quietly. A closing tab does this: the Gradio client aborts the stream it holds (Gradio then deletes the
    session's queue), and an event the page had already joined opens a new stream a moment later. Gradio answers
    that stream "session not found" (the tab is gone, so no one reads it) and raises an HTTP 404 inside a response
    it has started, which the server logged as a traceback ("response already started")."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http" or QUEUE_DATA_PATH.search(scope.get("path", "")) is None:
            await self.app(scope, receive, send)
            return
        state = {"started": False, "ended": False}

        async def watched(message: dict) -> None:
            if message.get("type") == "http.response.start":
                state["started"] = True
            elif message.get("type") == "http.response.body" and not message.get("more_body", False):
                state["ended"] = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as error:
            if not (state["started"] and _session_was_gone(error)):
                raise
            if not state["ended"]:
                await send({"type": "http.response.body", "body": b"", "more_body": False})


class _SessionMessages(gradio.utils.LRUCache):
    """Gradio's map of session → message queue, whose delete of a session already gone is a no-op."""

    def __delitem__(self, key: Any) -> None:
        self.pop(key, None)


def tolerate_streams_closing_together(demo: gr.Blocks) -> None:
    """A tab that reconnects holds two event streams (`/queue/data`) for a while. When both are cut (the tab closes),
    each stream's clean-up deletes the session's message queue; the second raised KeyError into the server log
    (Gradio `routes.sse_stream`). Both clean-ups mean the same thing: the session has no stream left."""
    queue = demo._queue
    old = queue.pending_messages_per_session
    new = _SessionMessages(old.max_size)
    new.update(old)
    queue.pending_messages_per_session = new
