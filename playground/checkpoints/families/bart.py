"""BART: post-LN encoder-decoder with learned positions (stored shifted by 2), a LayerNorm right
after the embeddings, GELU MLP, biases everywhere, tied head plus `final_logits_bias`.

`bart_layer_rules` is shared with Marian, whose weight names are the same.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from playground.checkpoints.families.base import Family, activation, refuse, require, token_ids, untie_if_head_differs
from playground.checkpoints.weight_map import Rule, copy, linear
from playground.config import ModelConfig


def shared_fields(hf: dict[str, Any]) -> dict[str, Any]:
    """Fields common to BART and Marian configs (same config keys)."""
    refuse(bool(hf.get("normalize_before")) or bool(hf.get("add_final_layer_norm")), "pre-LN (mBART-style) layers are not supported")
    heads, dec_heads = require(hf, "encoder_attention_heads"), require(hf, "decoder_attention_heads")
    refuse(heads != dec_heads, f"encoder and decoder head counts differ ({heads} vs {dec_heads}); not supported")
    ffn, dec_ffn = require(hf, "encoder_ffn_dim"), require(hf, "decoder_ffn_dim")
    refuse(ffn != dec_ffn, f"encoder and decoder FFN sizes differ ({ffn} vs {dec_ffn}); not supported")
    d_model = require(hf, "d_model")
    return dict(
        kind="seq2seq",
        vocab_size=require(hf, "vocab_size"),
        d_model=d_model,
        n_layers=require(hf, "decoder_layers"),
        n_encoder_layers=require(hf, "encoder_layers"),
        n_heads=heads,
        d_ff=ffn,
        max_positions=require(hf, "max_position_embeddings"),
        norm="layernorm",
        norm_eps=1e-5,
        norm_position="post",
        final_norm=False,
        mlp="plain",
        activation=activation(hf.get("activation_function", "gelu")),
        attention_bias=True,
        attention_out_bias=True,
        mlp_bias=True,
        tie_word_embeddings=hf.get("tie_word_embeddings", True) is not False,
        embed_scale=math.sqrt(d_model) if hf.get("scale_embedding") else 1.0,
        final_logits_bias=True,
        decoder_start_token_id=hf.get("decoder_start_token_id"),
        forced_bos_token_id=hf.get("forced_bos_token_id"),
        forced_eos_token_id=hf.get("forced_eos_token_id"),
        **token_ids(hf),
    )


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    return ModelConfig(family="bart", positional="learned", learned_position_offset=2, embedding_norm=True, **shared_fields(hf))


def _attention(target: str, source: str) -> list[Rule]:
    return [
        *linear(f"{target}.qkv", f"{source}.q_proj", f"{source}.k_proj", f"{source}.v_proj", bias=True),
        *linear(f"{target}.out", f"{source}.out_proj", bias=True),
    ]


def _norm(target: str, source: str) -> list[Rule]:
    return [copy(f"{target}.weight", f"{source}.weight"), copy(f"{target}.bias", f"{source}.bias")]


def bart_layer_rules(config: ModelConfig) -> list[Rule]:
    """Embedding, blocks, head and final_logits_bias (names after the "model." prefix)."""
    enc, dec = "encoder.layers.{e}", "decoder.layers.{i}"
    encoder = [
        *_attention("encoder.blocks.{e}.attn", f"{enc}.self_attn"),
        *_norm("encoder.blocks.{e}.attn_norm", f"{enc}.self_attn_layer_norm"),
        *linear("encoder.blocks.{e}.mlp.fc1", f"{enc}.fc1", bias=True),
        *linear("encoder.blocks.{e}.mlp.fc2", f"{enc}.fc2", bias=True),
        *_norm("encoder.blocks.{e}.mlp_norm", f"{enc}.final_layer_norm"),
    ]
    decoder = [
        *_attention("decoder.blocks.{i}.attn", f"{dec}.self_attn"),
        *_norm("decoder.blocks.{i}.attn_norm", f"{dec}.self_attn_layer_norm"),
        *linear("decoder.blocks.{i}.cross.q", f"{dec}.encoder_attn.q_proj", bias=True),
        *linear("decoder.blocks.{i}.cross.kv", f"{dec}.encoder_attn.k_proj", f"{dec}.encoder_attn.v_proj", bias=True),
        *linear("decoder.blocks.{i}.cross.out", f"{dec}.encoder_attn.out_proj", bias=True),
        *_norm("decoder.blocks.{i}.cross_norm", f"{dec}.encoder_attn_layer_norm"),
        *linear("decoder.blocks.{i}.mlp.fc1", f"{dec}.fc1", bias=True),
        *linear("decoder.blocks.{i}.mlp.fc2", f"{dec}.fc2", bias=True),
        *_norm("decoder.blocks.{i}.mlp_norm", f"{dec}.final_layer_norm"),
    ]
    top = [copy("embed.weight", "shared.weight"), copy("final_logits_bias", "^final_logits_bias")]
    if not config.tie_word_embeddings:
        top.append(Rule("lm_head.weight", ("^lm_head.weight",), transpose=True))
    return top + encoder + decoder


def rules(config: ModelConfig) -> list[Rule]:
    return bart_layer_rules(config) + [
        copy("encoder.positions.weight", "encoder.embed_positions.weight"),
        copy("decoder.positions.weight", "decoder.embed_positions.weight"),
        *_norm("encoder.embed_norm", "encoder.layernorm_embedding"),
        *_norm("decoder.embed_norm", "decoder.layernorm_embedding"),
    ]


# Copies of the shared embedding and a tied head that some files carry.
IGNORE = (r"(model\.)?(encoder|decoder)\.embed_tokens\.weight", r"lm_head\.weight")

FAMILIES = [
    Family(
        model_type="bart",
        config_from_hf=config_from_hf,
        rules=rules,
        ignore=IGNORE,
        prefixes=("model.", ""),
        probe="shared.weight",
        adapt=functools.partial(untie_if_head_differs, embed="shared.weight"),
    )
]
