"""Steering vectors people can make, and mean activations for mean-ablation.

Three sources of a vector for `Steer(layer, vector, scale)`:
- a contrast pair of prompts (activation addition): the mean over positions of the residual stream
  after block `layer` on the positive prompt, minus the same mean on the negative prompt;
- a token's unembedding direction: the head's column for that token (the row of a tied embedding),
  the direction that raises that token's logit most per unit of length;
- another run's residual stream after block `layer` at the position that chose a step's token.

Each comes as a `SteeringVector` with its norm and the residual stream's typical norm at that layer
(the mean length of the residual after the block over the positions of a reference text), so that a
scale means something: scale 1 with a vector of norm 10 on a stream of typical norm 50 is a push of a
fifth of the stream's length.

`mean_ablation` measures a head's or an MLP's mean output over a prompt's positions, the fixed value
`Ablate(..., mode="mean")` puts in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from playground.interventions import Ablate, Intervention, Patch, Steer, as_interventions, check
from playground.loaded import LoadedModel
from playground.models.edits import BLOCK, blocks_of, edited, tapped


@dataclass(frozen=True)
class SteeringVector:
    """A direction in the residual stream after block `layer`, with the numbers that give a scale meaning."""

    layer: int
    vector: torch.Tensor  # (d_model,)
    norm: float
    typical_norm: float  # mean ‖residual after block `layer`‖ over the reference text's positions
    source: str  # how it was made, in words

    def steer(self, scale: float = 1.0) -> Steer:
        return Steer(self.layer, self.vector, scale=scale)

    @property
    def relative(self) -> float:
        """‖vector‖ / typical ‖residual‖: what scale 1 pushes, as a fraction of the stream's length."""
        return self.norm / self.typical_norm if self.typical_norm else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "norm": self.norm, "typical_norm": self.typical_norm, "source": self.source,
                "vector": self.vector.tolist()}


def _ids(lm: LoadedModel, prompt: str | Sequence[int]) -> list[int]:
    ids = lm.tokenize(prompt) if isinstance(prompt, str) else [int(i) for i in prompt]
    if not ids:
        raise ValueError("the prompt is empty; give it at least one token")
    bad = [i for i in ids if not 0 <= i < lm.config.vocab_size]
    if bad:
        raise ValueError(f"token id {bad[0]} is outside the vocabulary (0..{lm.config.vocab_size - 1})")
    return ids


def _check_layer(lm: LoadedModel, layer: int) -> None:
    if not isinstance(layer, int) or not 0 <= layer < lm.config.n_layers:
        raise ValueError(f"layer {layer!r} does not exist; this model has layers 0..{lm.config.n_layers - 1}")


def _decoder_ids(lm: LoadedModel, ids: list[int]) -> tuple[list[int] | None, list[int]]:
    """(source, decoder ids) of a prompt: a seq2seq model reads it with its encoder and decodes its prefix."""
    if lm.kind != "seq2seq":
        return None, ids
    from playground.generation.stepper import stepper_class

    return ids, stepper_class("seq2seq").decoder_prefix(lm.config, ids)


@torch.inference_mode()
def residual_after(
    lm: LoadedModel,
    ids: Sequence[int],
    layer: int,
    *,
    source_ids: Sequence[int] | None = None,
    interventions: Sequence[Intervention | dict] = (),
) -> torch.Tensor:
    """The decoder's residual stream after block `layer` at every position of `ids`, (T, d_model), float32.
    Seq2seq models decode `ids` against the encoding of `source_ids`."""
    _check_layer(lm, layer)
    edits = as_interventions(interventions)
    check(edits, lm.config)
    kept: list[torch.Tensor] = []
    with edited(lm.model, edits), tapped(lm.model, {(BLOCK, "decoder", layer): lambda x: kept.append(x[0].float())}):
        if lm.kind == "seq2seq":
            if source_ids is None:
                raise ValueError("a seq2seq model needs source_ids (what the encoder reads)")
            lm.logits([list(source_ids)], [list(ids)])
        else:
            lm.logits([list(ids)])
    return kept[-1]


def typical_norm(lm: LoadedModel, prompt: str | Sequence[int], layer: int) -> float:
    """Mean length of the residual stream after block `layer` over the prompt's positions."""
    source, ids = _decoder_ids(lm, _ids(lm, prompt))
    return float(residual_after(lm, ids, layer, source_ids=source).norm(dim=-1).mean())


