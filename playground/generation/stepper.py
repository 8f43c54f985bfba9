"""Steppers: run a model one token at a time, with or without a static KV cache.

A stepper owns the token buffer of the decoder stream, the cache and the attention captures of its
last forward pass. `start` prefills (one pass over the prompt) and returns the next-token logits;
`step(tokens)` feeds one token per row and returns the next logits; `reorder` follows beam search.
With `use_cache=False` every step recomputes the whole sequence (same tokens, for comparison).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from playground.config import ModelConfig
from playground.models.kv_cache import KVCache


def empty_cache_stats(config: ModelConfig, batch: int, dtype: torch.dtype, recomputed_tokens: int) -> dict[str, Any]:
    """Cache statistics when no cache is kept: nothing held, every step recomputes the sequence."""
    element_size = torch.empty((), dtype=dtype).element_size()
    per_token = 2 * config.n_layers * batch * config.n_kv_heads * config.head_dim * element_size
    shape = [batch, config.n_kv_heads, 0, config.head_dim]
    return {
        "enabled": False, "layers": config.n_layers, "batch": batch, "kv_heads": config.n_kv_heads,
        "query_heads": config.n_heads, "head_dim": config.head_dim, "tokens": 0, "max_tokens": 0,
        "dtype": str(dtype).removeprefix("torch."), "element_size": element_size, "bytes_per_token": per_token,
        "bytes": 0, "allocated_bytes": 0, "mha_equivalent_bytes": 0, "recomputed_tokens": recomputed_tokens,
        "per_layer": [{"layer": i, "k_shape": shape, "v_shape": shape} for i in range(config.n_layers)],
    }


def _copy_prefill(source: KVCache, target: KVCache) -> None:
    """Broadcast a batch-1 prefilled cache into every row of `target` (beam search starts)."""
    n = source.length
    for src, dst in zip(source.keys + source.values, target.keys + target.values):
        dst[:, :, :n] = src[:, :, :n]
    target.length = n


class DecoderStepper:
    """Decoder-only models (`DecoderLM`)."""

    def __init__(self, model: nn.Module, *, batch: int, max_tokens: int, use_cache: bool, capture: bool) -> None:
        self.model, self.config = model, model.config
        self.batch, self.max_tokens, self.use_cache, self.capture = batch, max_tokens, use_cache, capture
        self.dtype = model.embed.weight.dtype
        device = model.embed.weight.device
        self.tokens = torch.zeros((batch, max_tokens), dtype=torch.long, device=device)
        self.length = 0
        self.cache: KVCache | None = None
        self.attention: dict[str, list[torch.Tensor]] | None = None  # last pass: {"self": [(B, h, T, S)]}

    def sequence(self) -> torch.Tensor:
        """(B, length) the token ids so far: prompt + generated."""
        return self.tokens[:, : self.length]

    def _captures(self) -> list[torch.Tensor] | None:
        if not self.capture:
            return None
        self.attention = {"self": []}
        return self.attention["self"]

    def start(self, prompt: torch.Tensor) -> torch.Tensor:
        """prompt: (P,) ids. Returns next-token logits (B, V) in float32."""
        n = prompt.shape[0]
        self.tokens[:, :n] = prompt
        self.length = n
        capture = self._captures()
        if not self.use_cache:
            return self.model(prompt[None], None, capture, last_only=True)[:, -1].float().expand(self.batch, -1)
        self.cache = self.model.new_cache(self.batch, self.max_tokens)
        if self.batch == 1:
            return self.model(prompt[None], self.cache, capture, last_only=True)[:, -1].float()
        first = self.model.new_cache(1, n)  # prefill once, then copy into every beam's rows
        logits = self.model(prompt[None], first, capture, last_only=True)[:, -1].float()
        _copy_prefill(first, self.cache)
        return logits.expand(self.batch, -1)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: (B,) one new token per row. Returns next-token logits (B, V) in float32."""
        self.tokens[:, self.length] = tokens
        self.length += 1
        capture = self._captures()
        if self.use_cache:
            return self.model(tokens[:, None], self.cache, capture, last_only=True)[:, -1].float()
        return self.model(self.sequence(), None, capture, last_only=True)[:, -1].float()

    def reorder(self, index: torch.Tensor) -> None:
        """Row b becomes old row index[b] (beam search)."""
        self.tokens[:, : self.length] = self.tokens[:, : self.length].index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)

    def stats(self) -> dict[str, Any]:
        if self.cache is None:
            return empty_cache_stats(self.config, self.batch, self.dtype, self.length)
        return {"enabled": True, **self.cache.stats()}


class Seq2SeqStepper:
    """Encoder-decoder models (`EncoderDecoderLM`): the encoder runs once; cross K/V are cached once."""

    def __init__(self, model: nn.Module, *, batch: int, max_tokens: int, use_cache: bool, capture: bool) -> None:
        self.model, self.config = model, model.config
        self.batch, self.max_tokens, self.use_cache, self.capture = batch, max_tokens, use_cache, capture
        weight = next(model.parameters())
        self.dtype = weight.dtype
        self.tokens = torch.zeros((batch, max_tokens), dtype=torch.long, device=weight.device)
        self.length = 0
        self.cache: Any = None
        self.encoder_out: torch.Tensor | None = None
        self.source_length = 0
        self.encoder_attention: list[torch.Tensor] | None = None
        self.attention: dict[str, list[torch.Tensor]] | None = None  # {"self": [...], "cross": [...]}

    def sequence(self) -> torch.Tensor:
        """(B, length) decoder ids so far: decoder start token(s) + generated."""
        return self.tokens[:, : self.length]

    def _captures(self) -> dict[str, list[torch.Tensor]] | None:
        if not self.capture:
            return None
        self.attention = {"self": [], "cross": []}
        return self.attention

    def start(self, source: torch.Tensor, decoder_start: torch.Tensor) -> torch.Tensor:
        """source: (S,) encoder ids; decoder_start: (D,) first decoder ids. Returns logits (B, V)."""
        self.encoder_attention = [] if self.capture else None
        encoded = self.model.encode(source[None], None, capture=self.encoder_attention)  # (1, S, d)
        self.source_length = source.shape[0]
        self.encoder_out = encoded.expand(self.batch, -1, -1) if self.batch > 1 else encoded
        n = decoder_start.shape[0]
        self.tokens[:, :n] = decoder_start
        self.length = n
        if self.use_cache:
            self.cache = self.model.new_cache(self.batch, self.max_tokens)
        return self._decode(self.sequence())

    def _decode(self, ids: torch.Tensor) -> torch.Tensor:
        capture = self._captures()
        logits = self.model.decode(ids, self.encoder_out, None, self.cache, capture=capture, last_only=True)
        return logits[:, -1].float()

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens[:, self.length] = tokens
        self.length += 1
        return self._decode(tokens[:, None] if self.use_cache else self.sequence())

    def reorder(self, index: torch.Tensor) -> None:
        self.tokens[:, : self.length] = self.tokens[:, : self.length].index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)

    def stats(self) -> dict[str, Any]:
        if self.cache is not None:
            return {"enabled": True, **self.cache.stats()}
        stats = empty_cache_stats(self.config, self.batch, self.dtype, self.length)
        c = self.config
        stats["cross_attention"] = {
            "layers": c.n_layers, "kv_heads": c.n_kv_heads, "head_dim": c.head_dim,
            "tokens": self.source_length, "bytes": 0,
        }
        return stats
