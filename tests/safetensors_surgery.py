"""Rewriting safetensors files to make broken ones (for bad-file and fuzz tests)."""

from __future__ import annotations

import json
from pathlib import Path


def read_raw(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def write_raw(path: Path, header: dict, payload: bytes) -> None:
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + payload)


def drop_tensor(path: Path, name: str) -> None:
    """Remove a tensor and its bytes, keeping the file otherwise valid."""
    header, payload = read_raw(path)
    begin, end = header.pop(name)["data_offsets"]
    size = end - begin
    for entry_name, entry in header.items():
        if entry_name != "__metadata__" and entry["data_offsets"][0] >= end:
            entry["data_offsets"] = [entry["data_offsets"][0] - size, entry["data_offsets"][1] - size]
    write_raw(path, header, payload[:begin] + payload[end:])


def reshape_tensor(path: Path, name: str, shape: list[int]) -> None:
    """Give a tensor another shape with the same number of elements (a valid file, wrong for the config)."""
    header, payload = read_raw(path)
    header[name]["shape"] = shape
    write_raw(path, header, payload)
