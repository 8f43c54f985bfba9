"""What every family module provides, and helpers for reading Hugging Face configs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from playground.checkpoints.safetensors_io import TensorReader
from playground.checkpoints.weight_map import Rule
from playground.config import ModelConfig
from playground.errors import CheckpointError


@dataclass(frozen=True)
class Family:
    model_type: str
    config_from_hf: Callable[[dict[str, Any]], ModelConfig]
    rules: Callable[[ModelConfig], list[Rule]]  # with "{i}" for layer indices
    ignore: tuple[str, ...] = ()  # regexes of checkpoint tensors we deliberately do not use
    prefixes: tuple[str, ...] = ("",)  # tried in order; the first whose embedding exists wins
    probe: str = ""  # a tensor name (after the prefix) that every checkpoint of the family has
    # Settle what config.json leaves open from the tensors in the file: (config, reader, prefix) -> config.
    adapt: Callable[[ModelConfig, TensorReader, str], ModelConfig] | None = None


def require(hf: dict[str, Any], key: str, where: str = "config.json") -> Any:
    if key not in hf or hf[key] is None:
        raise CheckpointError(f"{where}: missing required field '{key}'")
    return hf[key]


def refuse(condition: bool, message: str, where: str = "config.json") -> None:
    if condition:
        raise CheckpointError(f"{where}: {message}")


ACTIVATIONS = {
    "silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
}


def activation(name: str | None, where: str = "config.json", *, field: str = "activation") -> str:
    """Our name for a transformers activation; `field` names the config key in the refusal."""
    if name not in ACTIVATIONS:
        raise CheckpointError(
            f"{where}: {field} {name!r} is not implemented; supported: {', '.join(sorted(ACTIVATIONS))}"
        )
    return ACTIVATIONS[name]


def rope_settings(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from either transformers 5 `rope_parameters` or older `rope_theta`/`rope_scaling`."""
    params = dict(hf.get("rope_parameters") or {})
    scaling = dict(hf.get("rope_scaling") or {})
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    merged = {**scaling, **params}
    kind = merged.get("rope_type", merged.get("type", "default"))
    if kind == "default":
        return float(theta), None
    merged.pop("rope_theta", None)
    merged.pop("type", None)
    merged["rope_type"] = kind
    return float(theta), merged


def token_ids(hf: dict[str, Any]) -> dict[str, Any]:
    return {
        "bos_token_id": hf.get("bos_token_id"),
        "eos_token_id": hf.get("eos_token_id"),
        "pad_token_id": hf.get("pad_token_id"),
    }


def untie_if_head_differs(config: ModelConfig, reader: TensorReader, prefix: str, *, embed: str, head: str = "lm_head.weight") -> ModelConfig:
    """A file with its own output head that differs from the embeddings has an untied head, whatever
    config.json says (transformers unties in that case too); an absent or identical head is tied."""
    if head not in reader or prefix + embed not in reader:
        tied = True
    else:
        a, b = reader.get(head), reader.get(prefix + embed)
        tied = a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if tied == config.tie_word_embeddings:
        return config
    return dataclasses.replace(config, tie_word_embeddings=tied)


def adapt_shared_embedding(config: ModelConfig, reader: TensorReader, prefix: str) -> ModelConfig:
    """Encoder-decoders with one `shared.weight` embedding (T5, the BART family).

    Files may carry copies of it (encoder/decoder `embed_tokens`). transformers uses a copy that
    differs from the shared embedding (it unties it, whatever tie_word_embeddings says); we build one
    embedding for source and target, so such a file is refused. The output head is untied when the
    file has a distinct one (`untie_if_head_differs`).
    """
    shared_name = prefix + "shared.weight"
    if shared_name in reader:
        shared = reader.get(shared_name)
        for stack in ("encoder", "decoder"):
            name = f"{prefix}{stack}.embed_tokens.weight"
            duplicate = reader.get(name) if name in reader else None
            if duplicate is not None and not (
                duplicate.shape == shared.shape and duplicate.dtype == shared.dtype and torch.equal(duplicate, shared)
            ):
                raise CheckpointError(
                    f"{name} differs from {shared_name} (tie_word_embeddings=false): separate encoder and "
                    "decoder input embeddings are not supported"
                )
    return untie_if_head_differs(config, reader, prefix, embed="shared.weight")
