"""mBART (mBART-large-cc25, mBART-50): BART with pre-LN blocks and a final LayerNorm after each
stack, on top of BART's learned positions (offset 2) and embedding LayerNorm; embeddings scaled by
sqrt(d_model) in the real checkpoints (`scale_embedding`).

The target language is a token: mBART-50 decodes from </s> and then forces the language code
(`forced_bos_token_id`, set per request: `GenerationConfig.forced_bos_token_id`); mBART-cc25
fine-tunes start from the code itself (`decoder_start_token_id`). The `normalize_before` and
`add_final_layer_norm` keys of old configs are ignored, as transformers ignores them.
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.bart import PRE_LN, bart_family_config, family
from playground.config import ModelConfig

# transformers 5.23 MBartConfig defaults (no decoder start: generate() then starts from bos).
DEFAULTS = dict(activation_function="gelu", scale_embedding=False, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                forced_eos_token_id=2)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    return bart_family_config(
        hf, "mbart", DEFAULTS, positional="learned", learned_position_offset=2, embedding_norm=True, **PRE_LN
    )


FAMILIES = [family("mbart", config_from_hf)]
