"""Why this token: direct logit attribution, exact, through norms frozen at the step's own scale.

At the position that chose a token, the residual stream entering the final norm is a sum of parts:
the token embedding, the position embedding, each attention head (its slice of the output projection
`z_h · W_O[h]`), each attention output bias, each MLP (its output minus its output bias), each MLP bias.
A norm divides by a statistic of its input (LayerNorm also subtracts the mean); frozen at the value
that statistic had at this step, a norm is a linear map (plus its own bias, one more part), so every
part can be carried through it to the logit: `logit = Σ parts`, exactly, up to float rounding.

Per block kind:
- pre-norm and parallel residual (GPT-2, Llama, GPT-NeoX, GPT-J style): the block adds its parts;
- post-norm (OPT-350m, BART, Marian, the original Transformer): `norm(x + sublayer)` renormalises the
  whole stream, so every earlier part goes through each frozen norm after it, and the norm's bias
  joins as a part of that layer;
- sandwich / output norms (Gemma 3, OLMo 2): the sublayer's output is normalised before it is added,
  so its heads (or MLP) are carried through that frozen norm.
This is what "direct" means: each part is what it adds to the logit along the residual stream, with
every norm's scale taken as it was; a head's indirect effect through later layers is not counted
(an ablation measures that: `playground.analysis.divergence.head_sweep`).

Edits of a run (playground.interventions) are honoured: an ablated head or MLP contributes what the
edit left (zero, or its mean), a steering vector is a part of its own, and a patch at the attributed
position replaces every part before it by one part, the patched value.

A final logit softcap (tanh, Gemma 2 style) is not linear: the parts then sum to the logit before the cap
(`Attribution.softcapped` says so). Logits are compared in float64 from the model's float32 activations.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from playground.interventions import Ablate, Intervention, Patch, Steer, as_interventions, check
from playground.loaded import LoadedModel
from playground.models.decoder import OutputNormBlock, ParallelBlock, PostNormBlock, SandwichBlock
from playground.models.edits import CROSS_HEADS, HEADS, MLP, blocks_of, edited, tapped
from playground.models.layers import Float32RMSNorm, RMSNorm

Key = tuple[Any, ...]


@dataclass
class Attribution:
    """The parts of one logit (or of a logit difference, with `versus_id`) at one position.

    heads (L, H): decoder self-attention heads; cross_heads (L, H) for seq2seq decoders; mlps (L,);
    other: the remaining parts summed by kind (embeddings, positions, biases, steering, patch);
    parts: every part with its key, e.g. ("head", "self", layer, head), ("mlp_bias", layer).
    """

    token_id: int
    versus_id: int | None
    logit: float  # the model's own logit (difference) at this position, before any softcap
    heads: np.ndarray
    mlps: np.ndarray
    cross_heads: np.ndarray | None
    other: dict[str, float]
    parts: list[tuple[Key, float]] = field(repr=False)
    softcapped: bool = False

    @property
    def total(self) -> float:
        """Σ parts: equals `logit` up to float rounding."""
        return float(sum(v for _, v in self.parts))

    def to_dict(self) -> dict[str, Any]:
        return {
            "token_id": self.token_id, "versus_id": self.versus_id, "logit": self.logit, "total": self.total,
            "heads": self.heads.tolist(), "mlps": self.mlps.tolist(),
            "cross_heads": None if self.cross_heads is None else self.cross_heads.tolist(),
            "other": dict(self.other), "softcapped": self.softcapped,
        }


OTHER_KINDS = {  # part kind -> the `other` entry it is summed into
    "embed": "embeddings", "project_in_bias": "embeddings", "positions": "positions",
    "attn_bias": "attention biases", "mlp_bias": "MLP biases", "norm_bias": "norm biases",
    "embed_norm_bias": "norm biases", "final_norm_bias": "norm biases", "project_out_bias": "head biases",
    "head_bias": "head biases", "logits_bias": "head biases", "steer": "steering", "patch": "patch",
}


class _Parts:
    """Rows of vectors (n, d) in float64 that sum to the residual stream at one position, with keys."""

    def __init__(self, d: int, device: torch.device) -> None:
        self.keys: list[Key] = []
        self.rows: list[torch.Tensor] = []
        self.d = d
        self.device = device  # the model's: every part lives there

    def add(self, key: Key, vector: torch.Tensor) -> None:
        self.keys.append(key)
        self.rows.append(vector.double().reshape(self.d))

    def extend(self, other: _Parts) -> None:
        self.keys += other.keys
        self.rows += other.rows

    def matrix(self) -> torch.Tensor:
        return torch.stack(self.rows) if self.rows else torch.zeros(0, self.d, dtype=torch.float64, device=self.device)

    def total(self) -> torch.Tensor:
        return self.matrix().sum(0)

    def set_matrix(self, m: torch.Tensor) -> None:
        self.rows = list(m.unbind(0))

    def through_norm(self, norm: nn.Module, key: Key) -> None:
        """Carry every part through `norm` frozen at the scale of the parts' sum; its bias is a new part."""
        if isinstance(norm, nn.Identity):
            return
        m = self.matrix()
        y = m.sum(0)
        if isinstance(norm, nn.LayerNorm):
            var = (y - y.mean()).pow(2).mean()
            m = (m - m.mean(-1, keepdim=True)) / torch.sqrt(var + norm.eps)
            if norm.weight is not None:
                m = m * norm.weight.double()
            self.set_matrix(m)
            if norm.bias is not None:
                self.add(key, norm.bias)
            return
        if isinstance(norm, (RMSNorm, Float32RMSNorm)):
            scale = norm.weight.double() + getattr(norm, "offset", 0.0)
            self.set_matrix(m / torch.sqrt(y.pow(2).mean() + norm.eps) * scale)
            return
        raise ValueError(f"direct logit attribution cannot carry parts through a {type(norm).__name__}")

    def through_linear(self, linear: nn.Module, key: Key) -> None:
        """Our Linear (weight stored (in, out)): every part times W; the bias is a new part."""
        self.rows = list((self.matrix() @ linear.weight.double()).unbind(0))
        self.d = linear.weight.shape[1]
        if linear.bias is not None:
            self.add(key, linear.bias)


