"""Drafters for speculative decoding: who proposes the next few tokens that one pass of the model checks.

- `NgramDrafter` (prompt lookup): the last n tokens occurred earlier in the prompt or the output; propose
  what followed them there. No model at all; its q is one-hot on what it proposes.
- `ModelDrafter`: a model with its own KV cache drafts token by token under the run's own processors:
  a second loaded model with the same vocabulary, or the target's first K layers read through its final
  norm and head (the logit lens: `first_layers`, sharing the target's weights).

A drafter only proposes; `speculative` decides what is kept. Drafts never change the run's tokens.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from playground.generation.processors import Pipeline
from playground.models.kv_cache import KVCache

MAX_NGRAM = 3  # the longest suffix looked up (then shorter ones, down to one token)


@dataclass
class Draft:
    """Proposed tokens and, for a model drafter, its distribution at each (k, V): q after the run's processors."""

    tokens: list[int]
    q: torch.Tensor | None = None  # None: one-hot on each token (prompt lookup)


class NgramDrafter:
    name = "ngram"

    def propose(self, sequence: torch.Tensor, k: int, pipeline: Pipeline, generator: torch.Generator | None) -> Draft:
        """Up to k tokens that followed the latest earlier occurrence of the sequence's last n tokens
        (the longest n ≤ MAX_NGRAM that occurred); nothing when no suffix occurred before."""
        ids = sequence[0].tolist()
        for n in range(min(MAX_NGRAM, len(ids) - 1), 0, -1):
            suffix = ids[-n:]
            for start in range(len(ids) - n - 1, -1, -1):  # latest first, never the suffix itself
                if ids[start : start + n] == suffix:
                    follow = ids[start + n : start + n + k]
                    return Draft(follow)
        return Draft([])


class ModelDrafter:
    """Drafts with `module` (a DecoderLM, or a view of the target's first layers) and a cache of its own.

    The cache keeps the tokens it was fed; each round rewinds it to what the new sequence still shares with
    them (the accepted drafts stay) and feeds the rest in one pass, then one token per drafted position."""

    def __init__(self, name: str, module: nn.Module, layers: int, max_tokens: int) -> None:
        self.name, self.module = name, module
        self.max_tokens = min(max_tokens, module.config.max_positions)
        self.cache = rewindable_cache(module, layers, 1, self.max_tokens)
        self.fed: list[int] = []

    def propose(self, sequence: torch.Tensor, k: int, pipeline: Pipeline, generator: torch.Generator | None) -> Draft:
        ids = sequence[0].tolist()
        k = min(k, self.max_tokens - len(ids) + 1)  # its own context and cache bound the draft
        if k <= 0:
            return Draft([])
        shared = 0
        for a, b in zip(self.fed, ids):
            if a != b:
                break
            shared += 1
        shared = min(shared, len(ids) - 1)  # the last token is fed again: its logits start the draft
        self.cache.rewind(shared)
        self.fed = ids[:shared]
        device = self.module.device
        feed = torch.tensor([ids[shared:]], dtype=torch.long, device=device)
        tokens, dists = [], []
        prefix = sequence
        for _ in range(k):
            logits = self.module(feed, self.cache, None, last_only=True)[:, -1].float().to(sequence.device)  # (1, V)
            self.fed += feed[0].tolist()
            scores = pipeline.run(prefix, logits)
            probs = torch.softmax(scores, dim=-1)
            if pipeline.sampling:
                token = int(torch.multinomial(probs, 1, generator=generator))
            else:
                token = int(torch.argmax(scores, dim=-1))
            tokens.append(token)
            dists.append(probs[0])
            prefix = torch.cat((prefix, prefix.new_tensor([[token]])), dim=1)
            feed = torch.tensor([[token]], dtype=torch.long, device=device)
        return Draft(tokens, torch.stack(dists))


def first_layers(model: nn.Module, k: int) -> nn.Module:
    """The model's first k blocks then its own final norm and head: a view sharing every weight.

    Its forward is the model's own code (embedding, positions, blocks, `unembed`) over fewer blocks, so its
    next-token distribution is the logit lens at layer k (`playground.analysis.logit_lens`, row k)."""
    view = copy.copy(model)  # a shallow copy: the same parameters and buffers
    view.__dict__["_modules"] = dict(model._modules)
    view.__dict__["_modules"]["blocks"] = nn.ModuleList(list(model.blocks)[:k])
    return view


def rewindable_cache(module: nn.Module, layers: int, batch: int, max_tokens: int) -> KVCache:
    """A KV cache that can rewind: every layer stores all its positions (no sliding-window rings: a ring
    overwrites positions that a rejected draft would need back; attention still applies each layer's window)."""
    c = module.config
    return KVCache(
        layers=layers, batch=batch, kv_heads=c.n_kv_heads, head_dim=c.head_dim, max_tokens=max_tokens,
        query_heads=c.n_heads, dtype=module.dtype, device=module.device,
    )
