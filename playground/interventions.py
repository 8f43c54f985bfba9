"""Interventions: edits to one part of a model's computation, made during every forward pass.

    Ablate(layer, head=h)                 the head's output (its slice of the attention output
                                          projection's input) set to zero
    Ablate(layer, component="mlp")        the block's MLP output set to zero
    Ablate(..., mode="mean", mean=m)      the same part set to a fixed vector instead: its mean
                                          activation over some text (`playground.analysis.steering.
                                          mean_ablation` measures it over a prompt's positions), size
                                          head_dim for a head, d_model for the MLP
    Steer(layer, vector, scale)           scale · vector added to the residual stream after block `layer`,
                                          at every position
    Patch(layer, position, value)         the residual stream after block `layer` replaced at one
                                          (absolute, 0-based) position

`layer` is the 0-based block index. "The residual stream after block `layer`" is that block's output,
before the next block (and before the final norm for the last block). `vector`, `value` and `mean` are
1-D tensors (or lists of numbers); they are stored as tuples of floats so that an intervention is a
frozen, hashable value with a JSON form (`to_dict` / `from_dict`) that runs and links can record.

Encoder-decoder models: edits apply to the decoder's blocks by default; `stack="encoder"` picks the
encoder's blocks (applied when the source is encoded) and `attention="cross"` a decoder block's
cross-attention heads instead of its self-attention heads.

This module is data only: `playground.models.edits` applies the edits to a model, `check` validates
them against a model's config, `pack` / `unpack` make a compact URL-safe text of a list for links
(a SmolLM2 steering vector: ~3.2k characters, against ~12k as JSON lists).
"""

from __future__ import annotations

import base64
import json
import math
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from playground.errors import PlaygroundError
from playground.notes import Note

STACKS = ("decoder", "encoder")
ATTENTIONS = ("self", "cross")
COMPONENTS = ("head", "mlp")
MODES = ("zero", "mean")


class InterventionError(PlaygroundError):
    """An intervention that cannot apply to this model; the message says what to change."""


def _vector(value: Any, what: str) -> tuple[float, ...]:
    """A 1-D tensor, array, list or tuple of finite numbers -> a tuple of Python floats."""
    if hasattr(value, "detach"):  # torch.Tensor, without importing torch here
        value = value.detach().cpu()
        if value.dim() != 1:
            raise InterventionError(f"{what} must be a 1-D vector, got a tensor of shape {tuple(value.shape)}")
        value = value.double().tolist()
    elif hasattr(value, "tolist"):  # numpy
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not value:
        raise InterventionError(f"{what} must be a non-empty 1-D vector of numbers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise InterventionError(f"{what} must hold numbers only (a 1-D vector)")
    out = tuple(float(v) for v in value)
    if not all(math.isfinite(v) for v in out):
        raise InterventionError(f"{what} holds a NaN or infinite value; use finite numbers")
    return out


def _index(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InterventionError(f"{what} must be a non-negative whole number (0-based), got {value!r}")
    return value


def _choice(value: Any, choices: tuple[str, ...], what: str) -> None:
    if value not in choices:
        raise InterventionError(f"{what} is {value!r}; use one of {', '.join(repr(c) for c in choices)}")


@dataclass(frozen=True)
class Ablate:
    """Set one head's output or one block's MLP output to zero (or to a fixed mean vector)."""

    layer: int
    head: int | None = None
    component: str = "head"  # "head" (needs `head`) or "mlp"
    mode: str = "zero"  # "zero" or "mean" (needs `mean`)
    mean: tuple[float, ...] | None = field(default=None, repr=False)
    stack: str = "decoder"
    attention: str = "self"  # which heads of a decoder block: "self" or "cross" (encoder-decoder models)

    def __post_init__(self) -> None:
        _index(self.layer, "layer")
        _choice(self.component, COMPONENTS, "component")
        _choice(self.mode, MODES, "mode")
        _choice(self.stack, STACKS, "stack")
        _choice(self.attention, ATTENTIONS, "attention")
        if self.component == "head":
            if self.head is None:
                raise InterventionError("Ablate needs head=h for a head, or component='mlp' for the MLP")
            _index(self.head, "head")
        elif self.head is not None:
            raise InterventionError("Ablate(component='mlp') takes no head; leave head out")
        if self.component == "mlp" and self.attention != "self":
            raise InterventionError("attention='cross' picks cross-attention heads; leave it out for the MLP")
        if self.stack == "encoder" and self.attention == "cross":
            raise InterventionError("encoder blocks have no cross-attention; use stack='decoder' for attention='cross'")
        if self.mode == "mean":
            if self.mean is None:
                raise InterventionError("mode='mean' needs mean=vector (the part's mean activation); or use mode='zero'")
            object.__setattr__(self, "mean", _vector(self.mean, "mean"))
        elif self.mean is not None:
            raise InterventionError("mean= only goes with mode='mean'")

    def describe(self) -> str:
        what = f"MLP {self.layer}" if self.component == "mlp" else f"head {self.layer}.{self.head}"
        where = " (cross-attention)" if self.attention == "cross" else ""
        where += " (encoder)" if self.stack == "encoder" else ""
        return f"{'mean-' if self.mode == 'mean' else ''}ablate {what}{where}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": "ablate", "layer": self.layer, "component": self.component,
                                "mode": self.mode, "stack": self.stack}
        if self.head is not None:
            data["head"] = self.head
            data["attention"] = self.attention
        if self.mean is not None:
            data["mean"] = list(self.mean)
        return data


@dataclass(frozen=True)
class Steer:
    """Add `scale · vector` to the residual stream after block `layer`, at every position."""

    layer: int
    vector: tuple[float, ...] = field(repr=False)
    scale: float = 1.0
    stack: str = "decoder"

    def __post_init__(self) -> None:
        _index(self.layer, "layer")
        object.__setattr__(self, "vector", _vector(self.vector, "vector"))
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not math.isfinite(self.scale):
            raise InterventionError(f"scale must be a finite number, got {self.scale!r}")
        object.__setattr__(self, "scale", float(self.scale))
        _choice(self.stack, STACKS, "stack")

    @property
    def norm(self) -> float:
        return math.sqrt(sum(v * v for v in self.vector))

    def describe(self) -> str:
        where = " (encoder)" if self.stack == "encoder" else ""
        return f"steer after block {self.layer}{where}: {self.scale:g} × vector of norm {self.norm:.3g}"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "steer", "layer": self.layer, "vector": list(self.vector), "scale": self.scale,
                "stack": self.stack}


