"""Turning what a forward pass recorded into per-step numbers (numpy), only when a run asks for it.

The engine decides per step what to record (`recorder_for`); after the pass it keeps, for each row
of the batch, the attention row of the query that chose the next token and its residual stream.
"""

from __future__ import annotations

import numpy as np
import torch

from playground.generation.config import GenerationConfig
from playground.generation.events import AttentionRows
from playground.models.recorder import Recorder


def recorder_for(cfg: GenerationConfig, prefill: bool) -> Recorder | None:
    """What this forward pass records, or None for the fast path."""
    attention = cfg.capture_attention or (prefill and cfg.capture_prompt_attention)
    if not (attention or cfg.capture_residual):
        return None
    return Recorder(cfg.attention_layers if attention else (), residual=cfg.capture_residual)


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.float().cpu().numpy()


def last_rows(recorder: Recorder, kinds: tuple[str, ...], n_layers: int) -> AttentionRows:
    """Per kind and layer, the last query's attention (B, h, S) of every batch row (None: not recorded)."""
    out: AttentionRows = {}
    for kind in kinds:
        layers = recorder.layers_of(kind, n_layers)
        # contiguous(): a prefill's last row is a strided view; copying it lets the (h, P, P) map go.
        out[kind] = [None if w is None else _numpy(w[:, :, -1].contiguous()) for w in layers]
    return out


def residual_rows(recorder: Recorder) -> np.ndarray | None:
    """(B, L + 1, d): each row's residual stream at its last position, or None when not recorded."""
    if not recorder.residual:
        return None
    return _numpy(torch.stack(recorder.residual, dim=1))


def prompt_maps(recorder: Recorder, n_layers: dict[str, int]) -> dict[str, list[np.ndarray | None]]:
    """The prefill's full attention of batch row 0: kind -> per layer (h, T, S)."""
    return {
        kind: [None if w is None else _numpy(w[0]) for w in recorder.layers_of(kind, count)]
        for kind, count in n_layers.items()
        if kind in recorder.attention
    }


def pick_row(rows: AttentionRows | None, row: int) -> AttentionRows | None:
    """One batch row of `last_rows` (a prefill recorded with batch 1 serves every beam)."""
    if rows is None:
        return None
    return {kind: [None if w is None else w[min(row, w.shape[0] - 1)] for w in layers] for kind, layers in rows.items()}


def pick_residual(residual: np.ndarray | None, row: int) -> np.ndarray | None:
    return None if residual is None else residual[min(row, residual.shape[0] - 1)]
