"""What a forward pass records when asked: attention weights of chosen layers, the residual stream.

Models take an optional `Recorder`. Without one nothing is recorded and every layer attends on the
fast SDPA path; with one, only the layers it asks for compute the explicit softmax to keep their
weights. The recorder is a plain container: it holds tensors, the caller turns them into numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

ATTENTION_KINDS = ("self", "cross", "encoder")  # decoder self-attention, decoder → source, encoder


class Recorder:
    """Collects attention weights (B, h, T, S) per kind and layer, and the residual stream.

    layers: the layer indices whose attention to keep (None: every layer; empty: none).
    residual: keep the residual stream of the last position after the embedding and after each
    block of the decoder stack, (B, d) each: what a logit lens reads.
    """

    def __init__(
        self, layers: Iterable[int] | None = None, *, residual: bool = False, internals: Iterable[int] = ()
    ) -> None:
        self.layers = None if layers is None else frozenset(int(i) for i in layers)
        self.keep_residual = residual
        self.internals_layers = frozenset(int(i) for i in internals)
        self.attention: dict[str, dict[int, torch.Tensor]] = {}
        self.residual: list[torch.Tensor] = []
        self.internals: dict[str, dict[int, dict[str, torch.Tensor]]] = {}

    def wants(self, layer: int) -> bool:
        """Whether this layer's attention weights are to be kept (the layer then skips SDPA)."""
        return self.layers is None or layer in self.layers

    def wants_internals(self, layer: int) -> bool:
        """Whether this layer's attention internals (q, k, v as attended, the output) are to be kept."""
        return layer in self.internals_layers

    def record_internals(self, kind: str, layer: int, **tensors: torch.Tensor) -> None:
        """q (B, h, T, d) after any norm and rotation, k and v (B, h_kv, S, d) as attended (cache
        included; on a sliding-window layer only the S positions its window reaches, the last ones),
        output (B, T, d_model) after the output projection; merged with what the layer recorded before."""
        self.internals.setdefault(kind, {}).setdefault(layer, {}).update(tensors)

    def record_attention(self, kind: str, layer: int, weights: torch.Tensor) -> None:
        self.attention.setdefault(kind, {})[layer] = weights

    def record_residual(self, x: torch.Tensor) -> None:
        """x: (B, T, d) hidden states; the last position is kept."""
        if self.keep_residual:
            self.residual.append(x[:, -1])

    def layers_of(self, kind: str, n_layers: int) -> list[torch.Tensor | None]:
        """The recorded weights of `kind` as a list indexed by layer (None where not recorded)."""
        found = self.attention.get(kind, {})
        return [found.get(i) for i in range(n_layers)]

