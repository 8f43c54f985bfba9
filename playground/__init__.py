"""Transformer Playground: our own Transformer implementations, a generation engine that shows its
work, and a Gradio app to watch it. Public API (see DESIGN.md): load_model, GenerationConfig,
generate, generate_all; Ablate, Steer, Patch (playground.interventions) for GenerationConfig(interventions=...).

Attributes resolve lazily so that light subpackages (``playground.viz``) import without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "load_model": "playground.checkpoints.loader",
    "LoadedModel": "playground.loaded",
    "ModelConfig": "playground.config",
    "CheckpointError": "playground.errors",
    "ConfigError": "playground.errors",
    "PlaygroundError": "playground.errors",
    "GenerationConfig": "playground.generation",
    "generate": "playground.generation",
    "generate_all": "playground.generation",
    "Ablate": "playground.interventions",
    "Steer": "playground.interventions",
    "Patch": "playground.interventions",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'playground' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
