"""T5 relative position bias: a learned scalar per head for each bucket of key-minus-query distance.

T5 adds no position vectors to the embeddings. Instead the first layer of each stack owns a table
`bias[bucket, head]`, and every layer of that stack adds `bias[bucket(j - i), h]` to the attention
score of query i and key j. Small distances get one bucket each; larger ones share logarithmically
wider buckets up to `max_distance`. The encoder is bidirectional (half the buckets for keys after the
query); the decoder is causal (only keys at or before the query have distinct buckets).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from playground.config import ModelConfig


def relative_position_bucket(
    relative_position: torch.Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """Bucket index in [0, num_buckets) of each relative position (key - query), exactly as T5/Mesh TF."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).to(torch.long) * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)
    # Half of the buckets are exact distances, the other half grow logarithmically up to max_distance.
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    large = max_exact + (
        torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """The per-stack bias table; `forward` gives the additive score bias (1, h, T, S)."""

    def __init__(self, config: ModelConfig, *, bidirectional: bool) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets, self.max_distance = config.relative_buckets, config.relative_max_distance
        self.embedding = nn.Embedding(config.relative_buckets, config.n_heads)  # (buckets, h)

    def buckets(self, queries: int, keys: int, *, start: int = 0, device: torch.device | None = None) -> torch.Tensor:
        """(T, S) bucket indices for queries at positions [start, start + T) and keys at [0, S)."""
        q_pos = torch.arange(start, start + queries, dtype=torch.long, device=device)[:, None]
        k_pos = torch.arange(keys, dtype=torch.long, device=device)[None, :]
        return relative_position_bucket(
            k_pos - q_pos, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance
        )

    def forward(self, queries: int, keys: int, *, start: int = 0) -> torch.Tensor:
        buckets = self.buckets(queries, keys, start=start, device=self.embedding.weight.device)
        return self.embedding(buckets).permute(2, 0, 1).unsqueeze(0)  # (1, h, T, S)
