"""Decoder-only Transformer (GPT-2, Llama, Mistral, Qwen2, SmolLM...), one class for all of them.

    x = embed(ids) [+ absolute positions]
    for each block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))      (pre-norm)
    logits = head(norm(x))
"""

from __future__ import annotations

import torch
from torch import nn

from playground.config import ModelConfig
from playground.models.attention import SelfAttention
from playground.models.kv_cache import KVCache
from playground.models.layers import Linear, TiedHead, make_mlp, make_norm
from playground.models.positional import RotaryEmbedding, absolute_positions
from playground.models.recorder import Recorder


class CausalBlock(nn.Module):
    """One pre-norm block of a decoder-only model: masked self-attention, then the MLP."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.attn_norm = make_norm(config)
        self.attn = SelfAttention(config)
        self.mlp_norm = make_norm(config)
        self.mlp = make_mlp(config)

    def forward(
        self,
        x: torch.Tensor,
        start: int,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        cache: KVCache | None,
        recorder: Recorder | None,
    ) -> torch.Tensor:
        h = self.attn(self.attn_norm(x), layer=self.layer, start=start, rope=rope, cache=cache, recorder=recorder)
        x = x + h
        return x + self.mlp(self.mlp_norm(x))


class DecoderLM(nn.Module):
    """Causal language model; `forward` returns logits (B, T, V) for the new tokens."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.kind != "decoder":
            raise ValueError("DecoderLM needs a config with kind='decoder'")
        if config.norm_position != "pre":
            raise ValueError("DecoderLM implements pre-norm blocks only")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = absolute_positions(config)
        self.rope = RotaryEmbedding(config) if config.positional == "rope" else None
        self.blocks = nn.ModuleList(CausalBlock(config, i) for i in range(config.n_layers))
        self.norm = make_norm(config) if config.final_norm else nn.Identity()
        # Untied heads are stored (d_model, V) for fast single-token products; tied ones reuse embed.
        self.lm_head = None if config.tie_word_embeddings else Linear(config.d_model, config.vocab_size)
        self.tied_head = TiedHead(self.embed)

    def new_cache(self, batch: int, max_tokens: int) -> KVCache:
        c, p = self.config, self.embed.weight
        return KVCache(
            layers=c.n_layers, batch=batch, kv_heads=c.n_kv_heads, head_dim=c.head_dim, max_tokens=max_tokens,
            query_heads=c.n_heads, dtype=p.dtype, device=p.device,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: KVCache | None = None,
        recorder: Recorder | None = None,
        *,
        last_only: bool = False,
    ) -> torch.Tensor:
        """input_ids: (B, T) new tokens, placed after the `cache.length` cached ones (0 without cache).

        Returns logits (B, T, V), or (B, 1, V) for the last position only with `last_only` (what
        generation needs after a prefill). A `recorder` keeps the attention weights of the layers it
        asks for and, if asked, the residual stream of the last position.
        """
        B, T = input_ids.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.max_positions:
            raise ValueError(
                f"sequence of {start + T} tokens exceeds the model's {self.config.max_positions} positions"
            )
        x = self.embed(input_ids)  # (B, T, d)
        if self.config.embed_scale != 1.0:
            x = x * self.config.embed_scale
        if self.positions is not None:
            x = x + self.positions(start, T).to(x.dtype)
        rope = self.rope(start, T, x.dtype) if self.rope is not None else None
        if recorder is not None:
            recorder.record_residual(x)
        for block in self.blocks:
            x = block(x, start, rope, cache, recorder)
            if recorder is not None:
                recorder.record_residual(x)
        if last_only:
            x = x[:, -1:]
        return self.unembed(x)

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """Residual stream (B, T, d) -> logits (B, T, V): final norm, head, logit scale."""
        x = self.norm(x)
        logits = self.lm_head(x) if self.lm_head is not None else self.tied_head(x)
        return logits * self.config.logit_scale if self.config.logit_scale != 1.0 else logits
