"""GPT-NeoX (Pythia): LayerNorm, GELU MLP, biases, untied `embed_out` head, and

    parallel residual:  x = x + attn(ln1(x)) + mlp(ln2(x))     (use_parallel_residual=False: sequential)
    partial rotary:     RoPE on the first rotary_pct of each head's dims (Pythia: 25%)
    fused q/k/v stored head by head ([q_0 k_0 v_0 q_1 k_1 v_1 ...]); regrouped to [q | k | v] at load.
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import Family, activation, require, rope_settings
from playground.checkpoints.families.decoder_fields import tokens_with_defaults
from playground.checkpoints.weight_map import Rule, copy, linear
from playground.config import ModelConfig


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    params = hf.get("rope_parameters") or {}
    # Hub configs say rotary_pct / rotary_emb_base; transformers 5 writes rope_parameters (default 25%).
    theta, scaling = rope_settings({**hf, "rope_theta": hf.get("rotary_emb_base", 10000.0)})
    partial = params.get("partial_rotary_factor", hf.get("rotary_pct", 0.25))
    bias = hf.get("attention_bias", True) is not False
    return ModelConfig(
        family="gpt_neox",
        vocab_size=require(hf, "vocab_size"),
        d_model=require(hf, "hidden_size"),
        n_layers=require(hf, "num_hidden_layers"),
        n_heads=require(hf, "num_attention_heads"),
        d_ff=require(hf, "intermediate_size"),
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="layernorm",
        norm_eps=hf.get("layer_norm_eps", 1e-5),
        parallel_residual=hf.get("use_parallel_residual", True) is not False,
        mlp="plain",
        activation=activation(hf.get("hidden_act", "gelu")),
        attention_bias=bias,
        attention_out_bias=bias,
        mlp_bias=True,
        positional="rope",
        rope_theta=theta,
        rope_scaling=scaling,
        partial_rotary_factor=float(partial),
        tie_word_embeddings=hf.get("tie_word_embeddings", False) is True,
        **tokens_with_defaults(hf, 0, 2, None),
    )


def rules(config: ModelConfig) -> list[Rule]:
    layer = "layers.{i}"
    bias = config.attention_bias
    qkv = [Rule("blocks.{i}.attn.qkv.weight", (f"{layer}.attention.query_key_value.weight",), transpose=True,
                qkv_per_head=config.n_heads)]
    if bias:
        qkv.append(Rule("blocks.{i}.attn.qkv.bias", (f"{layer}.attention.query_key_value.bias",), qkv_per_head=config.n_heads))
    top = [
        copy("embed.weight", "embed_in.weight"),
        copy("norm.weight", "final_layer_norm.weight"),
        copy("norm.bias", "final_layer_norm.bias"),
    ]
    if not config.tie_word_embeddings:
        top.append(Rule("lm_head.weight", ("^embed_out.weight",), transpose=True))
    return top + qkv + [
        copy("blocks.{i}.attn_norm.weight", f"{layer}.input_layernorm.weight"),
        copy("blocks.{i}.attn_norm.bias", f"{layer}.input_layernorm.bias"),
        *linear("blocks.{i}.attn.out", f"{layer}.attention.dense", bias=bias),
        copy("blocks.{i}.mlp_norm.weight", f"{layer}.post_attention_layernorm.weight"),
        copy("blocks.{i}.mlp_norm.bias", f"{layer}.post_attention_layernorm.bias"),
        *linear("blocks.{i}.mlp.fc1", f"{layer}.mlp.dense_h_to_4h", bias=True),
        *linear("blocks.{i}.mlp.fc2", f"{layer}.mlp.dense_4h_to_h", bias=True),
    ]


FAMILIES = [
    Family(
        "gpt_neox",
        config_from_hf,
        rules,
        # Causal-mask and RoPE buffers that old checkpoints saved; a tied head's copy of the embedding.
        ignore=(r"layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)", r"embed_out\.weight"),
        prefixes=("gpt_neox.", ""),
        probe="embed_in.weight",
    )
]
