"""The training recipe a checkpoint stores, as numbers to draw (label smoothing, warm-up,
clipping).

Our own checkpoints (`python -m playground.train`) carry a "provenance" JSON in their safetensors
metadata: the recipe (steps, peak lr, warm-up, schedule, label smoothing, clipping, optimizer) and,
for checkpoints trained after loss curves were added, the per-step loss / lr / gradient norm and
the evaluations. The learning-rate curve is recomputed with the trainer's own `lr_factor`, so it is
exactly the schedule the run followed. Checkpoints from elsewhere (Hugging Face) carry no recipe.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from playground.checkpoints.own_format import is_own_format
from playground.checkpoints.safetensors_io import read_header
from playground.errors import CheckpointError
from playground.loaded import LoadedModel
from playground.train.recipe import Recipe, lr_factor

MAX_CURVE_POINTS = 2000  # the lr curve is sampled at most this often


def _own_file(path: Path) -> Path | None:
    if path.is_file():
        return path if path.suffix == ".safetensors" else None
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    own = []
    for f in files:
        try:
            if is_own_format(read_header(f).metadata):
                own.append(f)
        except CheckpointError:
            continue
    return own[0] if len(own) == 1 else None


def provenance(path: str | Path) -> dict[str, Any] | None:
    """The provenance JSON stored in an own-format checkpoint (file or folder), or None."""
    found = _own_file(Path(path))
    if found is None:
        return None
    metadata = read_header(found).metadata
    if not is_own_format(metadata) or "provenance" not in metadata:
        return None
    try:
        data = json.loads(metadata["provenance"])
    except (json.JSONDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def recipe_from(stored: dict[str, Any]) -> tuple[Recipe, list[str]]:
    """A `Recipe` from a stored recipe dict, and the fields that fell back to the trainer's defaults."""
    fields = {f.name for f in dataclasses.fields(Recipe)}
    known = {k: v for k, v in stored.items() if k in fields}
    if "clip" not in known and "grad_clip" in stored:
        known["clip"] = stored["grad_clip"]
    if isinstance(known.get("betas"), list):
        known["betas"] = tuple(known["betas"])
    recipe = Recipe(**known)
    # min_lr_ratio only shapes a cosine schedule; the other fields shape every run.
    matters = ("clip", "label_smoothing", "warmup", "schedule", "lr")
    if recipe.schedule == "cosine":
        matters += ("min_lr_ratio",)
    return recipe, sorted(f for f in matters if f not in known)


def training_view(lm: LoadedModel | str | Path) -> dict[str, Any]:
    """The recipe and curves of a checkpoint, or why there are none.

    Returns available (bool), reason (when not), and: task, recipe (the stored dict), assumed
    (fields not stored, taken from the trainer's defaults), schedule, lr_steps / lr (the schedule over
    every optimiser step, at most MAX_CURVE_POINTS points), warmup, label_smoothing, clip, steps,
    curves ({step, loss, nll, lr, grad_norm} lists, or None when the checkpoint predates them),
    evals (list of dicts, or None), final_metrics, data_source, command.
    """
    path = lm.path if isinstance(lm, LoadedModel) else Path(lm)
    found = provenance(path)
    if found is None:
        return {"available": False, "reason": "no_provenance"}
    stored = found.get("recipe")
    if not isinstance(stored, dict) or "steps" not in stored:
        return {"available": False, "reason": "no_recipe"}
    recipe, assumed = recipe_from(stored)
    sampled = np.linspace(0, recipe.steps - 1, min(recipe.steps, MAX_CURVE_POINTS)).round().astype(int)
    peak = min(max(recipe.warmup - 1, 0), recipe.steps - 1)  # keep the warm-up's peak on the curve
    steps = np.unique(np.append(sampled, peak))
    curves = found.get("curves")
    return {
        "available": True, "task": found.get("task"), "recipe": stored, "assumed": assumed,
        "schedule": recipe.schedule, "lr_steps": steps + 1,
        "lr": np.array([recipe.lr * lr_factor(int(s), recipe) for s in steps]),
        "peak_lr": recipe.lr, "warmup": recipe.warmup, "min_lr_ratio": recipe.min_lr_ratio,
        "label_smoothing": recipe.label_smoothing, "clip": recipe.clip, "steps": recipe.steps,
        "weight_decay": recipe.weight_decay, "optimizer": stored.get("optimizer"),
        "curves": curves if isinstance(curves, dict) and curves.get("loss") else None,
        "evals": found.get("evals") or None, "final_metrics": found.get("final_metrics"),
        "data_source": found.get("data_source"), "command": found.get("command"),
    }
