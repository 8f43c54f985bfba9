"""Decoder-only Transformer (GPT-2, Llama, Mistral, Qwen, Gemma 3, Pythia, OPT, OLMo 2...), one class
for all of them; the block kind differs by family.

    x = embed(ids) [· embed_scale] [-> project_in] [+ absolute positions]
    for each block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))      (pre-norm; see the block classes)
    logits = head([project_out](norm(x))) [softcapped]

Each layer has its own kind (`ModelConfig.layer_kinds()`): full or sliding-window attention, RoPE
from the global table, from the sliding layers' local table (Gemma 3) or none at all (SmolLM3's NoPE
layers), over all or the leading part of each head's dims (partial rotary).
"""

from __future__ import annotations

import torch
from torch import nn

from playground.config import LayerKind, ModelConfig
from playground.models.attention import SelfAttention
from playground.models.edits import Scoped
from playground.models.kv_cache import KVCache
from playground.models.kv_policy import KVPolicy, PolicyCache
from playground.models.kv_pool import KVPool
from playground.models.layers import LaidOut, Linear, TiedHead, make_mlp, make_norm
from playground.models.positional import RotaryEmbedding, absolute_positions
from playground.models.recorder import Recorder
from playground.models.rows import Batch, Rows, Segment

Rope = tuple[torch.Tensor, torch.Tensor] | None


class DecoderBlock(nn.Module):
    """What every decoder block has: masked self-attention and an MLP. Subclasses place the norms.

    x: the pass's hidden states (L0, L1, d) in its batch's layout (`models.rows.Batch`)."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__()
        self.layer, self.rope_table = kind.index, kind.rope  # rope_table: "global", "local" or None
        self.attn = SelfAttention(config, kind)
        self.mlp = make_mlp(config)

    def attend(self, x: torch.Tensor, rope: Rope, batch: Batch) -> torch.Tensor:
        return self.attn(x, layer=self.layer, rope=rope, batch=batch)

    def feed(self, x: torch.Tensor, batch: Batch) -> torch.Tensor:
        return batch.edit_mlp(self.layer, self.mlp(x, batch.invariant))

    def forward(self, x: torch.Tensor, rope: Rope, batch: Batch) -> torch.Tensor:
        raise NotImplementedError


class CausalBlock(DecoderBlock):
    """One pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)) (GPT-2, Llama and most others)."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__(config, kind)
        self.attn_norm = make_norm(config)
        self.mlp_norm = make_norm(config)

    def forward(self, x: torch.Tensor, rope: Rope, batch: Batch) -> torch.Tensor:
        x = x + self.attend(self.attn_norm(x), rope, batch)
        return x + self.feed(self.mlp_norm(x), batch)


class ParallelBlock(CausalBlock):
    """GPT-NeoX (Pythia): attention and MLP both read the block's input: x + attn(norm1(x)) + mlp(norm2(x))."""

    def forward(self, x: torch.Tensor, rope: Rope, batch: Batch) -> torch.Tensor:
        attn = self.attend(self.attn_norm(x), rope, batch)
        return self.feed(self.mlp_norm(x), batch) + attn + x  # transformers' order of the sum


class PostNormBlock(CausalBlock):
    """Post-LN (OPT-350m, the original Transformer): x = norm(x + attn(x)); x = norm(x + mlp(x))."""

    def forward(self, x: torch.Tensor, rope: Rope, batch: Batch) -> torch.Tensor:
        x = self.attn_norm(x + self.attend(x, rope, batch))
        return self.mlp_norm(x + self.feed(x, batch))


class SandwichBlock(CausalBlock):
    """Gemma 3: a norm before and after each sublayer: x + norm(attn(norm(x))), x + norm(mlp(norm(x)))."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__(config, kind)
        self.attn_out_norm = make_norm(config)
        self.mlp_out_norm = make_norm(config)

    def forward(self, x: torch.Tensor, rope: Rope, batch: Batch) -> torch.Tensor:
        x = x + self.attn_out_norm(self.attend(self.attn_norm(x), rope, batch))
        return x + self.mlp_out_norm(self.feed(self.mlp_norm(x), batch))


class OutputNormBlock(DecoderBlock):
    """OLMo 2: each sublayer reads the raw residual and its output is normalised: x + norm(attn(x))."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__(config, kind)
        self.attn_out_norm = make_norm(config)
        self.mlp_out_norm = make_norm(config)

    def forward(self, x: torch.Tensor, rope: Rope, batch: Batch) -> torch.Tensor:
        x = x + self.attn_out_norm(self.attend(x, rope, batch))
        return x + self.mlp_out_norm(self.feed(x, batch))


def block_class(config: ModelConfig) -> type[DecoderBlock]:
    if config.parallel_residual:
        return ParallelBlock
    return {"pre": CausalBlock, "post": PostNormBlock, "sandwich": SandwichBlock, "output": OutputNormBlock}[
        config.norm_position
    ]


