"""OPT (facebook/opt-125m ... 66b): learned positions stored shifted by 2, ReLU MLP, biases everywhere,
tied head, and two variants:

    do_layer_norm_before=True  (all but 350m): pre-LN blocks and a final LayerNorm;
    do_layer_norm_before=False (opt-350m):     post-LN blocks, no final LayerNorm, and embeddings of
                                               word_embed_proj_dim (512) projected in to hidden_size
                                               (1024) and out again before the head.
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import Family, activation, refuse, require
from playground.checkpoints.families.decoder_fields import tokens_with_defaults
from playground.checkpoints.weight_map import Rule, copy, linear
from playground.config import ModelConfig


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    refuse(hf.get("layer_norm_elementwise_affine", True) is False,
           "layer_norm_elementwise_affine=False (LayerNorm without weights) is not implemented")
    d_model = require(hf, "hidden_size")
    pre = hf.get("do_layer_norm_before", True) is not False
    embed = hf.get("word_embed_proj_dim") or d_model
    bias = hf.get("enable_bias", True) is not False
    return ModelConfig(
        family="opt",
        vocab_size=require(hf, "vocab_size"),
        d_model=d_model,
        n_layers=require(hf, "num_hidden_layers"),
        n_heads=require(hf, "num_attention_heads"),
        d_ff=require(hf, "ffn_dim"),
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="layernorm",
        norm_eps=1e-5,
        norm_position="pre" if pre else "post",
        final_norm=pre and not hf.get("_remove_final_layer_norm", False),
        mlp="plain",
        activation=activation(hf.get("activation_function", "relu")),
        attention_bias=bias,
        attention_out_bias=bias,
        mlp_bias=bias,
        positional="learned",
        learned_position_offset=2,
        d_embed=embed if embed != d_model else None,
        tie_word_embeddings=hf.get("tie_word_embeddings", True) is not False,
        **tokens_with_defaults(hf, 2, 2, 1),
    )


def _norm(target: str, source: str) -> list[Rule]:
    return [copy(f"{target}.weight", f"{source}.weight"), copy(f"{target}.bias", f"{source}.bias")]


def rules(config: ModelConfig) -> list[Rule]:
    layer, bias = "layers.{i}", config.attention_bias
    top = [copy("embed.weight", "embed_tokens.weight"), copy("positions.weight", "embed_positions.weight")]
    if config.final_norm:
        top += _norm("norm", "final_layer_norm")
    if config.d_embed is not None:
        top += [*linear("project_in", "project_in"), *linear("project_out", "project_out")]
    if not config.tie_word_embeddings:
        top.append(Rule("lm_head.weight", ("^lm_head.weight",), transpose=True))
    attn = f"{layer}.self_attn"
    return top + [
        *_norm("blocks.{i}.attn_norm", f"{layer}.self_attn_layer_norm"),
        *linear("blocks.{i}.attn.qkv", f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj", bias=bias),
        *linear("blocks.{i}.attn.out", f"{attn}.out_proj", bias=bias),
        *_norm("blocks.{i}.mlp_norm", f"{layer}.final_layer_norm"),
        *linear("blocks.{i}.mlp.fc1", f"{layer}.fc1", bias=bias),
        *linear("blocks.{i}.mlp.fc2", f"{layer}.fc2", bias=bias),
    ]


FAMILIES = [
    Family("opt", config_from_hf, rules, ignore=(r"lm_head\.weight",), prefixes=("model.decoder.", "decoder."),
           probe="embed_tokens.weight")
]
