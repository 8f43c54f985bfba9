"""Our own Transformer implementations (no transformers model classes are used)."""

from __future__ import annotations

from torch import nn

from playground.config import ModelConfig


def build_model(config: ModelConfig) -> nn.Module:
    """The module for a config: DecoderLM for kind 'decoder', EncoderDecoderLM for 'seq2seq'."""
    if config.kind == "decoder":
        from playground.models.decoder import DecoderLM

        return DecoderLM(config)
    from playground.models.seq2seq import EncoderDecoderLM

    return EncoderDecoderLM(config)


def reset_buffers(model: nn.Module) -> None:
    """Recreate non-persistent buffers (RoPE tables...) of a model built on the meta device."""
    for module in model.modules():
        if module is not model and hasattr(module, "reset_buffers"):
            module.reset_buffers()
