"""Where the app runs: a Hugging Face Space (and which), ZeroGPU, and the public address of a Space.

A Space sets `SYSTEM=spaces` and `SPACE_ID=owner/name`; a ZeroGPU Space also `SPACES_ZERO_GPU`.
Nothing here imports Gradio or `spaces`: what ZeroGPU changes lives in `playground.app.zerogpu`.
"""

from __future__ import annotations

import os
import re

_SPACE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_TRUE = ("1", "true", "yes", "on")


def space_id() -> str | None:
    """`owner/name` of the Space this app runs in, or None outside a Space (or a malformed value)."""
    value = os.environ.get("SPACE_ID", "").strip()
    return value if _SPACE_ID.match(value) and ".." not in value else None


def on_space() -> bool:
    return space_id() is not None or os.environ.get("SYSTEM", "").strip().lower() == "spaces"


def space_url() -> str | None:
    """The address people share (huggingface.co/spaces/owner/name), not the iframe's own *.hf.space.
    The Hub passes the page's query string to the app on its first load, so links to it work."""
    sid = space_id()
    return f"https://huggingface.co/spaces/{sid}" if sid else None


def shared_link(query: str) -> str:
    """What Copy link gives for a query string: inside a Space the whole huggingface.co address, else
    the query alone (the page puts it after its own address)."""
    return (space_url() or "") + query


def zero_gpu() -> bool:
    return on_space() and os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in _TRUE

