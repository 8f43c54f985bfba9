"""Declarative weight maps: how a family's tensor names become our state dict.

A `Rule` names one of our parameters and the checkpoint tensors it is made from. Several sources are
concatenated along the output dimension (fused q/k/v, fused gate/up); `transpose` turns a Hugging
Face nn.Linear weight (out, in) into our (in, out) layout. `{i}` stands for the (decoder) layer
index, `{e}` for the encoder layer index.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from playground.checkpoints.safetensors_io import DTYPES, FLOAT_DTYPES, TensorInfo, TensorReader
from playground.errors import CheckpointError
from playground.models.layers import transposed

COPY_THREADS = 2  # weight copies are memory-bound: two streams already fill the memory bus


@dataclass(frozen=True)
class Rule:
    target: str
    sources: tuple[str, ...]
    transpose: bool = False
    optional: bool = False  # skip silently when the sources are absent (e.g. biases some files omit)
    # GPT-NeoX fuses q/k/v head by head ([q_0 k_0 v_0 q_1 ...] along the output dimension) for this many
    # heads; our fused layout is [q_0 q_1 ... k_0 ... v_0 ...]: regrouped at load time.
    qkv_per_head: int = 0


def _full_name(prefix: str, source: str) -> str:
    # "^name" opts out of the family prefix (GPT-2's lm_head sits beside "transformer.").
    return source[1:] if source.startswith("^") else prefix + source


def linear(target: str, *sources: str, bias: bool = False) -> list[Rule]:
    """Rules for an nn.Linear-style projection (weights (out, in) in the file), with optional bias."""
    rules = [Rule(f"{target}.weight", tuple(f"{s}.weight" for s in sources), transpose=True)]
    if bias:
        rules.append(Rule(f"{target}.bias", tuple(f"{s}.bias" for s in sources)))
    return rules


def copy(target: str, source: str, *, optional: bool = False) -> Rule:
    return Rule(target, (source,), optional=optional)


def expand_layers(rules: list[Rule], layers: int, encoder_layers: int = 0) -> list[Rule]:
    """Repeat each rule per layer: "{i}" over (decoder) layers, "{e}" over encoder layers."""
    out: list[Rule] = []
    for rule in rules:
        placeholder = "{e}" if "{e}" in rule.target else "{i}" if "{i}" in rule.target else None
        if placeholder is None:
            out.append(rule)
            continue
        for i in range(encoder_layers if placeholder == "{e}" else layers):
            out.append(
                Rule(
                    rule.target.replace(placeholder, str(i)),
                    tuple(s.replace(placeholder, str(i)) for s in rule.sources),
                    rule.transpose,
                    rule.optional,
                    rule.qkv_per_head,
                )
            )
    return out


def build_state_dict(
    reader: TensorReader,
    rules: list[Rule],
    *,
    expected_shapes: dict[str, torch.Size],
    ignore: tuple[str, ...] = (),
    prefix: str = "",
    dtype: torch.dtype | None = None,
    where: str = "checkpoint",
) -> dict[str, torch.Tensor]:
    """Apply `rules` to the checkpoint; every tensor must be used or match an `ignore` regex.

    Names, dtypes and shapes are all checked from the headers before any tensor is opened; the copies
    (transposes, fusions, dtype casts) and the finite check then run on a small thread pool, since
    torch releases the GIL while it copies.
    """
    # 1. Validate names, dtypes and shapes from the headers alone: nothing is read or built yet.
    planned: list[tuple[Rule, list[str]]] = []
    used: set[str] = set()
    for rule in rules:
        names = [_full_name(prefix, s) for s in rule.sources]
        missing = [n for n in names if n not in reader]
        if missing:
            if rule.optional and len(missing) == len(names):
                continue
            raise CheckpointError(
                f"{where}: missing tensor '{missing[0]}' (needed for {rule.target}); "
                "the file is incomplete or belongs to a different architecture"
            )
        infos = [reader.info(n) for n in names]
        used.update(names)
        expected = expected_shapes.get(rule.target)
        if expected is None:
            raise CheckpointError(f"{where}: internal weight map names unknown parameter {rule.target}")
        for info in infos:
            if info.dtype not in FLOAT_DTYPES:
                raise CheckpointError(
                    f"{where}: tensor '{info.name}' has dtype {DTYPES[info.dtype]}; expected floating point weights"
                )
            if len(info.shape) != len(expected):
                raise CheckpointError(
                    f"{where}: tensor '{info.name}' has shape {info.shape} but {rule.target} needs "
                    f"{len(expected)} dimensions; the config and the weights disagree"
                )
        shape = _fused_shape(infos, rule.target, where)
        if rule.transpose:
            shape = shape[::-1]
        if shape != tuple(expected):
            shapes = ", ".join(f"'{i.name}' {i.shape}" for i in infos)
            raise CheckpointError(
                f"{where}: tensor {shapes} does not fit {rule.target} of shape {tuple(expected)} implied by "
                "config.json; the config and the weights disagree"
            )
        planned.append((rule, names))
    unused = [
        n for n in reader.names()
        if n not in used and not any(re.fullmatch(prefix + p, n) or re.fullmatch(p, n) for p in ignore)
    ]
    if unused:
        raise CheckpointError(
            f"{where}: unexpected tensor '{unused[0]}' ({len(unused)} unused in all); the weights do not match "
            "the architecture named in config.json"
        )
    # 2. Materialise: memory-mapped views, then the copies (transposes, fusions, casts) in parallel.
    jobs = []
    for rule, names in planned:
        parts = [reader.get(n) for n in names]
        jobs.append(_Job(rule.target, parts, rule.transpose, dtype or parts[0].dtype, rule.qkv_per_head))
    # Largest first, so that the two workers finish together.
    jobs.sort(key=lambda job: -sum(p.numel() for p in job.parts))
    with ThreadPoolExecutor(max_workers=COPY_THREADS) as pool:
        tensors = list(pool.map(lambda job: job.run(where), jobs))
    return {job.target: tensor for job, tensor in zip(jobs, tensors)}


@dataclass(frozen=True)
class _Job:
    """One parameter to materialise: fuse `parts` along the output dimension, transpose, cast."""

    target: str
    parts: list[torch.Tensor]
    transpose: bool
    dtype: torch.dtype
    qkv_per_head: int = 0

    def run(self, where: str) -> torch.Tensor:
        tensor = self._materialise()
        # A sum is finite exactly when no element is NaN/Inf (or so large that it overflows), and reads
        # the weight once without the temporary mask of `isfinite(...).all()`: ~25x faster.
        if not torch.isfinite(tensor.sum(dtype=torch.float32)):
            raise CheckpointError(
                f"{where}: tensor for {self.target} contains NaN, Inf or absurdly large values; the weights are corrupt"
            )
        return tensor

    def _materialise(self) -> torch.Tensor:
        parts = self.parts
        if self.qkv_per_head:  # (heads · 3 · d, ...) -> (3 · heads · d, ...)
            heads = self.qkv_per_head
            parts = [p.reshape(heads, 3, -1, *p.shape[1:]).transpose(0, 1).reshape(p.shape) for p in parts]
        if not self.transpose:
            tensor = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
            return tensor.to(dtype=self.dtype).contiguous()  # no copy when the file already matches
        return transposed(parts, self.dtype)


def _fused_shape(infos: list[TensorInfo], target: str, where: str) -> tuple[int, ...]:
    """Shape of the tensors concatenated along dimension 0 (the output dimension of a Linear weight)."""
    if len(infos) == 1:
        return infos[0].shape
    trailing = {i.shape[1:] for i in infos}
    if len(trailing) != 1:
        listed = ", ".join(f"'{i.name}' {i.shape}" for i in infos)
        raise CheckpointError(
            f"{where}: tensors {listed} cannot be fused into {target}; their shapes disagree with each other "
            "and with config.json"
        )
    return (sum(i.shape[0] for i in infos), *trailing.pop())
