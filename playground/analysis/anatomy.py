"""Anatomy of the loaded model (the classic block diagram) and its residual stream per layer.

`anatomy` walks the model's own modules: embedding → N × block → final norm → head (decoder-only),
or a shared embedding, an encoder stack and a decoder stack with cross-attention (seq2seq). Every
component carries its real parameter count and tensor shapes (weights are stored (in, out)); the
counts add up to the model's parameter count. The block wiring is read from the blocks themselves:
pre-LN `x + f(Norm(x))` (GPT-2, LLaMA, T5) or post-LN `Norm(x + f(x))` (the 2017 paper, BART).

`residual_norms` reads the recorded residual stream (capture_residual): ‖x‖ after the embedding
and after each block for the query of every step. In a pre-LN model nothing normalises the stream,
each block adds its output to it and the norm grows with depth, while the gradient reaches every
block unchanged through the identity path: why pre-LN trains stably without warm-up.
In a post-LN model the stream is renormalised after every sub-layer, so its norm stays flat.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from playground.generation import GenerationResult
from playground.loaded import LoadedModel


def _tensors(module: nn.Module | None) -> list[tuple[str, tuple[int, ...]]]:
    if module is None:
        return []
    return [(name, tuple(p.shape)) for name, p in module.named_parameters()]


def _count(module: nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def _buffers(module: nn.Module | None) -> list[tuple[str, tuple[int, ...]]]:
    if module is None:
        return []
    return [(name, tuple(b.shape)) for name, b in module.named_buffers()]


def _part(key: str, module: nn.Module | None, *, path: str, note: str = "", repeat: int = 1,
          modules: list[nn.Module] | None = None) -> dict[str, Any]:
    """A component: its tensors (of one block when repeated) and parameters summed over all copies."""
    copies = modules if modules is not None else [module]
    return {"key": key, "path": path, "tensors": _tensors(module), "buffers": _buffers(module),
            "params_each": _count(module), "params": sum(_count(m) for m in copies), "repeat": repeat, "note": note}


def _norm_kind(module: nn.Module | None) -> str:
    return "none" if module is None or isinstance(module, nn.Identity) else type(module).__name__


def _block_parts(blocks: nn.ModuleList, prefix: str, cross: bool) -> list[dict[str, Any]]:
    first, n = blocks[0], len(blocks)
    names = ["attn_norm", "attn"] + (["cross_norm", "cross"] if cross else []) + ["mlp_norm", "mlp"]
    def note(module: nn.Module, name: str) -> str:
        return _norm_kind(module) if name.endswith("norm") else type(module).__name__

    return [_part(name, getattr(first, name), path=f"{prefix}.{{0..{n - 1}}}.{name}", repeat=n,
                  note=note(getattr(first, name), name), modules=[getattr(b, name) for b in blocks])
            for name in names]


def wiring(pre: bool, cross: bool) -> list[str]:
    """The block's equations as the model computes them (x in, x' out)."""
    subs = ["SelfAttention"] + (["CrossAttention"] if cross else []) + ["MLP"]
    lines, x = [], "x"
    for i, f in enumerate(subs):
        y = "x'" if i == len(subs) - 1 else f"h{i + 1}"
        arg = f"{f}({'Norm(' + x + ')' if pre else x}{', enc' if f == 'CrossAttention' else ''})"
        lines.append(f"{y} = {x} + {arg}" if pre else f"{y} = Norm({x} + {arg})")
        x = y
    return lines


def _positions(stack: nn.Module, config, path: str) -> list[dict[str, Any]]:
    parts = []
    if getattr(stack, "positions", None) is not None:
        parts.append(_part("positions", stack.positions, path=f"{path}positions", note=config.positional))
    if getattr(stack, "rope", None) is not None:
        parts.append(_part("positions", stack.rope, path=f"{path}rope", note="rope"))
    if getattr(stack, "relative_bias", None) is not None:
        parts.append(_part("relative_bias", stack.relative_bias, path=f"{path}relative_bias", note="relative"))
    if getattr(stack, "embed_norm", None) is not None:
        parts.append(_part("embed_norm", stack.embed_norm, path=f"{path}embed_norm", note=_norm_kind(stack.embed_norm)))
    return parts


def anatomy(lm: LoadedModel) -> dict[str, Any]:
    """The model as its diagram: kind, config numbers, stacks and every component with real counts.

    Returns kind, family, d_model, vocab_size, n_heads, n_kv_heads, head_dim, d_ff, positional,
    embedding (part), stacks [{name ("decoder" / "encoder"), layers, pre (bool), wiring (equations),
    parts (positions, then the block's sub-layers, each with repeat = layers), final_norm (part or
    None), block_params (one block)}], head (part; tied: 0 new parameters, shares the embedding),
    extra (parts not drawn elsewhere, e.g. final_logits_bias), parameters (their sum) and
    model_parameters (lm.parameter_count; equal unless a module was missed).
    """
    m, c = lm.model, lm.config
    stacks = []
    if lm.kind == "decoder":
        parts = _positions(m, c, "") + _block_parts(m.blocks, "blocks", cross=False)
        final = None if isinstance(m.norm, nn.Identity) else _part("final_norm", m.norm, path="norm",
                                                                   note=_norm_kind(m.norm))
        stacks.append({"name": "decoder", "layers": len(m.blocks), "pre": True, "wiring": wiring(True, False),
                       "parts": parts, "final_norm": final, "block_params": _count(m.blocks[0])})
    else:
        for name, stack, cross in (("encoder", m.encoder, False), ("decoder", m.decoder, True)):
            pre = bool(stack.blocks[0].pre)
            parts = _positions(stack, c, f"{name}.") + _block_parts(stack.blocks, f"{name}.blocks", cross=cross)
            final = None if stack.norm is None else _part("final_norm", stack.norm, path=f"{name}.norm",
                                                          note=_norm_kind(stack.norm))
            stacks.append({"name": name, "layers": len(stack.blocks), "pre": pre, "wiring": wiring(pre, cross),
                           "parts": parts, "final_norm": final, "block_params": _count(stack.blocks[0])})
    embedding = _part("embedding", m.embed, path="embed", note="shared by source, target and tied head"
                      if lm.kind == "seq2seq" else "")
    if m.lm_head is not None:
        head = _part("head", m.lm_head, path="lm_head", note="untied")
    else:
        head = {"key": "head", "path": "embed (tied)", "tensors": [("weight", tuple(m.embed.weight.shape))],
                "buffers": [], "params_each": 0, "params": 0, "repeat": 1, "note": "tied"}
    extra = []
    if getattr(m, "final_logits_bias", None) is not None:
        extra.append({"key": "final_logits_bias", "path": "final_logits_bias",
                      "tensors": [("", tuple(m.final_logits_bias.shape))], "buffers": [],
                      "params_each": m.final_logits_bias.numel(), "params": m.final_logits_bias.numel(),
                      "repeat": 1, "note": ""})
    counted = embedding["params"] + head["params"] + sum(p["params"] for p in extra)
    for s in stacks:
        counted += sum(p["params"] for p in s["parts"]) + (s["final_norm"]["params"] if s["final_norm"] else 0)
    return {
        "kind": lm.kind, "family": c.family, "d_model": c.d_model, "vocab_size": c.vocab_size, "n_heads": c.n_heads,
        "n_kv_heads": c.n_kv_heads, "head_dim": c.head_dim, "d_ff": c.d_ff, "positional": c.positional,
        "norm": c.norm, "mlp": c.mlp, "activation": c.activation, "embedding": embedding, "stacks": stacks,
        "head": head, "extra": extra, "parameters": counted, "model_parameters": lm.parameter_count,
    }


def residual_norms(result: GenerationResult, steps: list[int] | None = None) -> dict[str, Any]:
    """‖x‖₂ of the recorded residual stream per layer and step.

    Returns norms (L + 1, n) (row 0: after the embedding, row i: after block i − 1), steps,
    layer_names, and growth (n,) = last row / first row.
    """
    steps = list(range(len(result.path))) if steps is None else [int(s) for s in steps]
    stacked = []
    for s in steps:
        residual = result.path[s].capture.residual
        if residual is None:
            raise ValueError("this run has no residual stream; generate with GenerationConfig(capture_residual=True)")
        stacked.append(np.linalg.norm(residual.astype(np.float64), axis=1))
    norms = np.stack(stacked, axis=1)  # (L + 1, n)
    names = ["embedding"] + [f"block {i}" for i in range(norms.shape[0] - 1)]
    return {"norms": norms, "steps": steps, "layer_names": names, "growth": norms[-1] / np.maximum(norms[0], 1e-30)}
