"""Qwen3 and SmolLM3: Llama-style decoders with the Llama weight names.

Qwen3 normalises queries and keys per head (RMSNorm over head_dim, before RoPE) and can make its
upper layers sliding-window ones. SmolLM3 drops RoPE on every fourth layer (NoPE layers: those see
positions only through the causal mask).
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import Family, refuse, require
from playground.checkpoints.families.decoder_fields import layer_types, tokens_with_defaults
from playground.checkpoints.families.llama import _IGNORE, _common
from playground.checkpoints.families.llama import rules as llama_rules
from playground.checkpoints.weight_map import Rule, copy
from playground.config import ModelConfig


def qwen3_config(hf: dict[str, Any]) -> ModelConfig:
    n_layers = require(hf, "num_hidden_layers")
    # transformers: the window only exists with use_sliding_window, on layers >= max_window_layers
    window = hf.get("sliding_window") if hf.get("use_sliding_window") else None
    start = hf.get("max_window_layers") if hf.get("max_window_layers") is not None else 28
    derived = ["sliding_attention" if window is not None and i >= start else "full_attention" for i in range(n_layers)]
    types, window = layer_types(hf, n_layers, window, derived)
    bias = bool(hf.get("attention_bias", False))
    return _common(
        hf, "qwen3", attention_bias=bias, attention_out_bias=bias, qk_norm="head", layer_types=types,
        sliding_window=window, max_positions=hf.get("max_position_embeddings", 32768),
        **tokens_with_defaults(hf, None, None, None),
    )


def smollm3_config(hf: dict[str, Any]) -> ModelConfig:
    n_layers = require(hf, "num_hidden_layers")
    interval = hf.get("no_rope_layer_interval", 4)
    uses_rope = hf.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n_layers)]
    refuse(not isinstance(uses_rope, list) or len(uses_rope) != n_layers,
           f"'no_rope_layers' must hold one 0/1 entry per layer ({n_layers})")
    nope = [i for i, use in enumerate(uses_rope) if not use]
    window = hf.get("sliding_window")
    sliding = bool(hf.get("use_sliding_window")) and window is not None
    derived = ["sliding_attention" if sliding and not uses_rope[i] else "full_attention" for i in range(n_layers)]
    types, window = layer_types(hf, n_layers, window, derived)
    bias = bool(hf.get("attention_bias", False))
    # transformers' default RoPE base for SmolLM3 is 2e6, not 1e4
    return _common(
        {"rope_theta": 2_000_000.0, **hf}, "smollm3", attention_bias=bias, attention_out_bias=bias,
        mlp_bias=bool(hf.get("mlp_bias", False)),
        nope_layers=nope, layer_types=types, sliding_window=window, max_positions=hf.get("max_position_embeddings", 32768),
        tie_word_embeddings=hf.get("tie_word_embeddings", True), **tokens_with_defaults(hf, 128000, 128001, 128004),
    )


def qk_norm_rules(prefix: str = "model.layers.{i}.self_attn") -> list[Rule]:
    return [
        copy("blocks.{i}.attn.qk_norm.q.weight", f"{prefix}.q_norm.weight"),
        copy("blocks.{i}.attn.qk_norm.k.weight", f"{prefix}.k_norm.weight"),
    ]


def qwen3_rules(config: ModelConfig) -> list[Rule]:
    return llama_rules(config) + qk_norm_rules()


FAMILIES = [
    Family("qwen3", qwen3_config, qwen3_rules, ignore=_IGNORE, probe="model.embed_tokens.weight"),
    Family("smollm3", smollm3_config, llama_rules, ignore=_IGNORE, probe="model.embed_tokens.weight"),
]
