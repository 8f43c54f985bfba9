"""Attention, step by step: softmax(Q·Kᵀ/√d + mask)·V for one step, layer and head, stage by stage.

The formula:

    S = Q·Kᵀ            scores                      (T_q, S)
    S' = S · scale      scale = 1/√d_h (T5: 1)
    S'' = S' + bias     T5's relative position bias, where the model has one
    masked: −∞ where the mask hides a key (causal, sliding window, padding)
    A = softmax(S'')    weights, each row sums to 1
    O_h = A·V           the head's output           (T_q, d_h)
    O = concat_h(O_h)·W_O + b_O                     (T_q, d_model), the layer's attention output

The numbers come from the model's own pass over the run's final sequence: q and k after RoPE, as
the model attends them, v, and the projected output (see `RunCache`). Only the softmax arithmetic is
redone here, in float64, to show each stage; putting the stages back together gives the model's
recorded output (tested to 1e-5).

Step 0 is the prefill: every prompt position is a query (L_p × L_p, the causal triangle). Each later
step has one query against T + 1 keys (the decode step's asymmetry); at a decode step the causal mask hides
nothing, only a sliding window does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from playground.analysis.recorded import RunCache
from playground.generation import GenerationResult
from playground.loaded import LoadedModel
from playground.models.attention import causal_mask

KINDS = ("self", "cross", "encoder")


def attention_module(lm: LoadedModel, kind: str, layer: int) -> nn.Module:
    """The model's own attention module of `kind` at `layer` (its W_O and scale are read from it)."""
    m = lm.model
    if lm.kind == "decoder":
        if kind != "self":
            raise ValueError(f"a decoder-only model has only self-attention, not {kind!r}")
        return m.blocks[layer].attn
    stack = m.encoder if kind == "encoder" else m.decoder
    block = stack.blocks[layer]
    return block.cross if kind == "cross" else block.attn


@torch.inference_mode()
def mask_and_bias(lm: LoadedModel, kind: str, queries: int, keys: int) -> tuple[np.ndarray, np.ndarray | None, str]:
    """What the model adds to the scaled scores of a whole sequence (T, S), as it does in its pass.

    Returns (visible (T, S) bool, additive bias (h, T, S) or None, mask kind). The masks come from
    the model's own `causal_mask`; T5's bias from its own `RelativePositionBias` module.
    """
    c = lm.config
    bias_module = None
    if kind == "cross":
        return np.ones((queries, keys), dtype=bool), None, "none"
    if kind == "encoder":
        visible, label = None, "none"
        bias_module = lm.model.encoder.relative_bias
    else:
        bias_module = lm.model.decoder.relative_bias if lm.kind == "seq2seq" else None
        # T5's decoder passes its own mask (bias + causal), which replaces any window.
        window = None if bias_module is not None else c.sliding_window
        visible = causal_mask(queries, keys, window=window)
        label = "causal" if window is None or keys <= window else f"causal + sliding window {window}"
    mask = np.ones((queries, keys), dtype=bool) if visible is None else visible.cpu().numpy()
    bias = None
    if bias_module is not None:
        bias = bias_module(queries, keys).float()[0].cpu().numpy().astype(np.float64)  # (h, T, S)
    return mask, bias, label