@dataclass(frozen=True)
class Patch:
    """Replace the residual stream after block `layer` at one absolute position with `value`."""

    layer: int
    position: int
    value: tuple[float, ...] = field(repr=False)
    stack: str = "decoder"

    def __post_init__(self) -> None:
        _index(self.layer, "layer")
        _index(self.position, "position")
        object.__setattr__(self, "value", _vector(self.value, "value"))
        _choice(self.stack, STACKS, "stack")

    def describe(self) -> str:
        where = " (encoder)" if self.stack == "encoder" else ""
        return f"patch the residual after block {self.layer}{where} at position {self.position}"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "patch", "layer": self.layer, "position": self.position, "value": list(self.value),
                "stack": self.stack}


Intervention = Ablate | Steer | Patch
_TYPES: dict[str, type] = {"ablate": Ablate, "steer": Steer, "patch": Patch}


def from_dict(data: Mapping[str, Any]) -> Intervention:
    """The inverse of `to_dict`; unknown types or fields raise InterventionError."""
    if not isinstance(data, Mapping) or data.get("type") not in _TYPES:
        raise InterventionError(f"an intervention needs type 'ablate', 'steer' or 'patch', got {data!r:.80}")
    cls = _TYPES[data["type"]]
    fields = {k: v for k, v in data.items() if k != "type"}
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InterventionError(f"{data['type']} has no field {unknown[0]!r}; known fields: {', '.join(sorted(known))}")
    try:
        return cls(**fields)
    except TypeError as error:  # a missing required field
        raise InterventionError(f"{data['type']}: {error}") from None


def as_interventions(items: Iterable[Any] | None) -> tuple[Intervention, ...]:
    """A list of interventions or their dicts -> a tuple of interventions (None -> empty)."""
    if items is None:
        return ()
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise InterventionError("interventions must be a list of Ablate, Steer or Patch")
    out = []
    for item in items:
        if isinstance(item, Mapping):
            item = from_dict(item)
        if not isinstance(item, (Ablate, Steer, Patch)):
            raise InterventionError(f"interventions must be Ablate, Steer or Patch, got {type(item).__name__}")
        out.append(item)
    return tuple(out)


_VECTOR_FIELDS = ("vector", "value", "mean")
MAX_PACKED = 200_000  # characters of a packed list accepted back (a link): far above any real model's vectors
MAX_ITEMS = 256  # interventions a packed list may hold (callers with their own limit pass it)


def _pack_vector(values: Sequence[float]) -> str:
    """Little-endian float32 when every value survives it exactly (vectors made from float32 tensors), else float64."""
    f32 = struct.pack(f"<{len(values)}f", *values)
    if list(struct.unpack(f"<{len(values)}f", f32)) == list(values):
        return "f4:" + base64.b64encode(f32).decode()
    return "f8:" + base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode()


