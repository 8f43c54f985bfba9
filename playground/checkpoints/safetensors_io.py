"""Reading safetensors files defensively.

A safetensors file is 8 bytes of little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the raw data. We validate the whole header against the file size
before touching any data, so a truncated or lying file gives one clear message instead of a crash,
then read tensors through memory mapping. Nothing in a checkpoint is ever executed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from playground.errors import CheckpointError

MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
ITEM_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})
MAX_TENSORS = 16_384  # per header; see Limits.max_tensors
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_bytes: int


def refuse_pickle(path: Path) -> None:
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise CheckpointError(
            f"{path.name}: refusing to load a pickle-based PyTorch file ({path.suffix}) because unpickling "
            "can run arbitrary code; convert it to .safetensors (e.g. with transformers' save_pretrained) "
            "and load that instead"
        )


class _Budget:
    """Counts JSON objects and numbers while the header is parsed: a 100 MB header of tiny entries
    would otherwise become millions of Python objects (seconds and gigabytes) before any check."""

    def __init__(self, where: str, max_tensors: int) -> None:
        self.where, self.max_tensors = where, max_tensors
        self.objects = self.numbers = 0

    def _refuse(self) -> None:
        raise CheckpointError(
            f"{self.where}: the header lists more than {self.max_tensors:,} tensors (or that many entries' worth of "
            "numbers); checkpoints here may have at most that many tensors"
        )

    def object(self, pairs: list[tuple[str, object]]) -> dict[str, object]:
        self.objects += 1
        if self.objects > self.max_tensors + 2:  # + the header itself and __metadata__
            self._refuse()
        return dict(pairs)

    def _count(self) -> None:
        self.numbers += 1
        if self.numbers > 16 * self.max_tensors:  # shape dimensions and two offsets per tensor
            self._refuse()

    def integer(self, text: str) -> int:
        self._count()
        return int(text)

    def real(self, text: str) -> float:
        self._count()
        return float(text)


def read_header(path: str | os.PathLike, *, max_tensors: int = MAX_TENSORS) -> SafetensorsHeader:
    """Parse and validate a safetensors header without reading tensor data."""
    path = Path(path)
    refuse_pickle(path)
    where = path.name
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"{where}: file is {size} bytes, too short to be safetensors (truncated?)")
            header_len = int.from_bytes(prefix, "little")
            if header_len > MAX_HEADER_BYTES or header_len > size - 8:
                raise CheckpointError(
                    f"{where}: header claims {header_len} bytes but the file has {size - 8} after the length "
                    "prefix; the file is truncated or not safetensors"
                )
            raw = f.read(header_len)
    except OSError as error:
        raise CheckpointError(f"{where}: cannot read file ({error.strerror or error})") from None
    try:
        budget = _Budget(where, max_tensors)
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=budget.object, parse_int=budget.integer,
                            parse_float=budget.real)
    except CheckpointError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # ValueError: JSON, or a 5,000-digit number
        raise CheckpointError(f"{where}: header is not valid JSON ({error}); the file is corrupt") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: header must be a JSON object; the file is corrupt")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(f"{where}: __metadata__ must map strings to strings")
    data_bytes = size - 8 - header_len
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        tensors[name] = _tensor_info(where, name, entry, data_bytes)
    _check_layout(where, tensors, data_bytes)
    return SafetensorsHeader(path=path, tensors=tensors, metadata=metadata, data_bytes=data_bytes)


def _tensor_info(where: str, name: str, entry: object, data_bytes: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where}: entry for tensor '{name}' is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in ITEM_SIZES:
        raise CheckpointError(f"{where}: tensor '{name}' has unsupported dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise CheckpointError(f"{where}: tensor '{name}' has an invalid shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise CheckpointError(f"{where}: tensor '{name}' has invalid data_offsets {offsets!r}")
    begin, end = offsets
    expected = math.prod(shape) * ITEM_SIZES[dtype]
    if not 0 <= begin <= end <= data_bytes:
        raise CheckpointError(
            f"{where}: tensor '{name}' claims bytes {begin}..{end} but the data section has {data_bytes} bytes "
            "(the file is truncated or its header lies)"
        )
    if end - begin != expected:
        raise CheckpointError(
            f"{where}: tensor '{name}' of shape {shape} and dtype {dtype} needs {expected} bytes "
            f"but its offsets span {end - begin}"
        )
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def _check_layout(where: str, tensors: dict[str, TensorInfo], data_bytes: int) -> None:
    # Tensors must tile the data section without overlapping (what safetensors itself requires).
    position = 0
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if info.begin != position:
            problem = "overlaps another tensor" if info.begin < position else "leaves a gap before it"
            raise CheckpointError(f"{where}: tensor '{info.name}' {problem}; the header's offsets are inconsistent")
        position = info.end
    if position != data_bytes:
        raise CheckpointError(
            f"{where}: the header describes {position} data bytes but the file holds {data_bytes}; "
            "the file is truncated or has trailing garbage"
        )


class TensorReader:
    """Lazy, memory-mapped access to the tensors of one or more validated safetensors files."""

    def __init__(self, headers: list[SafetensorsHeader]) -> None:
        self.headers = headers
        self.location: dict[str, SafetensorsHeader] = {}
        for header in headers:
            for name in header.tensors:
                if name in self.location:
                    raise CheckpointError(
                        f"tensor '{name}' appears in both {self.location[name].path.name} and {header.path.name}"
                    )
                self.location[name] = header
        self._handles: dict[Path, object] = {}

    @classmethod
    def open(cls, paths: list[Path], *, max_tensors: int = MAX_TENSORS) -> TensorReader:
        headers: list[SafetensorsHeader] = []
        for p in paths:  # the limit holds for all shards together
            left = max_tensors - sum(len(h.tensors) for h in headers)
            headers.append(read_header(p, max_tensors=max(left, 0)))
        return cls(headers)

    def __contains__(self, name: str) -> bool:
        return name in self.location

    def names(self) -> list[str]:
        return list(self.location)

    def info(self, name: str) -> TensorInfo:
        return self.location[name].tensors[name]

    def get(self, name: str) -> torch.Tensor:
        header = self.location[name]
        handle = self._handles.get(header.path)
        if handle is None:
            try:
                handle = safe_open(str(header.path), framework="pt")
            except Exception as error:  # safetensors raises its own error types
                reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
                raise CheckpointError(f"{header.path.name}: cannot open ({reason})") from None  # no server path
            self._handles[header.path] = handle
        return handle.get_tensor(name)

    @property
    def total_bytes(self) -> int:
        return sum(h.path.stat().st_size for h in self.headers)
