"""What a config says the model's state dict holds, worked out without building the model.

A config is a claim: "100,000 layers" costs one line of JSON, but building even the meta-device
skeleton of such a model takes minutes and gigabytes of Python objects. So the loader first asks
what the config implies, and compares that with the file, before any module of the real size exists.

We build a *proxy* of the model on the meta device with at most three layers per stack, read its
state dict, and extrapolate: every layer list (an `nn.ModuleList` whose length is a layer count)
repeats its last proxy layer for the remaining layers (layer 0 is kept as built, since some models
give the first layer extra parameters, e.g. T5's relative position bias). Counts and sizes come
from arithmetic (`StateLayout.tensor_count`, `.numel`), names and shapes only on request
(`.shapes()`), so a lying config is refused in microseconds whatever it declares.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass

import torch
from torch import nn

from playground.config import ModelConfig

Shape = tuple[int, ...]
PROXY_LAYERS = 2  # layers per stack in the proxy (one more where two stacks must be told apart)


@dataclass(frozen=True)
class LayerList:
    """One stack of layers: `prefix.{i}.<suffix>` for i in range(count)."""

    prefix: str  # e.g. "blocks" or "encoder.blocks"
    count: int  # layers the config declares
    built: tuple[dict[str, Shape], ...]  # the proxy's layers: suffix -> shape
    # Layers past the proxy repeat its last layer (the first one may differ: T5's relative bias).

    def layer(self, i: int) -> dict[str, Shape]:
        return self.built[min(i, len(self.built) - 1)]

    @property
    def numel(self) -> int:
        total = sum(_numel(self.layer(i)) for i in range(min(self.count, len(self.built))))
        return total + max(self.count - len(self.built), 0) * _numel(self.built[-1])

    @property
    def tensor_count(self) -> int:
        total = sum(len(self.layer(i)) for i in range(min(self.count, len(self.built))))
        return total + max(self.count - len(self.built), 0) * len(self.built[-1])


@dataclass(frozen=True)
class StateLayout:
    """The state dict a config implies: entries outside layer lists, and the layer lists."""

    fixed: dict[str, Shape]
    lists: tuple[LayerList, ...]
    buffer_bytes: int = 0  # non-persistent buffers the model computes itself (position tables)
    largest_buffer_bytes: int = 0

    @property
    def tensor_count(self) -> int:
        return len(self.fixed) + sum(s.tensor_count for s in self.lists)

    @property
    def numel(self) -> int:
        return _numel(self.fixed) + sum(s.numel for s in self.lists)

    @property
    def layers(self) -> int:
        return sum(s.count for s in self.lists)

    def shapes(self) -> dict[str, Shape]:
        """Every state-dict name and shape, exactly what `build_model(config).state_dict()` holds."""
        out = dict(self.fixed)
        for stack in self.lists:
            for i in range(stack.count):
                for suffix, shape in stack.layer(i).items():
                    out[f"{stack.prefix}.{i}.{suffix}"] = shape
        return out


def _numel(shapes: dict[str, Shape]) -> int:
    return sum(math.prod(s) for s in shapes.values())


def _buffer_bytes(model: nn.Module, state: dict[str, Shape], lists: list[LayerList]) -> tuple[int, int]:
    """(total, largest) bytes of the non-persistent buffers, layer-list buffers repeated per layer."""
    total = largest = 0
    for name, buffer in model.named_buffers():
        if name in state:
            continue
        size = buffer.numel() * buffer.element_size()
        repeat = 1
        for stack in lists:
            if name.startswith(f"{stack.prefix}."):
                built = len(model.get_submodule(stack.prefix))
                repeat = max(stack.count - built, 0) + 1 if name.startswith(f"{stack.prefix}.{built - 1}.") else 1
        total += size * repeat
        largest = max(largest, size)
    return total, largest


def proxy_config(config: ModelConfig, decoder_layers: int, encoder_layers: int) -> ModelConfig:
    """`config` with fewer layers. Per-layer list fields follow: a list with one entry per decoder layer
    (e.g. layer types) keeps its first entries, a list of layer indices (e.g. layers without RoPE)
    keeps the indices that still exist."""
    changes: dict[str, object] = {"n_layers": decoder_layers, "n_encoder_layers": encoder_layers}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name in changes or "layer" not in f.name or not isinstance(value, list):
            continue
        if len(value) == config.n_layers:
            changes[f.name] = value[:decoder_layers]
        elif all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            changes[f.name] = [i for i in value if i < decoder_layers]
    return dataclasses.replace(config, **changes)


def _proxy_state(config: ModelConfig, decoder_layers: int, encoder_layers: int) -> tuple[nn.Module, dict[str, Shape]]:
    from playground.models import build_model

    proxy = proxy_config(config, decoder_layers, encoder_layers)
    with torch.device("meta"):
        model = build_model(proxy)
    return model, {name: tuple(t.shape) for name, t in model.state_dict().items()}


def _layer_lists(model: nn.Module, lengths: set[int]) -> list[str]:
    """Paths of the outermost ModuleLists whose length is one of `lengths` (the proxy's layer counts)."""
    found: list[str] = []
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) not in lengths:
            continue
        if any(path.startswith(f"{outer}.") for outer in found):
            continue  # a list inside a layer (e.g. experts), not a stack of layers
        found.append(path)
    return found


def state_layout(config: ModelConfig) -> StateLayout:
    """The state dict `config` implies, from a proxy of at most three layers per stack (see module doc)."""
    try:
        key = config.to_json()
    except (TypeError, ValueError):  # something in `extra` that JSON cannot hold: no cache then
        return _layout_of(config)
    return _cached_layout(key)


@functools.lru_cache(maxsize=32)
def _cached_layout(config_json: str) -> StateLayout:
    """Cached by the config's JSON: loading the same model again skips the proxy (a few ms)."""
    return _layout_of(ModelConfig.from_dict(json.loads(config_json)))


def _layout_of(config: ModelConfig) -> StateLayout:
    decoder = min(config.n_layers, PROXY_LAYERS)
    encoder = min(config.n_encoder_layers, PROXY_LAYERS)
    if encoder and decoder == encoder:
        # Two stacks of equal proxy length: give the decoder one more layer so the lengths tell them apart.
        decoder += 1
    model, state = _proxy_state(config, decoder, encoder)
    paths = _layer_lists(model, {n for n in (decoder, encoder) if n})
    lists: list[LayerList] = []
    in_lists: set[str] = set()
    for path in paths:
        length = len(model.get_submodule(path))
        count = config.n_layers if length == decoder else config.n_encoder_layers
        built = []
        for i in range(length):
            head = f"{path}.{i}."
            layer = {name[len(head):]: shape for name, shape in state.items() if name.startswith(head)}
            in_lists.update(head + suffix for suffix in layer)
            built.append(layer)
        if decoder > config.n_layers and length == decoder:  # the extra proxy layer is not real
            built = built[: config.n_layers]
        lists.append(LayerList(path, count, tuple(built)))
    fixed = {name: shape for name, shape in state.items() if name not in in_lists}
    buffers, largest = _buffer_bytes(model, state, lists)
    return StateLayout(fixed, tuple(lists), buffers, largest)
