"""BART: post-LN encoder-decoder with learned positions (stored shifted by 2), a LayerNorm right
after the embeddings, GELU MLP, biases everywhere, tied head plus `final_logits_bias`.

The whole BART family (BART, mBART, Marian, Pegasus, M2M100 / NLLB) shares config keys and weight
names; the members differ in config values only. `bart_family_config` reads the shared keys,
`rules` is the one weight map, whose optional parts (learned positions, embedding norm, final
norms, logits bias, untied head) follow the config. The encoder may have its own layer count,
head count and FFN width (DistilBART: 12 encoder / 6 decoder layers).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from playground.checkpoints.families.base import Family, activation, adapt_shared_embedding, refuse, require
from playground.checkpoints.safetensors_io import TensorReader
from playground.checkpoints.weight_map import Rule, copy, linear
from playground.config import ModelConfig
from playground.errors import CheckpointError
from playground.models.positional import sinusoidal_table

# Pre-LN members (mBART, Pegasus, M2M100) normalise before each sublayer and after each stack.
PRE_LN = dict(norm_position="pre", final_norm=True)


def bart_family_config(hf: dict[str, Any], family: str, defaults: dict[str, Any], **fields: Any) -> ModelConfig:
    """A `ModelConfig` from the config keys the BART family shares; `defaults` are the transformers
    config class's own values for keys a config.json may omit, `fields` the member's architecture."""
    hf = {**defaults, **hf}
    refuse(hf.get("is_encoder_decoder") is False, "is_encoder_decoder=false: this family is an encoder-decoder")
    d_model = require(hf, "d_model")
    shared: dict[str, Any] = dict(
        family=family,
        kind="seq2seq",
        vocab_size=require(hf, "vocab_size"),
        d_model=d_model,
        n_layers=require(hf, "decoder_layers"),
        n_heads=require(hf, "decoder_attention_heads"),
        d_ff=require(hf, "decoder_ffn_dim"),
        n_encoder_layers=require(hf, "encoder_layers"),
        n_encoder_heads=require(hf, "encoder_attention_heads"),
        encoder_d_ff=require(hf, "encoder_ffn_dim"),
        max_positions=require(hf, "max_position_embeddings"),
        norm="layernorm",
        norm_eps=1e-5,
        norm_position="post",
        final_norm=False,
        mlp="plain",
        activation=activation(hf.get("activation_function"), field="activation_function"),
        attention_bias=True,
        attention_out_bias=True,
        mlp_bias=True,
        tie_word_embeddings=hf.get("tie_word_embeddings", True) is not False,
        embed_scale=math.sqrt(d_model) if hf.get("scale_embedding") else 1.0,
        final_logits_bias=True,
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=hf.get("eos_token_id"),
        pad_token_id=hf.get("pad_token_id"),
        decoder_start_token_id=hf.get("decoder_start_token_id"),
        forced_bos_token_id=hf.get("forced_bos_token_id"),
        forced_eos_token_id=hf.get("forced_eos_token_id"),
    )
    return ModelConfig(**{**shared, **fields})


def refuse_pre_ln_flags(hf: dict[str, Any]) -> None:
    """BART and Marian are post-LN. Old configs that set the pre-LN flags belong to mBART or Pegasus
    checkpoints (transformers 5 ignores the flags and would drop their final norms)."""
    for key in ("normalize_before", "add_final_layer_norm"):
        refuse(bool(hf.get(key)), f"{key}=true means pre-LN layers (mBART, Pegasus) but model_type is "
               f"{hf.get('model_type')!r}; set model_type to 'mbart' or 'pegasus' if that is what the checkpoint is")


# transformers 5.23 BartConfig defaults for keys a config.json may omit.
DEFAULTS = dict(activation_function="gelu", scale_embedding=False, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                decoder_start_token_id=2, forced_eos_token_id=2)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    refuse_pre_ln_flags(hf)
    return bart_family_config(hf, "bart", DEFAULTS, positional="learned", learned_position_offset=2, embedding_norm=True)


def _attention(target: str, source: str) -> list[Rule]:
    return [
        *linear(f"{target}.qkv", f"{source}.q_proj", f"{source}.k_proj", f"{source}.v_proj", bias=True),
        *linear(f"{target}.out", f"{source}.out_proj", bias=True),
    ]


def _norm(target: str, source: str) -> list[Rule]:
    return [copy(f"{target}.weight", f"{source}.weight"), copy(f"{target}.bias", f"{source}.bias")]


def rules(config: ModelConfig) -> list[Rule]:
    """Embedding, blocks, head, and the optional parts the config asks for (names after "model.")."""
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
    top = [copy("embed.weight", "shared.weight")]
    if config.final_logits_bias:
        top.append(copy("final_logits_bias", "^final_logits_bias"))
    if not config.tie_word_embeddings:
        top.append(Rule("lm_head.weight", ("^lm_head.weight",), transpose=True))
    for stack in ("encoder", "decoder"):
        if config.positional == "learned":  # sinusoidal tables are recomputed, never read
            top.append(copy(f"{stack}.positions.weight", f"{stack}.embed_positions.weight"))
        if config.embedding_norm:
            top += _norm(f"{stack}.embed_norm", f"{stack}.layernorm_embedding")
        if config.final_norm:
            top += _norm(f"{stack}.norm", f"{stack}.layer_norm")
    return top + encoder + decoder


# Copies of the shared embedding (checked equal by `adapt_shared_embedding`) and a tied head's copy.
IGNORE = (r"(model\.)?(encoder|decoder)\.embed_tokens\.weight", r"lm_head\.weight")
# Sinusoidal tables some files store: we compute them instead (see `adapt_stored_sinusoids`).
STORED_SINUSOIDS = (r"(model\.)?(encoder|decoder)\.embed_positions\.weights?",)


def adapt_stored_sinusoids(config: ModelConfig, reader: TensorReader, prefix: str) -> ModelConfig:
    """Marian and Pegasus files may store their sinusoidal tables, and transformers then reads the
    stored rows. We compute the table, so a stored one must be the table we compute."""
    for stack in ("encoder", "decoder"):
        name = f"{prefix}{stack}.embed_positions.weight"
        if name not in reader:
            continue
        stored = reader.get(name)
        same = stored.dim() == 2 and stored.shape[1] == config.d_model and stored.is_floating_point()
        if same:
            c = config
            computed = sinusoidal_table(stored.shape[0], c.d_model, c.sinusoidal_base, c.sinusoidal_layout)
            same = torch.allclose(stored.float(), computed.to(stored.dtype).float(), atol=1e-6, rtol=0)
        if not same:
            raise CheckpointError(
                f"{name} is not the sinusoidal table of config.json (d_model {config.d_model}, sin half | cos "
                "half); transformers would use the stored rows, we compute them: the file was edited or belongs "
                "to another model"
            )
    return adapt_shared_embedding(config, reader, prefix)


def family(
    model_type: str,
    config_from_hf: Callable[[dict[str, Any]], ModelConfig],
    *,
    ignore: tuple[str, ...] = (),
    adapt: Callable[[ModelConfig, TensorReader, str], ModelConfig] = adapt_shared_embedding,
) -> Family:
    """A member of the BART family: its own config reader, BART's weight map and layout."""
    return Family(
        model_type=model_type,
        config_from_hf=config_from_hf,
        rules=rules,
        ignore=IGNORE + ignore,
        prefixes=("model.", ""),
        probe="shared.weight",
        adapt=adapt,
    )


FAMILIES = [family("bart", config_from_hf)]
