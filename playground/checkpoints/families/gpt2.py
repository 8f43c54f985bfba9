"""GPT-2: learned positions, LayerNorm, GELU MLP, fused c_attn stored as Conv1D (in, out)."""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import (
    Family,
    activation,
    refuse,
    require,
    token_ids,
)
from playground.checkpoints.weight_map import Rule, copy
from playground.config import ModelConfig


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    refuse(bool(hf.get("scale_attn_by_inverse_layer_idx")), "scale_attn_by_inverse_layer_idx=True is not implemented")
    refuse(bool(hf.get("add_cross_attention")), "GPT-2 with cross-attention is not supported")
    d_model = require(hf, "n_embd")
    n_inner = hf.get("n_inner")
    return ModelConfig(
        family="gpt2",
        vocab_size=require(hf, "vocab_size"),
        d_model=d_model,
        n_layers=require(hf, "n_layer"),
        n_heads=require(hf, "n_head"),
        d_ff=n_inner if n_inner is not None else 4 * d_model,
        max_positions=require(hf, "n_positions"),
        norm="layernorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        mlp="plain",
        activation=activation(hf.get("activation_function", "gelu_new")),
        attention_bias=True,
        attention_out_bias=True,
        mlp_bias=True,
        attention_scale=None if hf.get("scale_attn_weights", True) else 1.0,
        positional="learned",
        tie_word_embeddings=hf.get("tie_word_embeddings", True),
        **token_ids(hf),
    )


def rules(config: ModelConfig) -> list[Rule]:
    # Conv1D weights are already (in, out): no transpose, unlike nn.Linear families.
    layer = [
        copy("blocks.{i}.attn_norm.weight", "h.{i}.ln_1.weight"),
        copy("blocks.{i}.attn_norm.bias", "h.{i}.ln_1.bias"),
        copy("blocks.{i}.attn.qkv.weight", "h.{i}.attn.c_attn.weight"),
        copy("blocks.{i}.attn.qkv.bias", "h.{i}.attn.c_attn.bias"),
        copy("blocks.{i}.attn.out.weight", "h.{i}.attn.c_proj.weight"),
        copy("blocks.{i}.attn.out.bias", "h.{i}.attn.c_proj.bias"),
        copy("blocks.{i}.mlp_norm.weight", "h.{i}.ln_2.weight"),
        copy("blocks.{i}.mlp_norm.bias", "h.{i}.ln_2.bias"),
        copy("blocks.{i}.mlp.fc1.weight", "h.{i}.mlp.c_fc.weight"),
        copy("blocks.{i}.mlp.fc1.bias", "h.{i}.mlp.c_fc.bias"),
        copy("blocks.{i}.mlp.fc2.weight", "h.{i}.mlp.c_proj.weight"),
        copy("blocks.{i}.mlp.fc2.bias", "h.{i}.mlp.c_proj.bias"),
    ]
    return top_rules(config) + layer


def top_rules(config: ModelConfig) -> list[Rule]:
    """GPT-2's embeddings, learned positions, final LayerNorm and untied head (GPT-Neo names them alike)."""
    top = [
        copy("embed.weight", "wte.weight"),
        copy("positions.weight", "wpe.weight"),
        copy("norm.weight", "ln_f.weight"),
        copy("norm.bias", "ln_f.bias"),
    ]
    if not config.tie_word_embeddings:
        top.append(Rule("lm_head.weight", ("^lm_head.weight",), transpose=True))
    return top


FAMILIES = [
    Family(
        model_type="gpt2",
        config_from_hf=config_from_hf,
        rules=rules,
        # Causal-mask buffers saved by old checkpoints; a tied head's copy of the embeddings.
        ignore=(r"h\.\d+\.attn\.(masked_)?bias", r"lm_head\.weight"),
        prefixes=("transformer.", ""),
        probe="wte.weight",
    )
]
