"""Phi-3 and Phi-4-mini (`phi3`): a Llama-style decoder whose checkpoints fuse q/k/v into `qkv_proj`
and gate/up into `gate_up_proj` (the very layout our modules use), with partial rotary where
configured (Phi-4-mini rotates 3/4 of each head), longrope scaling for long contexts (the 128k
models, Phi-4-mini) and a sliding window on every layer where configured (Phi-3-mini-4k: 2047).
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import Family
from playground.checkpoints.families.decoder_fields import tokens_with_defaults
from playground.checkpoints.families.llama import _IGNORE, _common
from playground.checkpoints.weight_map import Rule, copy, linear
from playground.config import ModelConfig


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    return _common(
        _as_longrope(hf), "phi3", partial_rotary=True, norm_eps=hf.get("rms_norm_eps", 1e-5),
        sliding_window=hf.get("sliding_window"), max_positions=hf.get("max_position_embeddings", 4096),
        **tokens_with_defaults(hf, 1, 32000, 32000),
    )


def _as_longrope(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers reads Phi-3's "su" and "yarn" scaling as longrope, and its original context from the
    top-level `original_max_position_embeddings` (default 4096) whatever the scaling dict says."""
    hf = dict(hf)
    for key in ("rope_scaling", "rope_parameters"):
        params = dict(hf.get(key) or {})
        if params.get("rope_type", params.get("type")) in ("su", "yarn", "longrope"):
            params.pop("type", None)
            params["rope_type"] = "longrope"
            params["original_max_position_embeddings"] = hf.get("original_max_position_embeddings", 4096)
            hf[key] = params
    return hf


def rules(config: ModelConfig) -> list[Rule]:
    layer = "model.layers.{i}"
    top = [copy("embed.weight", "model.embed_tokens.weight"), copy("norm.weight", "model.norm.weight")]
    if not config.tie_word_embeddings:
        top.append(Rule("lm_head.weight", ("lm_head.weight",), transpose=True))
    return top + [
        copy("blocks.{i}.attn_norm.weight", f"{layer}.input_layernorm.weight"),
        *linear("blocks.{i}.attn.qkv", f"{layer}.self_attn.qkv_proj"),
        *linear("blocks.{i}.attn.out", f"{layer}.self_attn.o_proj"),
        copy("blocks.{i}.mlp_norm.weight", f"{layer}.post_attention_layernorm.weight"),
        *linear("blocks.{i}.mlp.gate_up", f"{layer}.mlp.gate_up_proj"),
        *linear("blocks.{i}.mlp.down", f"{layer}.mlp.down_proj"),
    ]


FAMILIES = [Family("phi3", config_from_hf, rules, ignore=_IGNORE, probe="model.embed_tokens.weight")]