class DecoderLM(LaidOut, Scoped):
    """Causal language model; `forward` returns logits (B, T, V) for the new tokens."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.kind != "decoder":
            raise ValueError("DecoderLM needs a config with kind='decoder'")
        self.config = config
        self.layer_kinds = config.layer_kinds()
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim)
        # OPT-350m embeds in 512 dims and works in 1024: projected in after the lookup, out before the head.
        projected = config.embed_dim != config.d_model
        self.project_in = Linear(config.embed_dim, config.d_model) if projected else None
        self.project_out = Linear(config.d_model, config.embed_dim) if projected else None
        self.positions = absolute_positions(config)
        tables = {k.rope for k in self.layer_kinds}
        self.rope = RotaryEmbedding(config) if "global" in tables else None
        self.local_rope = RotaryEmbedding(config, local=True) if "local" in tables else None
        block = block_class(config)
        self.blocks = nn.ModuleList(block(config, kind) for kind in self.layer_kinds)
        self.norm = make_norm(config) if config.final_norm else nn.Identity()
        # Untied heads are stored (d, V) for fast single-token products; tied ones reuse embed.
        self.lm_head = None if config.tie_word_embeddings else Linear(config.embed_dim, config.vocab_size)
        self.tied_head = TiedHead(self.embed)

    def new_cache(
        self, batch: int, max_tokens: int, pool: KVPool | None = None, policy: KVPolicy | None = None
    ) -> KVCache | PolicyCache:
        """A KV cache for `batch` rows of `max_tokens` positions: buffers of its own, or rows of `pool`;
        with `policy`, a `PolicyCache` carrying out that run's eviction, quantisation or RoPE scaling."""
        c = self.config
        if policy is not None:
            return PolicyCache(
                policy, layers=c.n_layers, batch=batch, kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                max_tokens=max_tokens, query_heads=c.n_heads, dtype=self.dtype, device=self.device,
                windows=[k.window for k in self.layer_kinds],
            )
        return KVCache(
            layers=c.n_layers, batch=batch, kv_heads=c.n_kv_heads, head_dim=c.head_dim, max_tokens=max_tokens,
            query_heads=c.n_heads, dtype=self.dtype, device=self.device, windows=[k.window for k in self.layer_kinds],
            pool=pool,
        )

    def reencodes_at(self, cached: int, new: int) -> bool:
        """Whether `new` positions after `cached` cached ones switch the rotary tables (longrope crossing
        its original context). transformers' `generate()` then drops the cache and encodes the whole
        sequence again with the long factors; the stepper does the same."""
        switch = self.rope.switch_after if self.rope is not None else None
        return switch is not None and cached <= switch < cached + new

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: KVCache | PolicyCache | None = None,
        recorder: Recorder | None = None,
        *,
        last_only: bool = False,
    ) -> torch.Tensor:
        """input_ids: (B, T) new tokens, placed after the `cache.length` cached ones (0 without cache).

        Returns logits (B, T, V), or (B, 1, V) for the last position only with `last_only` (what
        generation needs after a prefill). A `recorder` keeps the attention weights of the layers it
        asks for and, if asked, the residual stream of the last position. The model's own pass: one
        segment (`run` of `Rows`), laid out (B, T).
        """
        start = cache.length if cache is not None else 0
        segment = Segment(input_ids, cache, recorder, start, "last" if last_only else "all", edits=self.scoped_edits,
                          taps=self.scoped_taps)
        return self.forward_rows([segment], shared=False)[0]

    def forward_rows(self, segments: list[Segment], *, shared: bool = True) -> list[torch.Tensor | None]:
        """One forward pass over several segments' tokens at once, each after its own cached positions,
        against its own cache: what `forward` computes for each alone, with every token a row of one
        (N, 1, d) batch through the batch-invariant kernels (`shared`). Returns each segment's logits
        as its `logits` asks."""
        for s in segments:
            rotary = getattr(s.self_cache, "rotary", None)  # a run's own rope_scaling
            limit = rotary.max_positions if rotary is not None else self.config.max_positions
            if s.start + s.ids.shape[1] > limit:
                raise ValueError(f"sequence of {s.start + s.ids.shape[1]} tokens exceeds the model's {limit} positions")
        return self.run(Rows(segments, shared=shared))

    def run(self, batch: Batch) -> list[torch.Tensor | None]:
        """The forward pass over a batch (`models.rows`): the only way into the model, but for the CacheBlend lab's
        pass, which runs the same blocks over fewer rows after its check layer (`models.cache_blend.blend_pass`)."""
        x = self.embed_rows(batch)
        ropes = self.rotary_tables(batch, x.dtype)
        batch.record_residual(x)
        for block in self.blocks:
            x = batch.edit_block(block.layer, block(x, ropes[block.rope_table], batch))
            batch.record_residual(x)
        return batch.logits(x, lambda h: self.unembed(h, batch.invariant))

    def embed_rows(self, batch: Batch) -> torch.Tensor:
        """The residual stream entering the first block (L0, L1, d): embedding, its scale, the input projection
        and the absolute positions of the batch's tokens."""
        x = self.embed(batch.ids())  # (L0, L1, d_embed)
        if self.config.embed_scale != 1.0:
            # The scale rounded to the weights' dtype first, as transformers does for Gemma.
            x = x * torch.tensor(self.config.embed_scale, dtype=x.dtype)
        if self.project_in is not None:
            x = self.project_in(x, batch.invariant)  # (L0, L1, d)
        if self.positions is not None:
            x = x + batch.absolute(self.positions).to(x.dtype)
        return x

    def rotary_tables(self, batch: Batch, dtype: torch.dtype) -> dict[str | None, Rope]:
        """Each rotary table's cos and sin at the batch's positions, by the name a block reads (`rope_table`)."""
        ropes: dict[str | None, Rope] = {None: None}
        for name, rope in (("global", self.rope), ("local", self.local_rope)):
            if rope is not None:
                ropes[name] = batch.rotary(rope, dtype)
        return ropes

    def unembed(self, x: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        """Residual stream (B, T, d) -> logits (B, T, V): final norm, head, softcap, logit scale."""
        x = self.norm(x)
        if self.project_out is not None:
            x = self.project_out(x, invariant)  # (B, T, d_embed)
        logits = self.lm_head(x, invariant) if self.lm_head is not None else self.tied_head(x, invariant)
        cap = self.config.final_logit_softcap
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits * self.config.logit_scale if self.config.logit_scale != 1.0 else logits