def _unpack_vector(text: str) -> list[float]:
    kind, _, data = text.partition(":")
    if kind not in ("f4", "f8"):
        raise InterventionError("a packed vector must start with f4: or f8:")
    raw = base64.b64decode(data, validate=True)
    size = 4 if kind == "f4" else 8
    if len(raw) % size:
        raise InterventionError("a packed vector has a truncated number")
    return list(struct.unpack(f"<{len(raw) // size}{'f' if size == 4 else 'd'}", raw))


def pack(interventions: Sequence[Intervention]) -> str:
    """A compact URL-safe text of a list of interventions (for links): JSON with vectors as base64 floats,
    deflated. `unpack(pack(x)) == x` exactly."""
    items = []
    for iv in interventions:
        data = iv.to_dict()
        for name in _VECTOR_FIELDS:
            if data.get(name) is not None:
                data[name] = _pack_vector(data[name])
        items.append(data)
    text = json.dumps(items, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(zlib.compress(text, 9)).decode().rstrip("=")


def unpack(text: str, max_items: int = MAX_ITEMS) -> tuple[Intervention, ...]:
    """The inverse of `pack`; anything else raises InterventionError (one line, nothing executed).

    A list of more than `max_items` is refused before it is read, and so is any nesting deeper than a
    packed list can have: a few hundred characters inflate to JSON nested 100,000 deep, which would
    exhaust Python's recursion in the JSON reader.
    """
    unreadable = Note("the interventions in this link are not readable; open the edit again from the page",
                      "edits_unreadable")
    if not isinstance(text, str) or len(text) > MAX_PACKED:
        raise InterventionError(unreadable)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        inflater = zlib.decompressobj()
        data = inflater.decompress(raw, 4 * MAX_PACKED)
        if inflater.unconsumed_tail or not inflater.eof:
            raise ValueError("too large or cut short")
        # Each intervention is one object with at most one vector list: any more brackets than that
        # (counted before parsing, strings included: packed strings hold none) is too many or too deep.
        if data.count(b"{") + data.count(b"[") > 1 + 2 * max_items:
            raise InterventionError(Note(f"the edits in this link are too many or nested too deeply; at most {max_items} "
                                         "edits are allowed", "edits_too_deep", most=max_items))
        items = json.loads(data)
        if not isinstance(items, list):
            raise ValueError("not a list")
        if len(items) > max_items:
            raise InterventionError(Note(f"this link carries {len(items):,} edits; at most {max_items} are allowed",
                                         "edits_too_many", n=f"{len(items):,}", most=max_items))
        for item in items:
            for name in _VECTOR_FIELDS:
                if isinstance(item, dict) and isinstance(item.get(name), str):
                    item[name] = _unpack_vector(item[name])
    except InterventionError:
        raise
    except (ValueError, zlib.error, UnicodeDecodeError, struct.error, TypeError, RecursionError):
        raise InterventionError(unreadable) from None
    return as_interventions(items)


def check(interventions: Sequence[Intervention], config: Any) -> None:
    """Raise InterventionError unless every intervention fits the model of `config` (a ModelConfig):
    the stack exists, the layer and head are in range, vectors have the right size."""
    seq2seq = config.kind == "seq2seq"
    for iv in interventions:
        if iv.stack == "encoder" and not seq2seq:
            raise InterventionError(f"{iv.describe()}: this model has no encoder; use stack='decoder'")
        stack = config.encoder_config() if iv.stack == "encoder" else config
        layers = stack.n_encoder_layers if iv.stack == "encoder" else stack.n_layers
        if iv.layer >= layers:
            raise InterventionError(f"{iv.describe()}: layer {iv.layer} does not exist; this {iv.stack} has "
                                    f"layers 0..{layers - 1}")
        if isinstance(iv, Ablate):
            if iv.attention == "cross" and not seq2seq:
                raise InterventionError(f"{iv.describe()}: a decoder-only model has no cross-attention; "
                                        "use attention='self'")
            if iv.component == "head" and iv.head >= stack.n_heads:
                raise InterventionError(f"{iv.describe()}: head {iv.head} does not exist; layer {iv.layer} has "
                                        f"heads 0..{stack.n_heads - 1}")
            if iv.mean is not None:
                size = stack.head_dim if iv.component == "head" else stack.d_model
                if len(iv.mean) != size:
                    raise InterventionError(f"{iv.describe()}: the mean has {len(iv.mean)} numbers but this "
                                            f"{'head' if iv.component == 'head' else 'MLP'} outputs {size}")
        else:
            vector = iv.vector if isinstance(iv, Steer) else iv.value
            if len(vector) != stack.d_model:
                raise InterventionError(f"{iv.describe()}: the vector has {len(vector)} numbers but the residual "
                                        f"stream has d_model = {stack.d_model}")
