"""Model families: Hugging Face config.json -> ModelConfig, and the weight map for each.

Adding a family means adding one module here with a `FAMILY` and listing it in `FAMILIES`.
"""

from __future__ import annotations

from playground.checkpoints.families import (  # the rest of the BART family
    bart,
    gemma3,
    gpt2,
    gpt_neo,
    gpt_neox,
    llama,
    m2m_100,
    marian,
    mbart,
    olmo2,
    opt,
    pegasus,
    phi3,
    qwen3,
    t5,
    transformer,
)
from playground.checkpoints.families.base import Family
from playground.errors import CheckpointError

NEWER_DECODERS = (gpt_neox, gpt_neo, qwen3, gemma3, phi3, olmo2, opt)  # qwen3 also holds smollm3
FAMILIES: dict[str, Family] = {}
for module in (gpt2, llama, t5, bart, marian, transformer, *NEWER_DECODERS):
    for family in module.FAMILIES:
        FAMILIES[family.model_type] = family
for family in (*mbart.FAMILIES, *pegasus.FAMILIES, *m2m_100.FAMILIES):
    FAMILIES[family.model_type] = family


def family_for(hf_config: dict, where: str = "config.json") -> Family:
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise CheckpointError(
            f"{where}: model_type {model_type!r} is not supported; supported families: "
            f"{', '.join(sorted(FAMILIES))}"
        )
    return FAMILIES[model_type]
