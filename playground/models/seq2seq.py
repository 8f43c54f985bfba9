"""Encoder-decoder Transformer (the original Transformer, T5, BART, mBART, Marian, Pegasus, M2M100 /
NLLB), one class for all of them.

    src = embed(input_ids) * embed_scale [+ positions] [-> embed_norm]
    encoder block:  x = x + attn(norm(x));  x = x + mlp(norm(x))     (pre-LN: T5, mBART, Pegasus, M2M100)
                    x = norm(x + attn(x));  x = norm(x + mlp(x))     (post-LN: paper, BART, Marian)
    decoder block:  masked self-attention, cross-attention over the encoder output, MLP
    [-> final norm of each stack (pre-LN)]
    logits = head(norm(y) * logit_scale) [+ final_logits_bias]

The encoder may differ from the decoder in layers, heads, head size and FFN width (DistilBART has
12 encoder and 6 decoder layers): its blocks are built from `config.encoder_config()`. Cross-attention
has the decoder's heads; its keys and values are projected from the encoder output (d_model) once per
source and live in `Seq2SeqCache`.

Positions: sinusoidal tables, learned absolute positions (BART's offset of 2), fairseq's sinusoidal
rows that skip padding tokens (M2M100), or T5's relative position bias (owned by each stack, added to
the scores of every layer).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from playground.config import ModelConfig
from playground.models.attention import SelfAttention, causal_mask
from playground.models.cross_attention import CrossAttention
from playground.models.edits import Scoped
from playground.models.kv_cache import KVCache, Seq2SeqCache
from playground.models.kv_pool import KVPool
from playground.models.layers import LaidOut, Linear, TiedHead, make_mlp, make_norm
from playground.models.positional import absolute_positions
from playground.models.recorder import Recorder
from playground.models.relative_bias import RelativePositionBias
from playground.models.rows import Batch, Rows, Segment


def padding_bias(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """(B, S) 1/0 mask -> additive (B, 1, 1, S) bias: 0 where visible, the dtype's minimum on padding."""
    if attention_mask is None:
        return None
    keep = attention_mask.to(torch.bool)[:, None, None, :]
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)


def _add_bias(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    if a is None:
        return b
    return a if b is None else a + b


def _sublayer(x: torch.Tensor, norm: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], pre: bool) -> torch.Tensor:
    """Residual connection around `fn`, normalising before (pre-LN) or after the sum (post-LN)."""
    return x + fn(norm(x)) if pre else norm(x + fn(x))


class EncoderBlock(nn.Module):
    """Bidirectional self-attention, then the MLP."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.pre = layer, config.norm_position == "pre"
        self.attn_norm = make_norm(config)
        self.attn = SelfAttention(config)
        self.mlp_norm = make_norm(config)
        self.mlp = make_mlp(config)

    def forward(self, x: torch.Tensor, batch: Batch) -> torch.Tensor:
        x = _sublayer(x, self.attn_norm, lambda h: self.attn(h, layer=self.layer, batch=batch), self.pre)
        return _sublayer(x, self.mlp_norm, lambda h: batch.edit_mlp(self.layer, self.mlp(h, batch.invariant)), self.pre)


class CrossDecoderBlock(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, then the MLP."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.pre = layer, config.norm_position == "pre"
        self.attn_norm = make_norm(config)
        self.attn = SelfAttention(config)
        self.cross_norm = make_norm(config)
        self.cross = CrossAttention(config)
        self.mlp_norm = make_norm(config)
        self.mlp = make_mlp(config)

    def forward(self, x: torch.Tensor, batch: Batch) -> torch.Tensor:
        """x: the pass's decoder hidden states (L0, L1, d) in its batch's layout (`models.rows.Batch`)."""
        x = _sublayer(x, self.attn_norm, lambda h: self.attn(h, layer=self.layer, batch=batch), self.pre)
        x = _sublayer(x, self.cross_norm, lambda h: self.cross(h, layer=self.layer, batch=batch), self.pre)
        return _sublayer(x, self.mlp_norm, lambda h: batch.edit_mlp(self.layer, self.mlp(h, batch.invariant)), self.pre)


class Stack(nn.Module):
    """What encoder and decoder share: positions, the optional embedding norm and final norm.

    `config` is the stack's own view: `config.encoder_config()` for the encoder.
    """

    def __init__(self, config: ModelConfig, *, decoder: bool) -> None:
        super().__init__()
        self.positions = absolute_positions(config)
        self.relative_bias = (
            RelativePositionBias(config, bidirectional=not decoder) if config.positional == "relative" else None
        )
        self.embed_norm = make_norm(config) if config.embedding_norm else None
        block = CrossDecoderBlock if decoder else EncoderBlock
        layers = config.n_layers if decoder else config.n_encoder_layers
        self.blocks = nn.ModuleList(block(config, i) for i in range(layers))
        self.norm = make_norm(config) if config.final_norm else None

    def embed_positions(self, x: torch.Tensor, batch: Batch) -> torch.Tensor:
        """x: the token embeddings (L0, L1, d) of the batch's tokens, at their positions."""
        if self.positions is not None:
            x = x + batch.absolute(self.positions, with_ids=True).to(x.dtype)
        return self.embed_norm(x) if self.embed_norm is not None else x

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.norm is not None else x


