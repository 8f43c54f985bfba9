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
from playground.models.kv_cache import KVCache
from playground.models.kv_policy import KVPolicy, PolicyCache
from playground.models.kv_pool import KVPool
from playground.models.layers import Linear, TiedHead, make_mlp, make_norm
from playground.models.positional import RotaryEmbedding, absolute_positions
from playground.models.recorder import Recorder
from playground.models.rows import Rows, Segment

Rope = tuple[torch.Tensor, torch.Tensor] | None
Cache = KVCache | Rows | None  # one request's cache, or the rows of several segments (`forward_rows`)


class DecoderBlock(nn.Module):
    """What every decoder block has: masked self-attention and an MLP. Subclasses place the norms."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__()
        self.layer, self.rope_table = kind.index, kind.rope  # rope_table: "global", "local" or None
        self.attn = SelfAttention(config, kind)
        self.mlp = make_mlp(config)

    def attend(self, x: torch.Tensor, start: int, rope: Rope, cache: Cache, recorder: Recorder | None) -> torch.Tensor:
        return self.attn(x, layer=self.layer, start=start, rope=rope, cache=cache, recorder=recorder)

    def forward(self, x: torch.Tensor, start: int, rope: Rope, cache: Cache, recorder: Recorder | None) -> torch.Tensor:
        raise NotImplementedError


class CausalBlock(DecoderBlock):
    """One pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)) (GPT-2, Llama and most others)."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__(config, kind)
        self.attn_norm = make_norm(config)
        self.mlp_norm = make_norm(config)

    def forward(self, x: torch.Tensor, start: int, rope: Rope, cache: Cache, recorder: Recorder | None) -> torch.Tensor:
        x = x + self.attend(self.attn_norm(x), start, rope, cache, recorder)
        return x + self.mlp(self.mlp_norm(x))


class ParallelBlock(CausalBlock):
    """GPT-NeoX (Pythia): attention and MLP both read the block's input: x + attn(norm1(x)) + mlp(norm2(x))."""

    def forward(self, x: torch.Tensor, start: int, rope: Rope, cache: Cache, recorder: Recorder | None) -> torch.Tensor:
        attn = self.attend(self.attn_norm(x), start, rope, cache, recorder)
        return self.mlp(self.mlp_norm(x)) + attn + x  # transformers' order of the sum


class PostNormBlock(CausalBlock):
    """Post-LN (OPT-350m, the original Transformer): x = norm(x + attn(x)); x = norm(x + mlp(x))."""

    def forward(self, x: torch.Tensor, start: int, rope: Rope, cache: Cache, recorder: Recorder | None) -> torch.Tensor:
        x = self.attn_norm(x + self.attend(x, start, rope, cache, recorder))
        return self.mlp_norm(x + self.mlp(x))


class SandwichBlock(CausalBlock):
    """Gemma 3: a norm before and after each sublayer: x + norm(attn(norm(x))), x + norm(mlp(norm(x)))."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__(config, kind)
        self.attn_out_norm = make_norm(config)
        self.mlp_out_norm = make_norm(config)

    def forward(self, x: torch.Tensor, start: int, rope: Rope, cache: Cache, recorder: Recorder | None) -> torch.Tensor:
        x = x + self.attn_out_norm(self.attend(self.attn_norm(x), start, rope, cache, recorder))
        return x + self.mlp_out_norm(self.mlp(self.mlp_norm(x)))


class OutputNormBlock(DecoderBlock):
    """OLMo 2: each sublayer reads the raw residual and its output is normalised: x + norm(attn(x))."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__(config, kind)
        self.attn_out_norm = make_norm(config)
        self.mlp_out_norm = make_norm(config)

    def forward(self, x: torch.Tensor, start: int, rope: Rope, cache: Cache, recorder: Recorder | None) -> torch.Tensor:
        x = x + self.attn_out_norm(self.attend(x, start, rope, cache, recorder))
        return x + self.mlp_out_norm(self.mlp(x))


def block_class(config: ModelConfig) -> type[DecoderBlock]:
    if config.parallel_residual:
        return ParallelBlock
    return {"pre": CausalBlock, "post": PostNormBlock, "sandwich": SandwichBlock, "output": OutputNormBlock}[
        config.norm_position
    ]


