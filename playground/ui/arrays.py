"""Numbers the panels plot, taken from a loaded model as numpy arrays (torch in, numpy out).

- `attention_maps`: one forward pass over the final sequence with attention capture, so every
  head's full map (prompt and generated tokens) is available after a generation.
- `positional_data`: the positional scheme the model really uses (its own tables, frequencies and
  learned weights). No Gradio here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from playground.loaded import LoadedModel
from playground.models.positional import rope_inverse_frequencies, sinusoidal_table
from playground.models.relative_bias import RelativePositionBias, relative_position_bucket

ATTENTION_BUDGET_BYTES = 96 * 2**20  # all captured maps of one run, float32


def attention_budget_tokens(lm: LoadedModel) -> int:
    """The longest sequence whose full attention maps (all layers and heads) fit the budget."""
    c = lm.config
    layers = c.n_layers + (c.n_encoder_layers if lm.kind == "seq2seq" else 0) * 2
    return max(8, int(math.sqrt(ATTENTION_BUDGET_BYTES / (4 * max(1, layers) * c.n_heads))))


def _stack(maps: list[torch.Tensor]) -> np.ndarray:
    # per layer (1, h, T, S) -> (L, h, T, S)
    return torch.stack([m[0] for m in maps]).float().cpu().numpy()


@torch.inference_mode()
def attention_maps(lm: LoadedModel, prompt_ids: list[int], generated_ids: list[int]) -> dict[str, np.ndarray]:
    """Full attention of the final sequence.

    decoder: {"self": (L, h, T, T)} over prompt + generated;
    seq2seq: {"encoder": (L_e, h, S, S), "self": (L, h, T, T), "cross": (L, h, T, S)} with the
    decoder sequence = start token(s) + generated.
    """
    device = lm.device
    if lm.kind == "seq2seq":
        src = torch.tensor([prompt_ids], device=device)
        enc_capture: list[torch.Tensor] = []
        enc = lm.model.encode(src, None, capture=enc_capture)
        dec_ids = torch.tensor([decoder_tokens(lm, generated_ids)], device=device)
        dec_capture: dict[str, list[torch.Tensor]] = {"self": [], "cross": []}
        lm.model.decode(dec_ids, enc, None, None, capture=dec_capture)
        return {"encoder": _stack(enc_capture), "self": _stack(dec_capture["self"]),
                "cross": _stack(dec_capture["cross"])}
    ids = torch.tensor([list(prompt_ids) + list(generated_ids)], device=device)
    capture: list[torch.Tensor] = []
    lm.model(ids, None, capture)
    return {"self": _stack(capture)}


def decoder_tokens(lm: LoadedModel, generated_ids: list[int]) -> list[int]:
    """The seq2seq decoder's input: its start token then what it generated."""
    start = lm.config.decoder_start_token_id
    if start is None:
        start = lm.config.pad_token_id if lm.config.pad_token_id is not None else 0
    return [int(start)] + [int(i) for i in generated_ids]


def token_texts(lm: LoadedModel, ids: list[int]) -> list[str]:
    """Each id decoded on its own (what a heatmap axis shows)."""
    return [lm.decode([int(i)]) for i in ids]


# --- positional encodings -----------------------------------------------------------------------


def _position_embedding(model: nn.Module) -> nn.Embedding | None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and "position" in name.lower():
            return module
    return None


def _relative_bias(model: nn.Module) -> tuple[str, RelativePositionBias] | None:
    for name, module in model.named_modules():
        if isinstance(module, RelativePositionBias):
            return name, module
    return None


@torch.inference_mode()
def positional_data(lm: LoadedModel, length: int, compare_base: float = 1000.0) -> dict[str, Any]:
    """What the PE panel draws for this model's scheme; "scheme" says which keys are present.

    sinusoidal: table (P, d_model) at the model's base and at `compare_base`;
    rope: inv_freq (d_head/2,), context length; learned: the real table (P, d) (offset applied);
    relative: bias (h, R) over distances R for the first layer's bias table.
    """
    c = lm.config
    length = int(max(2, min(length, c.max_positions)))
    scheme = c.positional
    out: dict[str, Any] = {"scheme": scheme, "length": length}
    if scheme == "sinusoidal":
        layout = getattr(c, "sinusoidal_layout", "interleaved")
        out["table"] = sinusoidal_table(length, c.d_model, c.sinusoidal_base, layout).numpy()
        out["compare_table"] = sinusoidal_table(length, c.d_model, compare_base, layout).numpy()
        out["layout"] = layout
        out["base"], out["compare_base"] = c.sinusoidal_base, compare_base
    elif scheme == "rope":
        out["inv_freq"] = rope_inverse_frequencies(c).double().numpy()
        out["context"] = c.max_positions
        out["head_dim"] = c.head_dim
    elif scheme == "learned":
        emb = _position_embedding(lm.model)
        if emb is None:
            out["scheme"], out["missing"] = "none", "no learned position table found in this model"
        else:
            start = c.learned_position_offset
            out["table"] = emb.weight[start:start + length].float().cpu().numpy()
    elif scheme == "relative":
        found = _relative_bias(lm.model)
        if found is None:
            out["scheme"], out["missing"] = "none", "no relative attention bias table found in this model"
        else:
            name, module = found
            span = min(length, c.relative_max_distance * 2)
            distances = torch.arange(-span, span + 1)
            buckets = relative_position_bucket(distances, bidirectional=module.bidirectional,
                                               num_buckets=module.num_buckets, max_distance=module.max_distance)
            out["bias"] = module.embedding.weight[buckets].T.float().cpu().numpy()  # (h, R)
            out["distances"] = distances.numpy()
            out["table_name"] = name
    return out