class EncoderDecoderLM(LaidOut, Scoped):
    """Sequence-to-sequence model: `encode` the source once, `decode` target tokens against it."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.kind != "seq2seq":
            raise ValueError("EncoderDecoderLM needs a config with kind='seq2seq'")
        if config.positional == "rope":
            raise ValueError("EncoderDecoderLM does not implement RoPE")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)  # shared by source, target and tied head
        self.encoder = Stack(config.encoder_config(), decoder=False)
        self.decoder = Stack(config, decoder=True)
        self.lm_head = None if config.tie_word_embeddings else Linear(config.d_model, config.vocab_size)
        self.final_logits_bias = nn.Parameter(torch.zeros(1, config.vocab_size)) if config.final_logits_bias else None
        self.tied_head = TiedHead(self.embed)

    # --- positions
    def _check_length(self, length: int, what: str) -> None:
        if self.config.positional in ("learned", "sinusoidal") and length > self.config.max_positions:
            raise ValueError(f"{what} of {length} tokens exceeds the model's {self.config.max_positions} positions")

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)  # (B, T, d)
        return x * self.config.embed_scale if self.config.embed_scale != 1.0 else x

    # --- encoder
    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        recorder: Recorder | None = None,
    ) -> torch.Tensor:
        """input_ids (B, S), attention_mask (B, S) of 1 (token) / 0 (padding) -> encoder output (B, S, d).

        A `recorder` keeps the encoder self-attention (B, h, S, S) of the layers it asks for.
        """
        B, S = input_ids.shape
        self._check_length(S, "source")
        mask = padding_bias(attention_mask, self.dtype)
        if self.encoder.relative_bias is not None:
            mask = _add_bias(self.encoder.relative_bias(S, S).to(self.dtype), mask)
        batch = Rows([Segment(input_ids, None, recorder, 0, "none", self_mask=mask, causal=False, kind="encoder",
                               edits=self.scoped_edits, taps=self.scoped_taps)])
        x = self.encoder.embed_positions(self._embed(input_ids), batch)
        for block in self.encoder.blocks:
            x = batch.edit_block(block.layer, block(x, batch))
        return self.encoder.finish(x)

    # --- decoder
    def new_cache(self, batch: int, max_tokens: int, pool: KVPool | None = None) -> Seq2SeqCache:
        """The decoder's caches for `batch` rows: self-attention buffers of its own, or rows of `pool`."""
        c = self.config
        return Seq2SeqCache(
            KVCache(
                layers=c.n_layers, batch=batch, kv_heads=c.n_kv_heads, head_dim=c.head_dim, max_tokens=max_tokens,
                query_heads=c.n_heads, dtype=self.dtype, device=self.device, pool=pool,
            )
        )

    def cross_kv(self, encoder_out: torch.Tensor, invariant: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer cross-attention keys and values (B, h_kv, S, d_head) of an encoder output."""
        pairs = [block.cross.project_kv(encoder_out, invariant) for block in self.decoder.blocks]
        return [k for k, _ in pairs], [v for _, v in pairs]

    def cross_pairs(
        self, encoder_out: torch.Tensor, cache: Seq2SeqCache | None, invariant: bool = False
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The cross-attention keys and values for a decoder pass: the cache's (projected on its first
        pass), or projected now without a cache."""
        if cache is None:
            return self.cross_kv(encoder_out, invariant)
        if not cache.cross_ready:
            cache.set_cross(*self.cross_kv(encoder_out, invariant))
        return cache.cross_keys, cache.cross_values

    def decoder_self_mask(self, T: int, start: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """T5's decoder: the relative position bias of T new tokens after `start` cached ones, causal
        (1, h, T, start + T); None for the families whose positions are added to the embeddings."""
        if self.decoder.relative_bias is None:
            return None
        S = start + T
        mask = self.decoder.relative_bias(T, S, start=start).to(dtype)
        visible = causal_mask(T, S, device=device)
        return mask if visible is None else mask.masked_fill(~visible, torch.finfo(dtype).min)

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_out: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: Seq2SeqCache | None = None,
        recorder: Recorder | None = None,
        *,
        last_only: bool = False,
    ) -> torch.Tensor:
        """decoder_input_ids (B, T) placed after the `cache.length` cached target tokens -> logits (B, T, V).

        `attention_mask` is the source padding mask (B, S). With a cache, the cross K/V are projected
        from `encoder_out` on the first call and reused afterwards. A `recorder` keeps the decoder's
        self-attention (B, h, T, S_self) and cross-attention (B, h, T, S_src) of the layers it asks
        for and, if asked, the decoder's residual stream. The model's own pass: one segment.
        """
        start = cache.length if cache is not None else 0
        segment = Segment(decoder_input_ids, cache, recorder, start, "last" if last_only else "all",
                          encoder_out=encoder_out, cross_mask=padding_bias(attention_mask, encoder_out.dtype),
                          edits=self.scoped_edits, taps=self.scoped_taps)
        return self.decode_rows([segment], shared=False)[0]

    def decode_rows(self, segments: list[Segment], *, shared: bool = True) -> list[torch.Tensor | None]:
        """One decoder pass over several segments' target tokens at once, each against its own source
        (`encoder_out`) and cache, at its own positions: what `decode` computes for each alone, with
        every token a row of one (N, 1, d) batch through the batch-invariant kernels (`shared`).
        Returns each segment's logits as its `logits` asks."""
        for s in segments:
            self._check_length(s.start + s.ids.shape[1], "target")
            s.cross_kv = self.cross_pairs(s.encoder_out, s.cache, shared)
        batch = Rows(segments, shared=shared)
        x = self.decoder.embed_positions(self._embed(batch.ids()), batch)  # (L0, L1, d)
        for s in segments:
            s.self_mask = self.decoder_self_mask(s.ids.shape[1], s.start, x.dtype, x.device)
        batch.record_residual(x)
        for block in self.decoder.blocks:
            x = batch.edit_block(block.layer, block(x, batch))
            batch.record_residual(x)
        return batch.logits(x, lambda h: self.unembed(h, batch.invariant))

    def unembed(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        """Decoder residual stream (B, T, d) -> logits (B, T, V): final norm, scale, head, logits bias."""
        x = self.decoder.finish(x)
        if self.config.logit_scale != 1.0:
            x = x * self.config.logit_scale  # T5 with a tied head, on the hidden states as transformers does
        logits = self.lm_head(x, invariant) if self.lm_head is not None else self.tied_head(x, invariant)
        return logits + self.final_logits_bias if self.final_logits_bias is not None else logits

    def forward(
        self,
        input_ids: torch.Tensor,
        decoder_input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher-forced logits (B, T, V): encode the source, decode the whole target, no cache."""
        encoder_out = self.encode(input_ids, attention_mask)
        return self.decode(decoder_input_ids, encoder_out, attention_mask)
