"""GPT-Neo (the TinyStories models, GPT-Neo 125M-2.7B): GPT-2's block with learned positions, but

    layers alternate global attention and local attention over the last `window_size` positions;
    scores are not scaled by 1/sqrt(d_head);
    q/k/v are separate bias-free projections (the output projection has a bias).
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families import gpt2
from playground.checkpoints.families.base import Family, activation, refuse, require
from playground.checkpoints.families.decoder_fields import tokens_with_defaults
from playground.checkpoints.weight_map import Rule, copy, linear
from playground.config import ModelConfig

NEO_LAYER_TYPES = {"global": "full", "local": "sliding"}


def _layer_types(hf: dict[str, Any], n_layers: int) -> list[str]:
    """`attention_types` [[["global", "local"], 12]] -> one type per layer (transformers' expansion)."""
    spec = hf.get("attention_types") or [[["global", "local"], 12]]
    types: list[str] = []
    for pattern, repeat in spec:
        types.extend(list(pattern) * repeat)
    refuse(len(types) != n_layers, f"'attention_types' gives {len(types)} layer types for {n_layers} layers")
    for kind in types:
        refuse(kind not in NEO_LAYER_TYPES, f"attention type {kind!r} in 'attention_types' is not implemented; use global or local")
    return [NEO_LAYER_TYPES[kind] for kind in types]


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    d_model, n_layers = require(hf, "hidden_size"), require(hf, "num_layers")
    types = _layer_types(hf, n_layers)
    inner = hf.get("intermediate_size")
    return ModelConfig(
        family="gpt_neo",
        vocab_size=require(hf, "vocab_size"),
        d_model=d_model,
        n_layers=n_layers,
        n_heads=require(hf, "num_heads"),
        d_ff=inner if inner is not None else 4 * d_model,
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="layernorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        mlp="plain",
        activation=activation(hf.get("activation_function", "gelu_new")),
        attention_bias=False,
        attention_out_bias=True,
        mlp_bias=True,
        attention_scale=1.0,
        layer_types=types if "sliding" in types else None,
        sliding_window=hf.get("window_size", 256) if "sliding" in types else None,
        positional="learned",
        tie_word_embeddings=hf.get("tie_word_embeddings", True) is not False,
        **tokens_with_defaults(hf, 50256, 50256, None),
    )


def rules(config: ModelConfig) -> list[Rule]:
    attn, layer = "h.{i}.attn.attention", "h.{i}"
    return gpt2.top_rules(config) + [
        copy("blocks.{i}.attn_norm.weight", f"{layer}.ln_1.weight"),
        copy("blocks.{i}.attn_norm.bias", f"{layer}.ln_1.bias"),
        *linear("blocks.{i}.attn.qkv", f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"),
        *linear("blocks.{i}.attn.out", f"{attn}.out_proj", bias=True),
        copy("blocks.{i}.mlp_norm.weight", f"{layer}.ln_2.weight"),
        copy("blocks.{i}.mlp_norm.bias", f"{layer}.ln_2.bias"),
        *linear("blocks.{i}.mlp.fc1", f"{layer}.mlp.c_fc", bias=True),
        *linear("blocks.{i}.mlp.fc2", f"{layer}.mlp.c_proj", bias=True),
    ]


FAMILIES = [
    Family(
        "gpt_neo",
        config_from_hf,
        rules,
        # Causal-mask buffers that old checkpoints saved; a tied head's copy of the embedding.
        ignore=(r"h\.\d+\.attn\.attention\.(bias|masked_bias)", r"lm_head\.weight"),
        prefixes=("transformer.", ""),
        probe="wte.weight",
    )
]