def contrast_vector(
    lm: LoadedModel, positive: str | Sequence[int], negative: str | Sequence[int], layer: int
) -> SteeringVector:
    """Activation addition: mean residual after block `layer` over the positive prompt's positions minus
    the same over the negative prompt's. The typical norm is measured over both prompts' positions.
    Seq2seq models: the prompts are sources, the residual the decoder's over its start tokens."""
    pos_src, pos_ids = _decoder_ids(lm, _ids(lm, positive))
    neg_src, neg_ids = _decoder_ids(lm, _ids(lm, negative))
    pos = residual_after(lm, pos_ids, layer, source_ids=pos_src)
    neg = residual_after(lm, neg_ids, layer, source_ids=neg_src)
    vector = pos.mean(0) - neg.mean(0)
    typical = float(torch.cat([pos, neg]).norm(dim=-1).mean())
    return SteeringVector(layer, vector, float(vector.norm()), typical, "contrast pair")


@torch.inference_mode()
def token_vector(lm: LoadedModel, token_id: int, layer: int, reference: str | Sequence[int]) -> SteeringVector:
    """The unembedding direction of `token_id` (the head's column, or the tied embedding's row), with the
    typical residual norm after block `layer` over `reference` (e.g. the prompt to steer)."""
    _check_layer(lm, layer)
    if not isinstance(token_id, int) or not 0 <= token_id < lm.config.vocab_size:
        raise ValueError(f"token id {token_id!r} is outside the vocabulary (0..{lm.config.vocab_size - 1})")
    model = lm.model
    if getattr(model, "project_out", None) is not None:
        raise ValueError("this model's head reads a narrower projection of the residual stream, so a token's "
                         "unembedding direction is not a residual direction; steer from a contrast pair instead")
    if model.lm_head is not None:
        vector = model.lm_head.weight[:, token_id].float().clone()  # weight stored (d, V)
    else:
        vector = model.embed.weight[token_id].float().clone()
    return SteeringVector(layer, vector, float(vector.norm()), typical_norm(lm, reference, layer),
                          f"unembedding of token {token_id}")


def _step_ids(lm: LoadedModel, result: Any, step: int) -> tuple[list[int] | None, list[int]]:
    if not 0 <= int(step) < len(result.token_ids):
        raise ValueError(f"step {step} is outside that run's steps 0..{len(result.token_ids) - 1}")
    ids = list(result.decoder_prefix) + list(result.token_ids[:step])
    return (list(result.prompt_ids) if lm.kind == "seq2seq" else None), ids


def run_vector(lm: LoadedModel, result: Any, step: int, layer: int) -> SteeringVector:
    """Another run's residual after block `layer` at the position that chose its token at `step` (under
    that run's own edits); the typical norm over that run's sequence up to the step."""
    source, ids = _step_ids(lm, result, step)
    residual = residual_after(lm, ids, layer, source_ids=source, interventions=getattr(result, "interventions", ()))
    vector = residual[-1].clone()
    return SteeringVector(layer, vector, float(vector.norm()), float(residual.norm(dim=-1).mean()),
                          f"another run's residual at step {step}")


def patch_from_run(lm: LoadedModel, result: Any, step: int, layer: int) -> Patch:
    """A Patch that puts another run's residual after block `layer` (at the position that chose its token
    at `step`) into the same layer and position of a new run."""
    source, ids = _step_ids(lm, result, step)
    return Patch(layer, len(ids) - 1, run_vector(lm, result, step, layer).vector)


@torch.inference_mode()
def mean_ablation(
    lm: LoadedModel,
    prompt: str | Sequence[int],
    layer: int,
    *,
    head: int | None = None,
    component: str = "head",
    stack: str = "decoder",
    attention: str = "self",
) -> Ablate:
    """`Ablate(..., mode="mean")` with the part's mean output over the prompt's positions: the head's
    slice of the output projection's input (head_dim numbers) or the MLP's output (d_model)."""
    probe = Ablate(layer, head=head, component=component, stack=stack, attention=attention)
    check([probe], lm.config)
    source, ids = _decoder_ids(lm, _ids(lm, prompt))
    block = blocks_of(lm.model, stack)[layer]
    kept: list[torch.Tensor] = []
    if component == "head":
        attn = block.cross if attention == "cross" else block.attn
        d = attn.head_dim
        handle = attn.out.register_forward_pre_hook(
            lambda m, args: kept.append(args[0][0, :, head * d:(head + 1) * d].float()))
    else:
        handle = block.mlp.register_forward_hook(lambda m, a, out: kept.append(out[0].float()))
    try:
        if lm.kind == "seq2seq":
            lm.logits([source], [ids])
        else:
            lm.logits([ids])
    finally:
        handle.remove()
    mean = kept[0].mean(0)  # the first call: the encoder's pass for an encoder part, else the only one
    return Ablate(layer, head=head, component=component, mode="mean", mean=mean, stack=stack, attention=attention)
