"""Positional encodings, as the loaded model uses them and as the seeds compare them.

- `positional_data`: the model's own scheme (its tables, RoPE frequencies, learned weights, T5 bias)
  over `length` positions, with a compared base for sinusoidal and RoPE models. Every array is cut
  to `length`, so "Positions shown" drives every plot.
- `rope_shift_scores`: RoPE's relative property on the model's own q and k: the score
  ⟨R_m q, R_n k⟩ of one real (query, key) pair moved to positions (m + s, n + s) is the same for
  every shift s (RoPE's relative property: ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩).
- `pe_schemes`: sinusoidal, learned, RoPE, T5 relative bias and ALiBi side by side, each as what
  position contributes at relative distance δ; the model's own scheme from its own numbers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from playground.analysis.attention_steps import attention_module
from playground.analysis.recorded import RunCache
from playground.generation import GenerationResult
from playground.loaded import LoadedModel
from playground.models.positional import (
    apply_rope,
    position_vectors,
    rope_inverse_frequencies,
    sinusoidal_table,
)
from playground.models.relative_bias import RelativePositionBias, relative_position_bucket


def _position_embedding(model: nn.Module) -> nn.Embedding | None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and "position" in name.lower():
            return module
    return None


def _relative_bias(model: nn.Module, prefer: str = "") -> tuple[str, RelativePositionBias] | None:
    """The first relative-bias table, or the first whose name starts with `prefer` when there is one."""
    found = [(name, m) for name, m in model.named_modules() if isinstance(m, RelativePositionBias)]
    preferred = [f for f in found if prefer and f[0].startswith(prefer)]
    return (preferred or found or [None])[0]


def rope_decay(inv_freq: np.ndarray, distances: np.ndarray) -> np.ndarray:
    """q·k under RoPE for q = k = all ones at relative distance δ: Σ_i 2·cos(δ·θ_i) (RoFormer's
    long-term decay; starts at d_h and decays, with ripples)."""
    return 2.0 * np.cos(np.asarray(distances, dtype=np.float64)[:, None] * inv_freq[None, :]).sum(axis=1)


def _rope_frequencies(lm: LoadedModel, base: float | None = None) -> np.ndarray:
    config = lm.config if base is None else dataclasses.replace(lm.config, rope_theta=float(base))
    return rope_inverse_frequencies(config).double().numpy()


@torch.inference_mode()
def positional_data(lm: LoadedModel, length: int, compare_base: float = 1000.0) -> dict[str, Any]:
    """What the PE panel draws for this model's scheme; "scheme" says which keys are present.

    Every scheme: scheme, length (positions shown, 2..max_positions).
    sinusoidal: table (P, d_model) at the model's base and compare_table at `compare_base`, as the
      model adds them to positions 0..P−1 (`first_row`: the table row of position 0, pad + 1 for
      fairseq's layout), layout, base, compare_base.
    rope: inv_freq (d_head/2,) at the model's base (with its scaling) and compare_inv_freq at
      `compare_base`, context, head_dim, base, compare_base, distances (0..P−1), decay and
      compare_decay (q = k = 1 score vs distance at each base).
    learned: the real table (P, d) (offset applied).
    relative: bias (h, R) for distances −(P−1)..P−1 of the first bias table found, distances, table_name.
    """
    c = lm.config
    length = int(max(2, min(int(length), c.max_positions)))
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
        distances = np.arange(length)
        out["inv_freq"] = _rope_frequencies(lm)
        out["compare_inv_freq"] = _rope_frequencies(lm, compare_base)
        out["context"] = c.max_positions
        out["head_dim"] = c.head_dim
        out["base"], out["compare_base"] = c.rope_theta, compare_base
        out["distances"] = distances
        out["decay"] = rope_decay(out["inv_freq"], distances)
        out["compare_decay"] = rope_decay(out["compare_inv_freq"], distances)
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
            distances = torch.arange(-(length - 1), length, device=module.embedding.weight.device)
            buckets = relative_position_bucket(distances, bidirectional=module.bidirectional,
                                               num_buckets=module.num_buckets, max_distance=module.max_distance)
            out["bias"] = module.embedding.weight[buckets].T.float().cpu().numpy()  # (h, R)
            out["distances"] = distances.cpu().numpy()
            out["table_name"] = name
    return out


# --- RoPE's relative property on the model's own q and k -----------------------------------------


def _rotate(x: torch.Tensor, inv_freq: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """R_p x for each row: x (P, d), positions (P,), through the model's own `apply_rope` (float64)."""
    angles = positions.double()[:, None] * inv_freq[None, :]  # (P, d/2)
    angles = torch.cat((angles, angles), dim=-1)  # the model's layout: pair i is (x_i, x_{i+d/2})
    return apply_rope(x[None, None], angles.cos(), angles.sin())[0, 0]


@torch.inference_mode()
def rope_shift_scores(
    lm: LoadedModel,
    result: GenerationResult,
    step: int,
    layer: int,
    head: int,
    *,
    key_position: int | None = None,
    shifts: list[int] | None = None,
    distances: int = 256,
    cache: RunCache | None = None,
) -> dict[str, Any]:
    """The same real (q, k) pair placed at (m + s, n + s) scores the same for every shift s.

    q: the query that chose step `step` (position m) in `layer`/`head`; k: the key at position n
    (`key_position`, default the first token) of the KV head that query head reads. Their recorded
    (rotated) vectors are rotated back to position 0 with the model's own frequencies (float64), then
    moved with the model's own `apply_rope`.

    Returns query_position (m), key_position (n), query_label, key_label, shifts, positions (m + s,
    n + s) pairs, scores (the scaled score at each shift), spread (max − min), recorded_score (what the
    model computed at (m, n)), distances (δ = 0..distances−1) and by_distance (the same q and k with the
    key δ tokens before the query: the score as a function of m − n alone; by_distance[m − n] is the
    recorded score), scale. For a model without RoPE: {"available": False, "reason": ...}.
    """
    c = lm.config
    if c.positional != "rope":
        return {"available": False, "reason": f"this model's positions are {c.positional}, not RoPE"}
    cache = cache if cache is not None else RunCache(lm, result)
    cache.check_result(result)
    m = cache.query_position(step)
    n = 0 if key_position is None else int(key_position)
    if not 0 <= n <= m:
        raise ValueError(f"key_position {n} must be a visible key of the query at {m} (0..{m})")
    rec = cache.internals(int(layer))["self"]  # recorded numpy: the rotations below run on the CPU, in float64
    kv_head = int(head) // (c.n_heads // c.n_kv_heads)
    q_rot = torch.from_numpy(rec["q"][int(head), m]).double()
    k_rot = torch.from_numpy(rec["k"][kv_head, n]).double()
    inv_freq = torch.from_numpy(_rope_frequencies(lm))
    q = _rotate(q_rot[None], inv_freq, torch.tensor([-m]))[0]  # R_{−m} R_m q = q
    k = _rotate(k_rot[None], inv_freq, torch.tensor([-n]))[0]
    scale = float(attention_module(lm, "self", int(layer)).scale)
    if shifts is None:
        top = max(c.max_positions - 1 - m, 0)
        shifts = sorted({s for s in (0, 1, 7, 100, 1000, top // 2, top) if 0 <= s <= top})
    shifts = [int(s) for s in shifts]
    qs = _rotate(q.expand(len(shifts), -1), inv_freq, torch.tensor([m + s for s in shifts]))
    ks = _rotate(k.expand(len(shifts), -1), inv_freq, torch.tensor([n + s for s in shifts]))
    scores = (qs * ks).sum(-1).numpy() * scale
    deltas = np.arange(int(distances))
    top = int(distances) - 1  # the query at `top`, the key δ tokens before it (only the difference matters)
    q_m = _rotate(q[None], inv_freq, torch.tensor([top]))
    k_d = _rotate(k.expand(len(deltas), -1), inv_freq, torch.from_numpy(top - deltas))
    labels = cache.labels("decoder")
    return {
        "available": True, "layer": int(layer), "head": int(head), "kv_head": kv_head, "step": int(step),
        "query_position": m, "key_position": n, "query_label": labels[m], "key_label": labels[n],
        "shifts": shifts, "positions": [(m + s, n + s) for s in shifts], "scores": scores,
        "spread": float(scores.max() - scores.min()),
        "recorded_score": float((q_rot * k_rot).sum()) * scale, "scale": scale,
        "distances": deltas, "by_distance": (q_m * k_d).sum(-1).numpy() * scale,
    }


# --- five schemes side by side --------------------------------------------------------------------


def alibi_slopes(n_heads: int) -> np.ndarray:
    """ALiBi's head slopes m_h = 2^(−8h/H), h = 1..H (Press et al. 2022; H a power of two, else the
    paper's interleaving of the next power's slopes)."""
    def powers(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return np.array(powers(n_heads))
    low = 2 ** math.floor(math.log2(n_heads))
    return np.array(powers(low) + powers(2 * low)[0::2][: n_heads - low])


@torch.inference_mode()
def pe_schemes(lm: LoadedModel, length: int = 64) -> dict[str, Any]:
    """Each scheme the seeds compare as a curve over relative distance δ = 0..length−1.

    sinusoidal: PE(0)·PE(δ) / PE(0)·PE(0) (d = the model's d_model; base: the model's or 10000);
    learned: cosine similarity of the table's rows p and p + δ, averaged over p (only from a
      model that has a learned table);
    rope: the q = k = 1 score Σ 2·cos(δθ_i) / d_h (the model's head size and base, else base 10000);
    relative: T5's bias per head for a key δ tokens before the query (the model's own, its decoder's
      table), else the bucket index of δ (the learned bias is one number per bucket and head);
    alibi: −m_h·δ per head with ALiBi's slopes (no model here uses it; from the formula).

    Returns own (the model's scheme), distances, schemes {name: {curves (k, R), labels, source
    ("model" / "formula" / "unavailable"), y_label, formula}}.
    """
    c = lm.config
    length = int(max(2, min(int(length), c.max_positions)))
    delta = np.arange(length)
    own = c.positional
    schemes: dict[str, dict[str, Any]] = {}
    base = c.sinusoidal_base if own == "sinusoidal" else 10000.0
    # The model's own vectors where it is sinusoidal (its layout and base), else the 2017 formula.
    own_table = position_vectors(c, length) if own == "sinusoidal" else sinusoidal_table(length, c.d_model)
    table = own_table.double().numpy()
    schemes["sinusoidal"] = {"curves": (table[0] @ table.T / (table[0] @ table[0]))[None], "labels": ["PE(0)·PE(δ)"],
                             "source": "model" if own == "sinusoidal" else "formula", "base": base}
    emb = _position_embedding(lm.model) if own == "learned" else None
    if emb is not None:
        t = emb.weight[c.learned_position_offset:c.learned_position_offset + length].double().cpu().numpy()
        unit = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
        sim = unit @ unit.T
        curve = np.array([np.diagonal(sim, offset=k).mean() for k in range(length)])
        schemes["learned"] = {"curves": curve[None], "labels": ["cos(P_p, P_p+δ)"], "source": "model"}
    else:
        schemes["learned"] = {"curves": np.zeros((0, length)), "labels": [], "source": "unavailable"}
    if own == "rope":
        inv_freq, rope_source = _rope_frequencies(lm), "model"
    else:
        inv_freq = 10000.0 ** (-np.arange(0, c.head_dim, 2) / c.head_dim)
        rope_source = "formula"
    schemes["rope"] = {"curves": (rope_decay(inv_freq, delta) / c.head_dim)[None], "labels": ["q = k = 1"],
                       "source": rope_source}
    found = _relative_bias(lm.model, prefer="decoder") if own == "relative" else None
    if found is not None:
        _, module = found
        distances = torch.from_numpy(-delta).to(module.embedding.weight.device)
        buckets = relative_position_bucket(distances, bidirectional=module.bidirectional,
                                           num_buckets=module.num_buckets, max_distance=module.max_distance)
        bias = module.embedding.weight[buckets].T.double().cpu().numpy()  # (h, R)
        schemes["relative"] = {"curves": bias, "labels": [f"head {i}" for i in range(bias.shape[0])],
                               "source": "model"}
    else:
        buckets = relative_position_bucket(torch.from_numpy(-delta), bidirectional=False,
                                           num_buckets=c.relative_buckets, max_distance=c.relative_max_distance)
        schemes["relative"] = {"curves": buckets.double().numpy()[None], "labels": ["bucket of δ"],
                               "source": "formula"}
    slopes = alibi_slopes(c.n_heads)
    schemes["alibi"] = {"curves": -slopes[:, None] * delta[None, :], "labels": [f"head {i}" for i in range(c.n_heads)],
                        "source": "formula", "slopes": slopes}
    return {"own": own, "distances": delta, "schemes": schemes, "length": length}
