"""Reshape engine output into what the figure builders take: plain dicts and lists, no maths.

`record(event)` keeps the parts of a StepEvent the panels show (small, JSON-like) so a session's
state holds records, not tensors. No Gradio here.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from playground.viz.cache import format_bytes


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def record(event: Any) -> dict[str, Any]:
    """The panel-relevant parts of one StepEvent as plain data."""
    candidates = _get(event, "candidates") or []
    beams = _get(event, "beams") or []
    return {
        "step": int(_get(event, "step", 0)),
        "token_id": int(_get(event, "token_id", -1)),
        "token_text": str(_get(event, "token_text", "")),
        "prob": float(_get(event, "prob", 0.0)),
        "token_ids": [int(i) for i in (_get(event, "token_ids") or [])],
        "text": str(_get(event, "text", "")),
        "candidates": [
            {
                "token_id": int(_get(c, "token_id")),
                "text": str(_get(c, "text", "")),
                "prob_raw": _opt(_get(c, "prob_raw")),
                "prob_after_penalty": _opt(_get(c, "prob_after_penalty")),
                "prob_after_temperature": _opt(_get(c, "prob_after_temperature")),
                "prob_final": _opt(_get(c, "prob_final")),
                "removed_by": _get(c, "removed_by"),
                "stages": {str(k): float(v) for k, v in (_get(c, "stages") or {}).items() if v is not None},
            }
            for c in candidates
        ],
        "beams": [
            {
                "text": str(_get(b, "text", "")),
                "token_ids": [int(i) for i in (_get(b, "token_ids") or [])],
                "score": float(_get(b, "score", 0.0)),
                "finished": bool(_get(b, "finished", False)),
            }
            for b in beams
        ],
        "cache": dict(_get(event, "cache") or {}),
        "timing": dict(_get(event, "timing") or {}),
        "finished": bool(_get(event, "finished", False)),
        "finish_reason": _get(event, "finish_reason"),
    }


def _opt(x: Any) -> float | None:
    return None if x is None else float(x)


# --- tokens -------------------------------------------------------------------------------------


def token_items(prompt_tokens: Sequence[tuple[int, str]], records: Sequence[dict]) -> list[dict]:
    """Token dicts for `viz.tokens_html`: prompt tokens (unshaded) then one per generated step."""
    items = [{"token": text, "id": tid, "prob": None} for tid, text in prompt_tokens]
    items += [{"token": r["token_text"], "id": r["token_id"], "prob": r["prob"], "step": r["step"]} for r in records]
    return items


# --- step inspector -----------------------------------------------------------------------------


def candidate_items(rec: dict, knobs: Mapping[str, Any]) -> list[dict]:
    """Candidate dicts for `viz.candidate_funnel`, with only the stages this run actually applied.

    knobs: the (clamped) generation settings: repetition_penalty, temperature, top_k, top_p.
    The engine reports the distribution after the penalty, after temperature, and the final one it
    sampled from; the final one is labelled by the last filter that produced it (top-p runs after
    top-k, so 'after top-p' already includes top-k).
    """
    penalty = float(knobs.get("repetition_penalty", 1.0)) != 1.0
    temperature = float(knobs.get("temperature", 0.0))
    sampling = temperature > 0 and int(knobs.get("num_beams", 1)) <= 1
    final_stage = "final"
    if sampling and float(knobs.get("top_p", 1.0)) < 1.0:
        final_stage = "top_p"
    elif sampling and int(knobs.get("top_k", 0)) > 0:
        final_stage = "top_k"
    out = []
    for c in rec["candidates"]:
        if c.get("stages"):  # the engine names the stages it ran: use them as they are
            out.append({"token": c["text"], "id": c["token_id"], "stages": dict(c["stages"]),
                        "removed_by": c["removed_by"], "chosen": c["token_id"] == rec["token_id"]})
            continue
        stages: dict[str, float] = {}
        if c["prob_raw"] is not None:
            stages["raw"] = c["prob_raw"]
        if penalty and c["prob_after_penalty"] is not None:
            stages["repetition_penalty"] = c["prob_after_penalty"]
        if sampling and temperature != 1.0 and c["prob_after_temperature"] is not None:
            stages["temperature"] = c["prob_after_temperature"]
        if c["prob_final"] is not None:
            stages[final_stage] = c["prob_final"]
        out.append({
            "token": c["text"], "id": c["token_id"], "stages": stages, "removed_by": c["removed_by"],
            "chosen": c["token_id"] == rec["token_id"],
        })
    return out


def beam_steps(records: Sequence[dict]) -> list[list[dict]]:
    """Per step, the beams for `viz.beam_table` / `viz.beam_tree` (best first)."""
    steps = []
    for r in records:
        beams = [{"tokens": b["text"], "score": b["score"], "finished": b["finished"]} for b in r["beams"] or []]
        if beams:
            steps.append(beams)
    return steps


def step_caption(rec: dict) -> str:
    token = html.escape(repr(rec["token_text"]))
    return f"Step {rec['step']}: chose {token} (id {rec['token_id']}) with probability {rec['prob']:.3f}"


# --- KV cache -----------------------------------------------------------------------------------


def growth_series(records: Sequence[dict]) -> tuple[list[int], list[int], list[int], list[int]]:
    """(tokens in cache, bytes used, bytes allocated, MHA-equivalent bytes) per step."""
    rows = [r["cache"] for r in records if r["cache"]]
    return (
        [int(c.get("tokens", 0)) for c in rows],
        [int(c.get("bytes", 0)) for c in rows],
        [int(c.get("allocated_bytes", 0)) for c in rows],
        [int(c.get("mha_equivalent_bytes", c.get("bytes", 0))) for c in rows],
    )


def timing_markdown(timing: Mapping[str, Any], tokens: int) -> str:
    if not timing:
        return ""
    def ms(key: str) -> str:
        v = timing.get(key)
        return "–" if v is None else f"{float(v):.1f} ms"
    rate = timing.get("tokens_per_s")
    rate_text = "–" if rate is None else f"{float(rate):.1f}"
    return (
        f"| prefill (whole prompt) | decode per token | tokens/s | tokens | elapsed |\n|---|---|---|---|---|\n"
        f"| {ms('prefill_ms')} | {ms('decode_ms_per_token')} | {rate_text} | {tokens} | {ms('elapsed_ms')} |"
    )


# --- model card ---------------------------------------------------------------------------------


def model_card(info: Mapping[str, Any], name: str) -> str:
    """Markdown model card from `LoadedModel.info()`."""
    c = info.get("config", {})
    heads = c.get("n_heads")
    kv = c.get("n_kv_heads") or heads
    attention = "MHA" if kv == heads else ("MQA" if kv == 1 else f"GQA ({heads // kv} query heads per KV head)")
    kind = "encoder-decoder (seq2seq)" if info.get("kind") == "seq2seq" else "decoder-only"
    layers = str(c.get("n_layers"))
    if info.get("kind") == "seq2seq":
        layers = f"{c.get('n_encoder_layers')} encoder + {c.get('n_layers')} decoder"
    mlp = f"{c.get('mlp')} ({c.get('activation')})"
    if c.get("mlp") == "gated":
        mlp = f"gated ({'SwiGLU' if c.get('activation') == 'silu' else c.get('activation')})"
    norm = f"{c.get('norm')} · {c.get('norm_position')}-LN"
    rows = [
        ("Checkpoint", f"`{name}`"),
        ("Family", str(info.get("family"))),
        ("Type", kind),
        ("Parameters", f"{int(info.get('parameters', 0)):,}"),
        ("Layers", layers),
        ("Heads / KV heads", f"{heads} / {kv} · {attention}"),
        ("Head dim", str(c.get("head_dim"))),
        ("d_model", str(c.get("d_model"))),
        ("FFN", f"{c.get('d_ff')} · {mlp}"),
        ("Norm", norm),
        ("Positional encoding", str(info.get("positional_encoding_label"))),
        ("Vocabulary", f"{c.get('vocab_size'):,}" if isinstance(c.get("vocab_size"), int) else "?"),
        ("Context", f"{c.get('max_positions'):,} positions" if isinstance(c.get("max_positions"), int) else "?"),
        ("Tied embeddings", "yes" if c.get("tie_word_embeddings") else "no"),
        ("dtype · device", f"{info.get('dtype')} · {info.get('device')}"),
        ("Weights on disk", format_bytes(int(info.get("file_bytes", 0)))),
        ("Load time", f"{float(info.get('load_seconds', 0.0)):.2f} s"),
        ("Chat template", "yes" if info.get("chat_template") else "no"),
    ]
    if info.get("tokenizer_error"):
        rows.append(("Tokenizer", f"unavailable: {info['tokenizer_error']}"))
    body = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return "| Property | Value |\n|---|---|\n" + body


def notes_markdown(notes: Sequence[str]) -> str:
    """Clamps and adjustments, shown above the output so nobody misses them."""
    if not notes:
        return ""
    return "\n".join(f"- **Note:** {html.escape(n)}" for n in notes)
