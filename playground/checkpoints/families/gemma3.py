"""Gemma 3 text models (`gemma3_text`: Gemma 3 270M and 1B; the larger Gemma 3 are multimodal).

    x = embed(ids) · sqrt(d_model)         (the scale rounded to the weights' dtype, as transformers does)
    block: x + norm(attn(norm(x))), x + norm(GeGLU(norm(x)))    four RMSNorms, each scaling by (1 + w)
    attention: q/k RMSNorm per head, scores scaled by query_pre_attn_scalar^-1/2, GQA;
               five sliding-window layers for each global one, with their own RoPE base (10 000 vs 1 000 000)
"""

from __future__ import annotations

import math
from typing import Any

from playground.checkpoints.families.base import Family, activation, refuse, require, rope_settings
from playground.checkpoints.families.decoder_fields import layer_types, replacing, tokens_with_defaults
from playground.checkpoints.families.llama import _IGNORE, _common
from playground.checkpoints.families.llama import rules as llama_rules
from playground.checkpoints.families.qwen3 import qk_norm_rules
from playground.checkpoints.weight_map import Rule, copy
from playground.config import ModelConfig


def _rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None, float]:
    """(global theta, global scaling, local theta) from transformers 5's per-layer-type `rope_parameters`
    or the Hub's `rope_theta` / `rope_scaling` / `rope_local_base_freq`."""
    params = hf.get("rope_parameters") or {}
    nested = "full_attention" in params or "sliding_attention" in params
    full = dict((params.get("full_attention") if nested else params) or {})
    local = dict((params.get("sliding_attention") if nested else None) or {})
    theta, scaling = rope_settings({"rope_theta": hf.get("rope_theta", 1_000_000.0), "rope_scaling": hf.get("rope_scaling"), "rope_parameters": full})
    local_kind = local.get("rope_type", local.get("type", "default"))
    refuse(local_kind != "default", f"RoPE scaling {local_kind!r} on the sliding layers (rope_parameters.sliding_attention) is not implemented")
    return theta, scaling, float(local.get("rope_theta", hf.get("rope_local_base_freq", 10_000.0)))


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    refuse(bool(hf.get("use_bidirectional_attention")), "use_bidirectional_attention=True (EmbeddingGemma) is not implemented")
    # transformers 5.23's Gemma 3 reads attn_logit_softcapping but never applies it: no reference to match.
    refuse(hf.get("attn_logit_softcapping") is not None,
           "attn_logit_softcapping is set, but Gemma 3 (in transformers too) does not use it; remove it or set it to null")
    n_layers, d_model = require(hf, "num_hidden_layers"), require(hf, "hidden_size")
    pattern = hf.get("sliding_window_pattern", hf.get("_sliding_window_pattern", 6))
    derived = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)]
    types, window = layer_types(hf, n_layers, hf.get("sliding_window", 4096), derived)
    theta, scaling, local_theta = _rope(hf)
    bias = bool(hf.get("attention_bias", False))
    return _common(
        hf, "gemma3_text",
        head_dim=hf.get("head_dim", 256),
        max_positions=hf.get("max_position_embeddings", 131_072),
        norm="rmsnorm_gemma",
        norm_position="sandwich",
        activation=activation(hf.get("hidden_activation", "gelu_pytorch_tanh")),
        attention_bias=bias,
        attention_out_bias=bias,
        attention_scale=float(hf.get("query_pre_attn_scalar", 256)) ** -0.5,
        qk_norm="head",
        layer_types=types,
        sliding_window=window,
        rope_theta=theta,
        rope_scaling=scaling,
        rope_local_theta=local_theta,
        embed_scale=math.sqrt(d_model),
        final_logit_softcap=hf.get("final_logit_softcapping"),
        tie_word_embeddings=hf.get("tie_word_embeddings", True),
        **tokens_with_defaults(hf, 2, 1, 0),
    )


def rules(config: ModelConfig) -> list[Rule]:
    layer = "model.layers.{i}"
    return replacing(llama_rules(config), qk_norm_rules() + [
        copy("blocks.{i}.attn_out_norm.weight", f"{layer}.post_attention_layernorm.weight"),
        copy("blocks.{i}.mlp_norm.weight", f"{layer}.pre_feedforward_layernorm.weight"),
        copy("blocks.{i}.mlp_out_norm.weight", f"{layer}.post_feedforward_layernorm.weight"),
    ])


FAMILIES = [Family("gemma3_text", config_from_hf, rules, ignore=_IGNORE, probe="model.embed_tokens.weight")]