class _Capture:
    """Taps (and a hook on the absolute positions) that keep, at one row of the sequence, what the parts are made
    of."""

    def __init__(self, row: int) -> None:
        self.row = row
        self.values: dict[Key, torch.Tensor] = {}

    def keep(self, key: Key, tensor: torch.Tensor) -> None:
        if tensor.dim() == 3:
            tensor = tensor[0]
        self.values[key] = tensor[self.row].detach().double()

    def install(self, stack: ExitStack, model: nn.Module, blocks: nn.ModuleList, positions: nn.Module | None) -> None:
        # what the model's pass holds at each site, its edits applied (an ablated head or MLP adds nothing): the
        # heads before each output projection, each MLP's output
        taps = {}
        for i, block in enumerate(blocks):
            taps[HEADS, "decoder", i] = lambda z, i=i: self.keep(("z", "self", i), z)
            if hasattr(block, "cross"):
                taps[CROSS_HEADS, "decoder", i] = lambda z, i=i: self.keep(("z", "cross", i), z)
            taps[MLP, "decoder", i] = lambda y, i=i: self.keep(("mlp", i), y)
        stack.enter_context(tapped(model, taps))
        if positions is not None:
            handle = positions.register_forward_hook(lambda m, a, out: self.keep(("positions",), out))
            stack.callback(handle.remove)


def _head_parts(attn: nn.Module, z: torch.Tensor, kind: str, layer: int, into: _Parts) -> None:
    d = attn.head_dim
    w = attn.out.weight.double()  # (h·d, d_model)
    for h in range(attn.n_heads):
        into.add(("head", kind, layer, h), z[h * d:(h + 1) * d] @ w[h * d:(h + 1) * d])
    if attn.out.bias is not None:
        into.add(("attn_bias", kind, layer), attn.out.bias)


def _mlp_parts(mlp: nn.Module, out: torch.Tensor, layer: int, ablated: bool, into: _Parts) -> None:
    bias = getattr(getattr(mlp, "down", None) or getattr(mlp, "fc2", None), "bias", None)
    if bias is None or ablated:  # an ablated MLP adds exactly what the edit left
        into.add(("mlp", layer), out)
        return
    into.add(("mlp", layer), out - bias.double())
    into.add(("mlp_bias", layer), bias)


def _decoder_block(block: nn.Module, i: int, cap: _Capture, parts: _Parts, mlp_ablated: bool) -> None:
    attn = _Parts(parts.d, parts.device)
    _head_parts(block.attn, cap.values[("z", "self", i)], "self", i, attn)
    mlp = _Parts(parts.d, parts.device)
    _mlp_parts(block.mlp, cap.values[("mlp", i)], i, mlp_ablated, mlp)
    if isinstance(block, (SandwichBlock, OutputNormBlock)):
        attn.through_norm(block.attn_out_norm, ("norm_bias", i, "attention output"))
        mlp.through_norm(block.mlp_out_norm, ("norm_bias", i, "MLP output"))
        parts.extend(attn)
        parts.extend(mlp)
    elif isinstance(block, PostNormBlock):
        parts.extend(attn)
        parts.through_norm(block.attn_norm, ("norm_bias", i, "after attention"))
        parts.extend(mlp)
        parts.through_norm(block.mlp_norm, ("norm_bias", i, "after MLP"))
    else:  # pre-norm, and parallel residual: both sublayers add to the stream
        assert isinstance(block, ParallelBlock) or type(block).__name__ == "CausalBlock", type(block)
        parts.extend(attn)
        parts.extend(mlp)


