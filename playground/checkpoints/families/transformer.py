"""`transformer`: our own encoder-decoder, the architecture of "Attention Is All You Need".

    embeddings shared by source, target and output head, scaled by sqrt(d_model)
    + sinusoidal positions (sin/cos interleaved, base 10000)
    post-LN blocks:  x = LayerNorm(x + Sublayer(x)),  ReLU feed-forward network, biases everywhere
    no final norm, no embedding norm; logits = y @ Eᵀ

Checkpoints of this family are our own format: one .safetensors file whose metadata carries the
`ModelConfig` (see `playground.checkpoints.own_format`), or a folder with a `config.json` of
`{"model_type": "transformer", "config": {<ModelConfig fields>}}` beside a `model.safetensors` whose
tensor names are our state-dict names. Build a config with `transformer_config(...)`.
"""

from __future__ import annotations

import math
from typing import Any

from playground.checkpoints.families.base import Family, require
from playground.checkpoints.weight_map import Rule
from playground.config import ModelConfig
from playground.errors import CheckpointError


def transformer_config(
    vocab_size: int,
    d_model: int = 64,
    n_layers: int = 2,
    n_encoder_layers: int = 2,
    n_heads: int = 4,
    d_ff: int = 256,
    max_positions: int = 256,
    *,
    pad_token_id: int = 0,
    bos_token_id: int = 1,
    eos_token_id: int = 2,
    decoder_start_token_id: int | None = None,
    **overrides: Any,
) -> ModelConfig:
    """The vanilla Transformer as a `ModelConfig` (kind "seq2seq", family "transformer").

    vocab_size: shared source/target vocabulary; d_model: model width; n_layers / n_encoder_layers:
    decoder / encoder blocks; n_heads: attention heads (d_model must divide by it); d_ff: hidden size
    of the ReLU feed-forward network; max_positions: length of the sinusoidal table (longest source
    or target). Token ids: the decoder starts from `decoder_start_token_id` (default: `bos_token_id`)
    and stops at `eos_token_id`. Any other `ModelConfig` field may be overridden by keyword
    (e.g. `norm_position="pre"` for a pre-LN variant, which then also gets a final norm).
    """
    fields: dict[str, Any] = dict(
        family="transformer",
        kind="seq2seq",
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_encoder_layers=n_encoder_layers,
        n_heads=n_heads,
        d_ff=d_ff,
        max_positions=max_positions,
        norm="layernorm",
        norm_eps=1e-5,
        norm_position="post",
        final_norm=False,
        mlp="plain",
        activation="relu",
        attention_bias=True,
        attention_out_bias=True,
        mlp_bias=True,
        positional="sinusoidal",
        sinusoidal_layout="interleaved",
        tie_word_embeddings=True,
        embed_scale=math.sqrt(d_model),
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        decoder_start_token_id=bos_token_id if decoder_start_token_id is None else decoder_start_token_id,
    )
    if overrides.get("norm_position") == "pre" and "final_norm" not in overrides:
        fields["final_norm"] = True
    fields.update(overrides)
    return ModelConfig(**fields)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """config.json of a folder checkpoint: {"model_type": "transformer", "config": {ModelConfig fields}}."""
    config = ModelConfig.from_dict(require(hf, "config"))
    if config.kind != "seq2seq":
        raise CheckpointError("config.json: a 'transformer' checkpoint must have kind 'seq2seq'")
    return config


def rules(config: ModelConfig) -> list[Rule]:
    """Identity map: the file's tensor names are our own state-dict names (worked out without
    building the model, which a config declaring absurd sizes must never get to)."""
    from playground.checkpoints.expected import state_layout

    return [Rule(name, (name,)) for name in state_layout(config).shapes()]


FAMILIES = [Family("transformer", config_from_hf, rules, probe="embed.weight")]
