"""OLMo 2: a Llama-style decoder whose norms sit after each sublayer, inside the residual:

    x = x + norm(attn(x));  x = x + norm(mlp(x))

and whose queries and keys are RMS-normalised over the whole projection (all heads at once) before
RoPE. Its RMSNorm multiplies by the weight in float32 before casting back.
"""

from __future__ import annotations

from typing import Any

from playground.checkpoints.families.base import Family
from playground.checkpoints.families.decoder_fields import replacing, tokens_with_defaults
from playground.checkpoints.families.llama import _IGNORE, _common
from playground.checkpoints.families.llama import rules as llama_rules
from playground.checkpoints.families.qwen3 import qk_norm_rules
from playground.checkpoints.weight_map import Rule, copy
from playground.config import ModelConfig


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    bias = bool(hf.get("attention_bias", False))
    return _common(
        hf, "olmo2", norm="rmsnorm_f32", norm_eps=hf.get("rms_norm_eps", 1e-5), norm_position="output",
        qk_norm="projection", attention_bias=bias, attention_out_bias=bias, **tokens_with_defaults(hf, None, 50279, 1),
    )


def rules(config: ModelConfig) -> list[Rule]:
    layer = "model.layers.{i}"
    return replacing(llama_rules(config), qk_norm_rules() + [
        copy("blocks.{i}.attn_out_norm.weight", f"{layer}.post_attention_layernorm.weight"),
        copy("blocks.{i}.mlp_out_norm.weight", f"{layer}.post_feedforward_layernorm.weight"),
    ], "blocks.{i}.attn_norm.weight", "blocks.{i}.mlp_norm.weight")


FAMILIES = [Family("olmo2", config_from_hf, rules, ignore=_IGNORE, probe="model.embed_tokens.weight")]