def _cross_block(block: nn.Module, i: int, cap: _Capture, parts: _Parts, mlp_ablated: bool) -> None:
    for kind, attn, norm in (("self", block.attn, block.attn_norm), ("cross", block.cross, block.cross_norm)):
        _head_parts(attn, cap.values[("z", kind, i)], kind, i, parts)
        if not block.pre:
            parts.through_norm(norm, ("norm_bias", i, f"after {kind}-attention"))
    _mlp_parts(block.mlp, cap.values[("mlp", i)], i, mlp_ablated, parts)
    if not block.pre:
        parts.through_norm(block.mlp_norm, ("norm_bias", i, "after MLP"))


def _edits_after(parts: _Parts, edits: Sequence[Intervention], layer: int, position: int) -> None:
    """Steering and patching of the decoder stream after block `layer`, in the order they were applied.
    The edits hold Python floats: their parts are built on the model's device, beside the others."""
    for iv in edits:
        if iv.stack != "decoder" or iv.layer != layer:
            continue
        if isinstance(iv, Steer):
            parts.add(("steer", layer), torch.tensor(iv.vector, dtype=torch.float64, device=parts.device) * iv.scale)
        elif isinstance(iv, Patch) and iv.position == position:
            parts.keys, parts.rows = [], []
            parts.add(("patch", layer), torch.tensor(iv.value, dtype=torch.float64, device=parts.device))


@torch.inference_mode()
def attribute(
    lm: LoadedModel,
    ids: Sequence[int],
    token_id: int,
    *,
    versus_id: int | None = None,
    source_ids: Sequence[int] | None = None,
    interventions: Sequence[Intervention | dict] = (),
) -> Attribution:
    """Split the logit of `token_id` at the last position of `ids` into its parts (with `versus_id`,
    the logit difference token − versus). `ids`: the decoder stream (decoder-only: prompt + generated
    so far; seq2seq: decoder prefix + generated, with the encoder reading `source_ids`)."""
    edits = as_interventions(interventions)
    check(edits, lm.config)
    model, c = lm.model, lm.config
    seq2seq = lm.kind == "seq2seq"
    if seq2seq and source_ids is None:
        raise ValueError("a seq2seq model needs source_ids (what the encoder reads) as well as the decoder ids")
    for t in (token_id, versus_id):
        if t is not None and not 0 <= int(t) < c.vocab_size:
            raise ValueError(f"token id {t} is outside the vocabulary (0..{c.vocab_size - 1})")
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("attribution needs at least one token in the sequence")
    row = len(ids) - 1
    device = lm.device
    stream = model.decoder if seq2seq else model
    blocks = blocks_of(model, "decoder")
    cap = _Capture(row)
    with ExitStack() as stack:
        stack.enter_context(edited(model, edits))
        x = torch.tensor([ids], device=device)
        if seq2seq:
            encoded = model.encode(torch.tensor([list(source_ids)], device=device))
            cap.install(stack, model, blocks, stream.positions)
            logits = model.decode(x, encoded)
        else:
            cap.install(stack, model, blocks, stream.positions)
            logits = model(x)
    logits = logits[0, row].double()

    d_embed = model.embed.weight.shape[1]
    parts = _Parts(d_embed, model.embed.weight.device)
    scale = c.embed_scale
    emb = model.embed.weight[ids[row]]
    if scale != 1.0:  # as the models scale it: Gemma rounds the scale to the weights' dtype first
        emb = emb * (torch.tensor(scale, dtype=emb.dtype, device=emb.device) if not seq2seq else scale)
    parts.add(("embed",), emb)
    if not seq2seq and model.project_in is not None:
        parts.through_linear(model.project_in, ("project_in_bias",))
    if ("positions",) in cap.values:
        parts.add(("positions",), cap.values[("positions",)])
    if seq2seq and stream.embed_norm is not None:
        parts.through_norm(stream.embed_norm, ("embed_norm_bias",))
    ablated_mlps = {iv.layer for iv in edits if isinstance(iv, Ablate) and iv.component == "mlp" and iv.stack == "decoder"}
    for i, block in enumerate(blocks):
        (_cross_block if seq2seq else _decoder_block)(block, i, cap, parts, i in ablated_mlps)
        _edits_after(parts, edits, i, row)

    # The head: final norm, (projection out), unembedding column, biases, scale.
    final_norm = (stream.norm or nn.Identity()) if seq2seq else model.norm
    parts.through_norm(final_norm, ("final_norm_bias",))
    if not seq2seq and model.project_out is not None:
        parts.through_linear(model.project_out, ("project_out_bias",))
    weight, bias = (model.lm_head.weight, model.lm_head.bias) if model.lm_head is not None else (model.embed.weight.t(), None)
    column = weight[:, token_id].double()
    scalar: list[tuple[Key, float]] = []
    if bias is not None:
        scalar.append((("head_bias",), float(bias[token_id])))
    extra = getattr(model, "final_logits_bias", None)
    if extra is not None:
        scalar.append((("logits_bias",), float(extra[0, token_id])))
    if versus_id is not None:
        column = column - weight[:, versus_id].double()
        if bias is not None:
            scalar[0] = (("head_bias",), scalar[0][1] - float(bias[versus_id]))
        if extra is not None:
            scalar[-1] = (("logits_bias",), scalar[-1][1] - float(extra[0, versus_id]))
    multiplier = c.logit_scale
    values = (parts.matrix() @ column) * multiplier
    contributions = [(k, float(v)) for k, v in zip(parts.keys, values.tolist())]
    # Seq2seq scales before the head (T5), decoders after it: either way the head's biases are outside.
    contributions += [(k, v * (1.0 if seq2seq else multiplier)) for k, v in scalar]

    softcap = None if seq2seq else c.final_logit_softcap
    model_logit = logits[token_id] - (logits[versus_id] if versus_id is not None else 0.0)
    if softcap is not None:  # undo the cap: the parts are linear up to it
        def uncap(v: torch.Tensor) -> torch.Tensor:
            return torch.atanh((v / c.logit_scale / softcap).clamp(-1 + 1e-12, 1 - 1e-12)) * softcap * c.logit_scale
        model_logit = uncap(logits[token_id]) - (uncap(logits[versus_id]) if versus_id is not None else 0.0)
    return _summarise(lm, int(token_id), versus_id, float(model_logit), contributions, softcap is not None)


