"""Tiny random Hugging Face checkpoints written to disk with `save_pretrained` (real safetensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

DECODER_CLASSES = {
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
}


def llama_like(**overrides: Any) -> dict[str, Any]:
    base = dict(
        vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    base.update(overrides)
    return base


def gpt2_like(**overrides: Any) -> dict[str, Any]:
    base = dict(vocab_size=97, n_embd=48, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2)
    base.update(overrides)
    return base


def save_decoder(
    directory: Path, family: str, config_kwargs: dict[str, Any], *, seed: int = 0, init_std: float = 0.2
) -> torch.nn.Module:
    """Build a random `family` model (weights drawn with `init_std` so logits are far from uniform),
    save it with `save_pretrained` and return it in eval mode with eager attention."""
    config_cls, model_cls = DECODER_CLASSES[family]
    config = config_cls(**config_kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, init_std)
    model.eval()
    model.save_pretrained(directory)
    return model
