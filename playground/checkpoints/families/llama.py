"""Llama-style decoders: Llama (SmolLM, TinyLlama, Llama 2/3), Mistral and Qwen2.

RMSNorm, SwiGLU MLP, RoPE, grouped-query attention; Qwen2 adds biases on q/k/v, Mistral a sliding
window. The Hugging Face weight names are shared by all three.
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import Family, activation, refuse, require, rope_settings, token_ids
from playground.checkpoints.weight_map import Rule, copy, linear
from playground.config import ModelConfig


def _common(hf: dict[str, Any], family: str, *, partial_rotary: bool = False, **overrides: Any) -> ModelConfig:
    """Fields of Llama-style configs; `partial_rotary`: the family rotates part of each head (Phi-3)."""
    refuse(hf.get("pretraining_tp", 1) not in (1, None), "pretraining_tp > 1 is not supported")
    theta, scaling = rope_settings(hf)
    factor = float((hf.get("rope_parameters") or {}).get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)))
    refuse(factor != 1.0 and not partial_rotary, f"partial_rotary_factor={factor:g} is not implemented for {family}")
    d_model, n_heads = require(hf, "hidden_size"), require(hf, "num_attention_heads")
    fields: dict[str, Any] = dict(
        family=family,
        vocab_size=require(hf, "vocab_size"),
        d_model=d_model,
        n_layers=require(hf, "num_hidden_layers"),
        n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        head_dim=hf.get("head_dim") or d_model // n_heads,
        d_ff=require(hf, "intermediate_size"),
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        mlp="gated",
        activation=activation(hf.get("hidden_act", "silu")),
        positional="rope",
        rope_theta=theta,
        rope_scaling=scaling,
        partial_rotary_factor=factor,
        tie_word_embeddings=hf.get("tie_word_embeddings", False),
        **token_ids(hf),
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def llama_config(hf: dict[str, Any]) -> ModelConfig:
    bias = bool(hf.get("attention_bias", False))
    return _common(
        hf, "llama", attention_bias=bias, attention_out_bias=bias, mlp_bias=bool(hf.get("mlp_bias", False))
    )


def mistral_config(hf: dict[str, Any]) -> ModelConfig:
    return _common(hf, "mistral", sliding_window=hf.get("sliding_window"))


def qwen2_config(hf: dict[str, Any]) -> ModelConfig:
    refuse(bool(hf.get("use_sliding_window")), "Qwen2 with use_sliding_window=True is not implemented")
    return _common(hf, "qwen2", attention_bias=True)


def rules(config: ModelConfig) -> list[Rule]:
    attn = "model.layers.{i}.self_attn"
    layer = [
        copy("blocks.{i}.attn_norm.weight", "model.layers.{i}.input_layernorm.weight"),
        *linear("blocks.{i}.attn.qkv", f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj", bias=config.attention_bias),
        *linear("blocks.{i}.attn.out", f"{attn}.o_proj", bias=config.attention_out_bias),
        copy("blocks.{i}.mlp_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
        *linear("blocks.{i}.mlp.gate_up", "model.layers.{i}.mlp.gate_proj", "model.layers.{i}.mlp.up_proj", bias=config.mlp_bias),
        *linear("blocks.{i}.mlp.down", "model.layers.{i}.mlp.down_proj", bias=config.mlp_bias),
    ]
    top = [copy("embed.weight", "model.embed_tokens.weight"), copy("norm.weight", "model.norm.weight")]
    if not config.tie_word_embeddings:
        top.append(Rule("lm_head.weight", ("lm_head.weight",), transpose=True))
    return top + layer


_IGNORE = (r"lm_head\.weight", r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")

FAMILIES = [
    Family("llama", llama_config, rules, ignore=_IGNORE, probe="model.embed_tokens.weight"),
    Family("mistral", mistral_config, rules, ignore=_IGNORE, probe="model.embed_tokens.weight"),
    Family("qwen2", qwen2_config, rules, ignore=_IGNORE, probe="model.embed_tokens.weight"),
]
