"""M2M100 and NLLB-200 (`model_type` "m2m_100"): BART's weights with pre-LN blocks, a final LayerNorm
after each stack, no embedding LayerNorm, no `final_logits_bias`, ReLU, embeddings scaled by
sqrt(d_model), and fairseq's sinusoidal positions: computed, never stored; a token's row counts the
non-padding tokens before it from pad_token_id + 1 (see `FairseqSinusoidalPositions`).

Decoding starts from </s> and forces the target language code as the first generated token
(`forced_bos_token_id`, set per request: `GenerationConfig.forced_bos_token_id`).
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.bart import PRE_LN, STORED_SINUSOIDS, bart_family_config, family
from playground.config import ModelConfig

# transformers 5.23 M2M100Config defaults.
DEFAULTS = dict(activation_function="relu", scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                decoder_start_token_id=2)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    return bart_family_config(
        hf, "m2m_100", DEFAULTS, positional="sinusoidal", sinusoidal_layout="fairseq", final_logits_bias=False, **PRE_LN
    )


# transformers keeps the table in a buffer it never loads: tables in old files are ignored, as there.
FAMILIES = [family("m2m_100", config_from_hf, ignore=STORED_SINUSOIDS)]
