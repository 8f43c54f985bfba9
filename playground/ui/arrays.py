"""Numbers the panels plot, taken from a loaded model as numpy arrays (torch in, numpy out).

- `positional_data`: the positional scheme the model really uses (its own tables, frequencies and
  learned weights). No Gradio here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from playground.loaded import LoadedModel
from playground.models.positional import position_vectors, rope_inverse_frequencies
from playground.models.relative_bias import RelativePositionBias, relative_position_bucket

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

    sinusoidal: table (P, d_model) at the model's base and at `compare_base`, as the model adds them to
    positions 0..P-1 (`first_row`: the table row of position 0, pad + 1 for fairseq's layout);
    rope: inv_freq (d_head/2,), context length; learned: the real table (P, d) (offset applied);
    relative: bias (h, R) over distances R for the first layer's bias table.
    """
    c = lm.config
    length = int(max(2, min(length, c.max_positions)))
    scheme = c.positional
    out: dict[str, Any] = {"scheme": scheme, "length": length}
    if scheme == "sinusoidal":
        # What the model adds at positions 0..length-1 (fairseq models read their table from row pad + 1).
        out["table"] = position_vectors(c, length).numpy()
        out["compare_table"] = position_vectors(c, length, compare_base).numpy()
        out["layout"] = c.sinusoidal_layout
        out["first_row"] = c.pad_token_id + 1 if c.sinusoidal_layout == "fairseq" else 0
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
