"""T5: v1.0 (ReLU MLP, tied head) and v1.1 / Flan-T5 (gated-GELU MLP, untied head).

Pre-LN with RMSNorm (T5 calls it T5LayerNorm), no biases anywhere, no 1/sqrt(d) in attention (the
scale is folded into the initialisation), relative position bias owned by the first layer of each
stack and shared by all its layers. A tied head multiplies the decoder output by d_model**-0.5.
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import (
    ACTIVATIONS,
    Family,
    activation,
    adapt_shared_embedding,
    refuse,
    require,
)
from playground.checkpoints.weight_map import Rule, copy, linear
from playground.config import ModelConfig


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    proj = str(hf.get("feed_forward_proj", "relu"))
    parts = proj.split("-")
    refuse(len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"), f"feed_forward_proj {proj!r} is not understood")
    gated = parts[0] == "gated" and len(parts) == 2
    # transformers maps "gated-gelu" to the tanh approximation (gelu_new) for backward compatibility.
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    refuse(act not in ACTIVATIONS, f"feed_forward_proj {proj!r}: activation {act!r} is not implemented; "
           f"supported: {', '.join(sorted(ACTIVATIONS))}")
    refuse(hf.get("is_encoder_decoder") is False, "is_encoder_decoder=false: T5 is an encoder-decoder")
    # T5 v1.0 ties the head and rescales by d_model**-0.5; v1.1 configs say tie_word_embeddings=False.
    # transformers 5 always writes tie_word_embeddings=True and keeps the choice in scale_decoder_outputs.
    tied = hf.get("tie_word_embeddings") is not False
    scaled = hf["scale_decoder_outputs"] if isinstance(hf.get("scale_decoder_outputs"), bool) else tied
    d_model, n_heads = require(hf, "d_model"), require(hf, "num_heads")
    n_encoder = require(hf, "num_layers")
    n_decoder = hf.get("num_decoder_layers")
    pad = hf.get("pad_token_id", 0)
    return ModelConfig(
        family="t5",
        kind="seq2seq",
        vocab_size=require(hf, "vocab_size"),
        d_model=d_model,
        n_layers=n_encoder if n_decoder is None else n_decoder,
        n_encoder_layers=n_encoder,
        n_heads=n_heads,
        head_dim=require(hf, "d_kv"),
        d_ff=require(hf, "d_ff"),
        max_positions=hf.get("n_positions") or 512,  # relative positions have no hard limit
        norm="rmsnorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-6),
        norm_position="pre",
        final_norm=True,
        mlp="gated" if gated else "plain",
        activation=activation(act),
        attention_scale=1.0,
        positional="relative",
        relative_buckets=hf.get("relative_attention_num_buckets", 32),
        relative_max_distance=hf.get("relative_attention_max_distance", 128),
        tie_word_embeddings=tied,
        logit_scale=d_model**-0.5 if scaled else 1.0,
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=hf.get("eos_token_id", 1),
        pad_token_id=pad,
        decoder_start_token_id=hf.get("decoder_start_token_id", pad),
    )


def _attention(target: str, source: str) -> list[Rule]:
    return [*linear(f"{target}.qkv", f"{source}.q", f"{source}.k", f"{source}.v"), *linear(f"{target}.out", f"{source}.o")]


def _mlp(config: ModelConfig, target: str, source: str) -> list[Rule]:
    if config.mlp == "gated":
        return [*linear(f"{target}.gate_up", f"{source}.wi_0", f"{source}.wi_1"), *linear(f"{target}.down", f"{source}.wo")]
    return [*linear(f"{target}.fc1", f"{source}.wi"), *linear(f"{target}.fc2", f"{source}.wo")]


def rules(config: ModelConfig) -> list[Rule]:
    enc, dec = "encoder.block.{e}.layer", "decoder.block.{i}.layer"
    encoder = [
        copy("encoder.blocks.{e}.attn_norm.weight", f"{enc}.0.layer_norm.weight"),
        *_attention("encoder.blocks.{e}.attn", f"{enc}.0.SelfAttention"),
        copy("encoder.blocks.{e}.mlp_norm.weight", f"{enc}.1.layer_norm.weight"),
        *_mlp(config, "encoder.blocks.{e}.mlp", f"{enc}.1.DenseReluDense"),
    ]
    decoder = [
        copy("decoder.blocks.{i}.attn_norm.weight", f"{dec}.0.layer_norm.weight"),
        *_attention("decoder.blocks.{i}.attn", f"{dec}.0.SelfAttention"),
        copy("decoder.blocks.{i}.cross_norm.weight", f"{dec}.1.layer_norm.weight"),
        *linear("decoder.blocks.{i}.cross.q", f"{dec}.1.EncDecAttention.q"),
        *linear("decoder.blocks.{i}.cross.kv", f"{dec}.1.EncDecAttention.k", f"{dec}.1.EncDecAttention.v"),
        *linear("decoder.blocks.{i}.cross.out", f"{dec}.1.EncDecAttention.o"),
        copy("decoder.blocks.{i}.mlp_norm.weight", f"{dec}.2.layer_norm.weight"),
        *_mlp(config, "decoder.blocks.{i}.mlp", f"{dec}.2.DenseReluDense"),
    ]
    top = [
        copy("embed.weight", "shared.weight"),
        copy("encoder.relative_bias.embedding.weight", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
        copy("decoder.relative_bias.embedding.weight", "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
        copy("encoder.norm.weight", "encoder.final_layer_norm.weight"),
        copy("decoder.norm.weight", "decoder.final_layer_norm.weight"),
    ]
    if not config.tie_word_embeddings:
        top.append(Rule("lm_head.weight", ("lm_head.weight",), transpose=True))
    return top + encoder + decoder


FAMILIES = [
    Family(
        model_type="t5",
        config_from_hf=config_from_hf,
        rules=rules,
        # Copies of the shared embedding (checked equal by `adapt_shared_embedding`), a tied head's copy, and a
        # cross-attention bias table T5 never uses.
        ignore=(
            r"(encoder|decoder)\.embed_tokens\.weight",
            r"lm_head\.weight",
            r"decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight",
        ),
        probe="shared.weight",
        adapt=adapt_shared_embedding,
    )
]
