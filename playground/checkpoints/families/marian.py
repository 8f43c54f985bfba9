"""Marian (OPUS-MT translation models): BART's layout with sinusoidal positions instead of learned
ones, laid out [sin half | cos half] as transformers' MarianSinusoidalPositionalEmbedding builds them,
embeddings scaled by sqrt(d_model) (`scale_embedding`), no embedding LayerNorm, `final_logits_bias`.
"""

from __future__ import annotations

import functools
from typing import Any

from playground.checkpoints.families.bart import IGNORE, bart_layer_rules, shared_fields
from playground.checkpoints.families.base import Family, refuse, untie_if_head_differs
from playground.config import ModelConfig


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    refuse(
        hf.get("share_encoder_decoder_embeddings", True) is False,
        "separate source and target embeddings (share_encoder_decoder_embeddings=False) are not supported",
    )
    vocab, target_vocab = hf.get("vocab_size"), hf.get("decoder_vocab_size")
    refuse(target_vocab not in (None, vocab), f"decoder_vocab_size {target_vocab} differs from vocab_size {vocab}; not supported")
    fields = shared_fields(hf)
    if fields["decoder_start_token_id"] is None:  # Marian starts decoding from the pad token
        fields["decoder_start_token_id"] = fields["pad_token_id"]
    return ModelConfig(family="marian", positional="sinusoidal", sinusoidal_layout="halves", **fields)


FAMILIES = [
    Family(
        model_type="marian",
        config_from_hf=config_from_hf,
        rules=bart_layer_rules,
        # The sinusoidal tables are recomputed, never read from the file.
        ignore=(*IGNORE, r"(model\.)?(encoder|decoder)\.embed_positions\.weight"),
        prefixes=("model.", ""),
        probe="shared.weight",
        adapt=functools.partial(untie_if_head_differs, embed="shared.weight"),
    )
]
