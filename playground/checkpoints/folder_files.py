"""Bounded reads of the small files in a checkpoint folder (configs, tokenizer files, templates).

A checkpoint folder may come from a stranger. Every file read from it by name goes through
`read_folder_file`, which refuses, in one line naming only the file, anything that is not a regular
file inside the folder (a device such as /dev/zero, a fifo, a symbolic link out of the folder) and
anything over its byte budget, before reading more than the budget allows.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from playground.errors import CheckpointError

MIB = 1024 * 1024
# A file name a checkpoint folder may use for a file we read: no separators, no leading dot.
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def checkpoint_root(directory: Path) -> Path:
    """The folder that files of `directory` must resolve inside: the folder itself, or for a Hugging Face
    cache snapshot (models--owner--name/snapshots/<revision>/, whose files link into the repo's blobs/)
    the repo's cache folder."""
    root = directory.resolve()
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        root = root.parent.parent
    return root


def read_folder_file(directory: Path, name: str, max_bytes: int) -> bytes | None:
    """The bytes of `directory/name`, or None when there is no such file.

    `name` is a plain file name, or one sub-folder and a plain name ("additional_chat_templates/x.jinja").
    Refused with a CheckpointError naming only `name`: a path that resolves outside the checkpoint folder,
    anything but a regular file, more than `max_bytes` bytes. The size is checked on the open file and the
    read stops at `max_bytes` + 1, so a file that grows or lies about its size costs no more.
    """
    parts = name.split("/")
    if len(parts) > 2 or not all(_PLAIN_NAME.match(p) for p in parts):
        raise CheckpointError(f"{name!r} is not a plain file name inside the checkpoint folder")
    path = directory.joinpath(*parts)
    if not os.path.lexists(path):
        return None
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):  # a dangling or looping link
        raise CheckpointError(f"{name}: a link to nothing readable; copy the file itself into the folder") from None
    if not resolved.is_relative_to(checkpoint_root(directory)):
        raise CheckpointError(f"{name}: a link to a file outside the checkpoint folder; copy the file itself into the folder")
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise CheckpointError(f"{name}: cannot be opened ({_reason(error)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"{name}: not a regular file; put the file itself in the folder")
        if info.st_size > max_bytes:
            raise CheckpointError(f"{name}: {info.st_size / MIB:,.1f} MiB is over the {max_bytes / MIB:,.1f} MiB "
                                  "allowed for this file here; use a smaller file")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(MIB, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise CheckpointError(f"{name}: grew past the {max_bytes / MIB:,.1f} MiB allowed while being read")
        return b"".join(chunks)
    except OSError as error:
        raise CheckpointError(f"{name}: cannot be read ({_reason(error)})") from None
    finally:
        os.close(fd)


def read_folder_text(directory: Path, name: str, max_bytes: int) -> str | None:
    """`read_folder_file` decoded as UTF-8 (one line naming the file when it is not UTF-8 text)."""
    data = read_folder_file(directory, name, max_bytes)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{name}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None


def read_folder_json(directory: Path, name: str, max_bytes: int) -> dict[str, Any] | None:
    """`read_folder_text` parsed as one JSON object, or None when there is no such file. Not JSON, too
    deeply nested, or not an object: one line naming the file (a JSON error names no path)."""
    text = read_folder_text(directory, name, max_bytes)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise CheckpointError(f"{name}: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{name}: expected a JSON object")
    return data


def _reason(error: OSError) -> str:
    """An OSError's reason without its file name (which may be a server path)."""
    return error.strerror or errno.errorcode.get(error.errno or 0, type(error).__name__)
