"""Marian (OPUS-MT translation models): BART's layout with sinusoidal positions instead of learned
ones, laid out [sin half | cos half] as transformers' MarianSinusoidalPositionalEmbedding builds them,
embeddings scaled by sqrt(d_model) (`scale_embedding`), no embedding LayerNorm, `final_logits_bias`.
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.bart import (
    STORED_SINUSOIDS,
    adapt_stored_sinusoids,
    bart_family_config,
    family,
    refuse_pre_ln_flags,
)
from playground.checkpoints.families.base import refuse
from playground.config import ModelConfig

# transformers 5.23 MarianConfig defaults (decoding starts from the pad token when none is given).
DEFAULTS = dict(activation_function="gelu", scale_embedding=False, eos_token_id=0, forced_eos_token_id=0)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    refuse_pre_ln_flags(hf)
    refuse(
        hf.get("share_encoder_decoder_embeddings", True) is False,
        "separate source and target embeddings (share_encoder_decoder_embeddings=False) are not supported",
    )
    vocab, target_vocab = hf.get("vocab_size"), hf.get("decoder_vocab_size")
    refuse(target_vocab not in (None, vocab), f"decoder_vocab_size {target_vocab} differs from vocab_size {vocab}; not supported")
    start = hf.get("decoder_start_token_id")
    return bart_family_config(
        hf, "marian", DEFAULTS, positional="sinusoidal", sinusoidal_layout="halves",
        decoder_start_token_id=hf.get("pad_token_id") if start is None else start,
    )


FAMILIES = [family("marian", config_from_hf, ignore=STORED_SINUSOIDS, adapt=adapt_stored_sinusoids)]
