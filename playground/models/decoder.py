"""Decoder-only Transformer (GPT-2, Llama, Mistral, Qwen2, SmolLM...), one class for all of them.

    x = embed(ids) [+ learned positions]
    for each block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))      (pre-norm)
    logits = head(norm(x))
"""

from __future__ import annotations

import torch
from torch import nn

from playground.config import ModelConfig
from playground.models.attention import SelfAttention
from playground.models.kv_cache import KVCache
from playground.models.layers import Linear, make_mlp, make_norm, transposed
from playground.models.positional import RotaryEmbedding


class DecoderBlock(nn.Module):
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
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        cache: KVCache | None,
        capture: list[torch.Tensor] | None,
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), layer=self.layer, rope=rope, cache=cache, capture=capture)
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
        self.positions = nn.Embedding(config.max_positions, config.d_model) if config.positional == "learned" else None
        self.rope = RotaryEmbedding(config) if config.positional == "rope" else None
        self.blocks = nn.ModuleList(DecoderBlock(config, i) for i in range(config.n_layers))
        self.norm = make_norm(config) if config.final_norm else nn.Identity()
        # Untied heads are stored (d_model, V) for fast single-token products; tied ones reuse embed.
        self.lm_head = None if config.tie_word_embeddings else Linear(config.d_model, config.vocab_size)
        self._head_t: torch.Tensor | None = None  # (d, V) copy of a tied embedding, see head()
        self._head_t_version: tuple[int, int] | None = None

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
        capture: list[torch.Tensor] | None = None,
        *,
        last_only: bool = False,
    ) -> torch.Tensor:
        """input_ids: (B, T) new tokens, placed after the `cache.length` cached ones (0 without cache).

        Returns logits (B, T, V), or (B, 1, V) for the last position only with `last_only` (what
        generation needs after a prefill). When `capture` is a list, each layer appends its
        attention weights (B, h, T, S) to it.
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
            x = x + self.positions(torch.arange(start, start + T, device=input_ids.device))
        rope = self.rope(start, T, x.dtype) if self.rope is not None else None
        for block in self.blocks:
            x = block(x, rope, cache, capture)
        if cache is not None:
            cache.advance(T)
        if last_only:
            x = x[:, -1:]
        logits = self.head(self.norm(x))
        return logits * self.config.logit_scale if self.config.logit_scale != 1.0 else logits

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Project hidden states (B, T, d) to vocabulary logits (B, T, V)."""
        if self.lm_head is not None:
            return self.lm_head(x)
        if torch.is_grad_enabled():  # training: go through the shared parameter itself
            return x @ self.embed.weight.t()
        return x @ self._tied_head_matrix()

    def _tied_head_matrix(self) -> torch.Tensor:
        # A tied head reads the (V, d) embedding transposed, which streams at about half the speed of
        # a contiguous (d, V) matrix for one token. Keep such a copy, rebuilt whenever the embedding
        # changes (its version counter moves on every in-place update).
        weight = self.embed.weight
        if self._head_t is None or self._head_t_version != (weight._version, weight.data_ptr()):
            self._head_t = transposed([weight.detach()])
            self._head_t_version = (weight._version, weight.data_ptr())
        return self._head_t
