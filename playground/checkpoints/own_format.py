"""Our own single-file checkpoint: one .safetensors whose header metadata carries everything.

Metadata keys (all strings, as safetensors requires):
- "format": "playground"
- "config": ModelConfig as JSON
- "tokenizer": a tokenizer.json document (optional)
- "tokenizer_settings": JSON of special tokens and chat template (optional)
- "provenance": free-form JSON (optional)
- "card": JSON {"description": {"en": ..., "zh": ...}, "example_prompt": ...}: what the model is for,
  shown when it is picked in the app (optional; see `playground.checkpoints.card`)
Tensor names are our own state-dict names, weights stored in our (in, out) layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import nn

from playground.checkpoints.tokenizer import dumps_settings, tokenizer_to_json
from playground.config import ModelConfig

FORMAT = "playground"


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    config: ModelConfig,
    *,
    tokenizer: Any | None = None,
    provenance: dict[str, Any] | None = None,
    card: dict[str, Any] | None = None,
) -> Path:
    """Write model weights, config and (optionally) tokenizer into one safetensors file."""
    path = Path(path)
    metadata = {"format": FORMAT, "config": config.to_json()}
    if tokenizer is not None:
        tokenizer_json, settings = tokenizer_to_json(tokenizer)
        metadata["tokenizer"] = tokenizer_json
        metadata["tokenizer_settings"] = dumps_settings(settings)
    if provenance is not None:
        metadata["provenance"] = json.dumps(provenance, sort_keys=True)
    if card is not None:
        metadata["card"] = json.dumps(card, sort_keys=True, ensure_ascii=False)
    # Tied weights share storage; safetensors refuses shared tensors, and our loader re-ties them.
    state = {name: tensor.detach().contiguous().cpu() for name, tensor in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=metadata)
    return path


def is_own_format(metadata: dict[str, str]) -> bool:
    return metadata.get("format") == FORMAT and "config" in metadata

