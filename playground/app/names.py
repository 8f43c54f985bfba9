"""The only way a model name from the browser (a dropdown value, a link, a script) becomes a path.

Names are "tiny-lm", "imports/foo", "upload/<id>", "hub/<org>/<repo>". A shipped or operator checkpoint
is found only by looking its name up in the listing of the weights folders (never by joining it to a
folder), a preloaded repo in the Hugging Face cache's listing, and an upload or Hub download only
strictly inside its owner's own folders (no absolute paths, no "..", no links pointing out). Anything
else is refused with one line; another owner's upload gives the same line as a name that never existed,
so names cannot be probed. Storage (quota, time to live) is `playground.app.uploads`. No Gradio here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playground.app.notes import note
from playground.app.uploads import EVICTED, EXPIRED, HUB_PREFIX, SAFE_NAME, SAFE_UPLOAD_ID, UPLOAD_PREFIX, Uploads
from playground.errors import PlaygroundError

MAX_NAME_CHARS = 272  # longer than any catalog name ("hub/" + two Hub names of at most 128 characters)
PRIVATE_UPLOAD = note("private_upload")
PRIVATE_HUB = note("private_hub")


def shown_name(name: str, limit: int = 40) -> str:
    """A name as a message quotes it: at most `limit` characters (a 300-character name is not repeated)."""
    return name if len(name) <= limit else name[:limit] + "…"


def resolve(name: str, owner: str | None, uploads: Uploads, listed: Callable[[str], Path | None]) -> Path:
    """The checkpoint path for `name`, guaranteed inside the folders `owner` may read.

    `listed(name)`: the path of the shared checkpoint of that name (shipped, operator's, preloaded) or None. Resolving an upload or
    Hub download counts as using it (its time to live starts again)."""
    if not isinstance(name, str) or not name.strip():
        raise PlaygroundError(note("no_model_selected"))
    name = name.strip()
    if len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
        raise PlaygroundError(note("not_a_name", name=shown_name(name)))
    if name.startswith(UPLOAD_PREFIX):
        root, rel, private = uploads.owner_upload_dir(owner), name[len(UPLOAD_PREFIX):].strip("/"), PRIVATE_UPLOAD
        if not SAFE_UPLOAD_ID.match(rel):
            raise PlaygroundError(PRIVATE_UPLOAD)
    elif name.startswith(HUB_PREFIX):
        root, rel, private = uploads.hub_dir_for(owner), name[len(HUB_PREFIX):], PRIVATE_HUB
        if not all(SAFE_NAME.match(part) for part in rel.split("/")) or rel.count("/") != 1:
            raise PlaygroundError(note("not_a_hub_name", name=shown_name(name)))
    else:
        parts = name.split("/")
        if "\\" in name or any(p in ("", ".", "..") for p in parts) or len(parts) > 2:
            raise PlaygroundError(note("not_a_name", name=name))
        found = listed(name)  # only what the listing offers: a name is looked up, never joined
        if found is not None:
            return found
        raise PlaygroundError(note("no_checkpoint", name=name))
    parts = rel.split("/")
    if rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts) or len(parts) > 2:
        raise PlaygroundError(note("not_a_name", name=shown_name(name)))
    try:
        path = (root / rel).resolve()
        if not path.is_relative_to(root):
            raise PlaygroundError(private)
        exists = path.exists()
    except OSError:  # a name the file system cannot hold: its message would show the server's folder
        raise PlaygroundError(private) from None
    if not exists:  # the owner's own folder: saying why it went tells nothing of anyone else's
        raise PlaygroundError(EVICTED if uploads.was_evicted(path) else EXPIRED if uploads.was_expired(path) else private)
    uploads.touch(path)
    return path


def stored_path(name: str, owner: str | None, uploads: Uploads) -> Path | None:
    """The folder of `owner`'s upload or Hub download `name` (whether or not it still exists), without
    counting as a use; None for any other name."""
    if not isinstance(name, str):
        return None
    if name.startswith(UPLOAD_PREFIX):
        rel = name[len(UPLOAD_PREFIX):].strip("/")
        return uploads.owner_upload_dir(owner).resolve() / rel if SAFE_UPLOAD_ID.match(rel) else None
    if name.startswith(HUB_PREFIX):
        parts = name[len(HUB_PREFIX):].split("/")
        if len(parts) == 2 and all(SAFE_NAME.match(p) for p in parts):
            return uploads.hub_dir_for(owner).resolve().joinpath(*parts)
    return None