class DecoderLM(nn.Module):
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
        c, p = self.config, self.embed.weight
        if policy is not None:
            return PolicyCache(
                policy, layers=c.n_layers, batch=batch, kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                max_tokens=max_tokens, query_heads=c.n_heads, dtype=p.dtype, device=p.device,
                windows=[k.window for k in self.layer_kinds],
            )
        return KVCache(
            layers=c.n_layers, batch=batch, kv_heads=c.n_kv_heads, head_dim=c.head_dim, max_tokens=max_tokens,
            query_heads=c.n_heads, dtype=p.dtype, device=p.device, windows=[k.window for k in self.layer_kinds],
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
        rotary = cache.rotary if isinstance(cache, PolicyCache) else None  # a run's own rope_scaling
        limit = rotary.max_positions if rotary is not None else self.config.max_positions
        if start + T > limit:
            raise ValueError(f"sequence of {start + T} tokens exceeds the model's {limit} positions")
        x = self.embed(input_ids)  # (B, T, d_embed)
        if self.config.embed_scale != 1.0:
            # The scale rounded to the weights' dtype first, as transformers does for Gemma.
            x = x * torch.tensor(self.config.embed_scale, dtype=x.dtype)
        if self.project_in is not None:
            x = self.project_in(x)  # (B, T, d)
        if self.positions is not None:
            x = x + self.positions(start, T).to(x.dtype)
        ropes = {
            "global": self.rope(start, T, x.dtype, rotary) if self.rope is not None else None,
            "local": self.local_rope(start, T, x.dtype) if self.local_rope is not None else None,
            None: None,
        }
        if recorder is not None:
            recorder.record_residual(x)
        for block in self.blocks:
            x = block(x, start, ropes[block.rope_table], cache, recorder)
            if recorder is not None:
                recorder.record_residual(x)
        if last_only:
            x = x[:, -1:]
        return self.unembed(x)

    def forward_rows(self, segments: list[Segment]) -> list[torch.Tensor | None]:
        """One forward pass over several segments' tokens at once, each after its own cached positions,
        against its own cache: what `forward` computes for each alone, with every token a row of one
        (N, 1, d) batch. Returns each segment's logits as its `logits` asks."""
        for s in segments:
            if isinstance(s.self_cache, PolicyCache):
                raise ValueError("a run with its own KV policy or RoPE scaling takes its own turn, not a batched pass")
            if s.start + s.ids.shape[1] > self.config.max_positions:
                raise ValueError(f"sequence of {s.start + s.ids.shape[1]} tokens exceeds the model's "
                                 f"{self.config.max_positions} positions")
        rows = Rows(segments)
        x = self.embed(rows.ids())  # (N, 1, d_embed)
        if self.config.embed_scale != 1.0:
            x = x * torch.tensor(self.config.embed_scale, dtype=x.dtype)
        if self.project_in is not None:
            x = self.project_in(x)
        if self.positions is not None:
            x = x + rows.per_row([self.positions(s.start, s.ids.shape[1]) for s in segments])[:, None].to(x.dtype)
        ropes: dict[str | None, Rope] = {None: None}
        for name, rope in (("global", self.rope), ("local", self.local_rope)):
            if rope is not None:
                tables = [rope(s.start, s.ids.shape[1], x.dtype) for s in segments]
                cos = rows.per_row([c for c, _ in tables])[:, None, None]  # (N, 1, 1, r): one row per token
                sin = rows.per_row([sn for _, sn in tables])[:, None, None]
                ropes[name] = (cos, sin)
        rows.record_residual(x)
        for block in self.blocks:
            x = block(x, 0, ropes[block.rope_table], rows, None)
            rows.record_residual(x)
        return rows.logits(x, self.unembed)

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """Residual stream (B, T, d) -> logits (B, T, V): final norm, head, softcap, logit scale."""
        x = self.norm(x)
        if self.project_out is not None:
            x = self.project_out(x)  # (B, T, d_embed)
        logits = self.lm_head(x) if self.lm_head is not None else self.tied_head(x)
        cap = self.config.final_logit_softcap
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits * self.config.logit_scale if self.config.logit_scale != 1.0 else logits