def _summarise(lm: LoadedModel, token_id: int, versus_id: int | None, logit: float,
               contributions: list[tuple[Key, float]], softcapped: bool) -> Attribution:
    c = lm.config
    heads = np.zeros((c.n_layers, c.n_heads))
    cross = np.zeros((c.n_layers, c.n_heads)) if lm.kind == "seq2seq" else None
    mlps = np.zeros(c.n_layers)
    other: dict[str, float] = {}
    for key, value in contributions:
        if key[0] == "head":
            (heads if key[1] == "self" else cross)[key[2], key[3]] += value
        elif key[0] == "mlp":
            mlps[key[1]] += value
        else:
            name = OTHER_KINDS[key[0]]
            other[name] = other.get(name, 0.0) + value
    return Attribution(token_id, None if versus_id is None else int(versus_id), logit, heads, mlps, cross, other,
                       contributions, softcapped)


def runner_up(lm: LoadedModel, ids: Sequence[int], token_id: int, *, source_ids: Sequence[int] | None = None,
              interventions: Sequence[Intervention | dict] = ()) -> int:
    """The token with the highest raw logit other than `token_id` at the last position of `ids`."""
    if lm.kind == "seq2seq":
        logits = lm.logits([list(source_ids)], [list(ids)], interventions=interventions)[0, -1]
    else:
        logits = lm.logits([list(ids)], interventions=interventions)[0, -1]
    top = torch.topk(logits, 2).indices.tolist()
    return top[1] if top[0] == token_id else top[0]


def attribute_step(lm: LoadedModel, result: Any, step: int, *, versus: int | str | None = None) -> Attribution:
    """Attribution of the token a recorded run (GenerationResult) chose at `step`, under the run's own
    edits. `versus`: a token id, "runner-up" (the highest other raw logit), or None."""
    if not 0 <= int(step) < len(result.token_ids):
        raise ValueError(f"step {step} is outside this run's steps 0..{len(result.token_ids) - 1}")
    ids = list(result.decoder_prefix) + list(result.token_ids[:step])
    source = list(result.prompt_ids) if lm.kind == "seq2seq" else None
    edits = as_interventions(getattr(result, "interventions", ()))
    token = int(result.token_ids[step])
    if versus == "runner-up":
        versus = runner_up(lm, ids, token, source_ids=source, interventions=edits)
    return attribute(lm, ids, token, versus_id=versus, source_ids=source, interventions=edits)
