"""Pegasus: BART's weights with pre-LN blocks, a final LayerNorm after each stack, no embedding
LayerNorm, and sinusoidal positions laid out [sin half | cos half] from position 0 (as Marian's,
no offset), recomputed rather than read from the file. Real checkpoints scale embeddings by
sqrt(d_model) (`scale_embedding`).
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.bart import (
    PRE_LN,
    STORED_SINUSOIDS,
    adapt_stored_sinusoids,
    bart_family_config,
    family,
)
from playground.config import ModelConfig

# transformers 5.23 PegasusConfig defaults.
DEFAULTS = dict(activation_function="gelu", scale_embedding=False, pad_token_id=0, eos_token_id=1,
                decoder_start_token_id=0, forced_eos_token_id=1)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    return bart_family_config(hf, "pegasus", DEFAULTS, positional="sinusoidal", sinusoidal_layout="halves", **PRE_LN)


FAMILIES = [family("pegasus", config_from_hf, ignore=STORED_SINUSOIDS, adapt=adapt_stored_sinusoids)]
