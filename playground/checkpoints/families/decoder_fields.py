"""Reading what the newer decoder families' config.json files share: per-layer attention types and
the token ids transformers assumes when a file leaves them out."""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import refuse
from playground.checkpoints.weight_map import Rule

HF_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


def layer_types(hf: dict[str, Any], n_layers: int, window: int | None, derived: list[str]) -> tuple[list[str] | None, int | None]:
    """(layer_types, sliding_window) for `ModelConfig` from config.json's `layer_types`, or from
    `derived` (transformers' default for the family) when the file has none; (None, None) when every
    layer attends to everything."""
    raw = hf.get("layer_types") or derived
    refuse(not isinstance(raw, list) or len(raw) != n_layers, f"'layer_types' must list one type per layer ({n_layers})")
    for kind in raw:
        refuse(kind not in HF_LAYER_TYPES,
               f"layer type {kind!r} in 'layer_types' is not implemented; supported: full_attention, sliding_attention")
    types = [HF_LAYER_TYPES[t] for t in raw]
    if "sliding" not in types:
        return None, None
    refuse(window is None, "'layer_types' names sliding_attention layers but 'sliding_window' is not set")
    return types, window


def tokens_with_defaults(hf: dict[str, Any], bos: int | None, eos: int | list[int] | None, pad: int | None) -> dict[str, Any]:
    """bos/eos/pad token ids, with the family's defaults where config.json does not give them."""
    defaults = {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}
    return {key: hf[key] if key in hf else value for key, value in defaults.items()}


def replacing(rules: list[Rule], replacements: list[Rule], *dropped: str) -> list[Rule]:
    """`rules` (another family's map) with the targets in `replacements` and `dropped` taken out,
    then `replacements` added: where a family names the same tensors differently (Gemma's and OLMo 2's
    `post_attention_layernorm` is a norm after attention, not before the MLP as in Llama)."""
    out = {r.target for r in replacements} | set(dropped)
    return [r for r in rules if r.target not in out] + replacements