def _softmax(x: np.ndarray) -> np.ndarray:
    top = np.max(x, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(x - top)
    return e / e.sum(axis=-1, keepdims=True)


def _all_heads(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask: np.ndarray,
               bias: np.ndarray | None) -> dict[str, np.ndarray]:
    """Every stage for every head. q: (h, T_q, d); k, v: (h_kv, S, d); mask (T_q, S); bias (h, T_q, S)."""
    h, h_kv = q.shape[0], k.shape[0]
    k_h, v_h = np.repeat(k, h // h_kv, axis=0), np.repeat(v, h // h_kv, axis=0)  # head i uses KV head i // g
    scores = q @ k_h.transpose(0, 2, 1)  # (h, T_q, S)
    scaled = scores * scale
    biased = scaled + bias if bias is not None else scaled
    masked = np.where(mask[None], biased, -np.inf)
    weights = _softmax(masked)
    return {"scores": scores, "scaled": scaled, "masked": masked, "weights": weights, "output": weights @ v_h,
            "k": k_h, "v": v_h}


def attention_steps(
    lm: LoadedModel,
    result: GenerationResult,
    step: int,
    layer: int,
    head: int,
    kind: str = "self",
    *,
    cache: RunCache | None = None,
) -> dict[str, Any]:
    """The named stages of one head's attention at one step, as numpy arrays.

    kind: "self" (decoder self-attention), "cross" (seq2seq: decoder queries, encoder keys/values),
    or "encoder" (seq2seq encoder self-attention over the whole source; `step` only labels it).
    Pass the run's `RunCache` to reuse the one whole-sequence pass across step changes.

    Keys (T_q queries: the prompt at step 0, else 1; S visible keys: T + 1 for self-attention,
    the source length for cross-attention):
      stages: q (T_q, d), k (S, d) after RoPE, scores (T_q, S) = q·kᵀ, scaled = scores·scale,
        bias (T_q, S) or None (T5), masked (−inf where hidden), weights (softmax), v (S, d),
        output (T_q, d) = weights·v (the head's output);
      mask (T_q, S) bool (True: visible), mask_kind, scale, head_dim, positional, phase ("prefill",
      "decode" or "encoder"),
      query_positions, key_positions, query_labels, key_labels, kind, layer, head, kv_head,
      n_heads, n_kv_heads, step;
      heads: concat (T_q, h·d) of every head's output (head i at columns i·d..(i+1)·d),
        w_o_slice (d, d_model) = this head's rows of W_O, w_o_shape, o_bias (d_model,) or None,
        head_contribution (T_q, d_model) = output·w_o_slice, attention_output (T_q, d_model) =
        concat·W_O + b_O (recomposed), recorded_output (T_q, d_model) (the model's own),
        max_abs_error between those two.
    """
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: use one of {', '.join(KINDS)}")
    if lm.kind == "decoder" and kind != "self":
        raise ValueError(f"a decoder-only model has only self-attention; kind {kind!r} needs a seq2seq model")
    cache = cache if cache is not None else RunCache(lm, result)
    cache.check_result(result)
    step = cache.check_step(step)
    layers = cache.layer_count(kind)
    if not 0 <= int(layer) < layers:
        raise ValueError(f"layer {layer} is outside the {kind} layers 0..{layers - 1}")
    layer, head = int(layer), int(head)
    module = attention_module(lm, kind, layer)
    # Head counts and sizes from the module itself: a seq2seq encoder may have its own.
    n_heads, n_kv_heads, d = module.n_heads, module.n_kv_heads, module.head_dim
    if not 0 <= head < n_heads:
        raise ValueError(f"head {head} is outside heads 0..{n_heads - 1}")
    rec = cache.internals(layer)[kind]
    q_all, k_all, v_all, out_all = rec["q"], rec["k"], rec["v"], rec["output"]  # (h,T,d), (h_kv,S,d), (T,d_model)
    T, S_all = q_all.shape[1], k_all.shape[1]
    if kind == "encoder":
        queries, key_stop = list(range(T)), S_all
        q_labels = k_labels = cache.labels("source")
    else:
        queries = cache.query_positions(step)
        key_stop = queries[-1] + 1 if kind == "self" else S_all
        q_labels = cache.labels("decoder")
        k_labels = q_labels if kind == "self" else cache.labels("source")
    mask_full, bias_full, mask_kind = mask_and_bias(lm, kind, T, S_all)
    rows = np.asarray(queries)
    mask = mask_full[rows, :key_stop]
    bias = None if bias_full is None else bias_full[:, rows, :key_stop]
    scale = float(module.scale)
    stages = _all_heads(q_all[:, rows].astype(np.float64), k_all[:, :key_stop].astype(np.float64),
                        v_all[:, :key_stop].astype(np.float64), scale, mask, bias)
    concat = stages["output"].transpose(1, 0, 2).reshape(len(rows), n_heads * d)  # (T_q, h·d)
    w_o = module.out.weight.detach().float().cpu().numpy().astype(np.float64)  # (h·d, d_model), stored (in, out)
    o_bias = None if module.out.bias is None else module.out.bias.detach().float().cpu().numpy().astype(np.float64)
    projected = concat @ w_o + (o_bias if o_bias is not None else 0.0)
    recorded = out_all[rows].astype(np.float64)
    w_slice = w_o[head * d:(head + 1) * d]
    g = n_heads // n_kv_heads
    return {
        "kind": kind, "layer": layer, "head": head, "kv_head": head // g, "step": step,
        "phase": "prefill" if (step == 0 and kind != "encoder") else ("encoder" if kind == "encoder" else "decode"),
        "n_heads": n_heads, "n_kv_heads": n_kv_heads, "head_dim": d, "scale": scale,
        "positional": lm.config.positional,
        "query_positions": rows, "key_positions": np.arange(key_stop),
        "query_labels": [q_labels[i] for i in rows], "key_labels": list(k_labels[:key_stop]),
        "q": q_all[head, rows].astype(np.float64), "k": stages["k"][head], "scores": stages["scores"][head],
        "scaled": stages["scaled"][head], "bias": None if bias is None else bias[head], "mask": mask,
        "mask_kind": mask_kind, "masked": stages["masked"][head], "weights": stages["weights"][head],
        "v": stages["v"][head], "output": stages["output"][head],
        "concat": concat, "w_o_slice": w_slice, "w_o_shape": tuple(w_o.shape), "o_bias": o_bias,
        "head_contribution": stages["output"][head] @ w_slice, "attention_output": projected,
        "recorded_output": recorded, "max_abs_error": float(np.abs(projected - recorded).max()),
    }


def attention_matrix(
    lm: LoadedModel, result: GenerationResult, layer: int, kind: str = "self", *, cache: RunCache | None = None
) -> dict[str, Any]:
    """Every head's weights over the whole final sequence, (h, T, S), from the same cached pass.

    Returns weights, mask (T, S) bool, mask_kind, query_labels, key_labels.
    """
    cache = cache if cache is not None else RunCache(lm, result)
    cache.check_result(result)
    rec = cache.internals(int(layer))[kind]
    q, k, v = (rec[n].astype(np.float64) for n in ("q", "k", "v"))
    mask, bias, mask_kind = mask_and_bias(lm, kind, q.shape[1], k.shape[1])
    scale = float(attention_module(lm, kind, int(layer)).scale)
    weights = _all_heads(q, k, v, scale, mask, bias)["weights"]
    q_labels = cache.labels("source" if kind == "encoder" else "decoder")
    k_labels = cache.labels("decoder" if kind == "self" else "source")
    return {"weights": weights, "mask": mask, "mask_kind": mask_kind, "query_labels": q_labels, "key_labels": k_labels}
