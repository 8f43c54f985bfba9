"""Text the panels show, from engine output: model card, captions, notes, KV-cache summary. No Gradio.

Everything that comes from a checkpoint (names, config strings, token texts) is escaped here: the
page never interprets markup from a file.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from playground.app.notes import render
from playground.app.words import t
from playground.config import ModelConfig
from playground.generation import StepEvent, TokenStep
from playground.loaded import block_kind
from playground.steps import step_number
from playground.viz.cache import format_bytes, kv_formula


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


# What makes Markdown (CommonMark + GFM, as Gradio renders it) create an element inside a line: emphasis,
# code, strikethrough, links and images, math, tables, and GFM's bare autolinks (`http://`, `www.`,
# `a@b.c`). An underscore between two letters or digits cannot emphasise, so `top_p` stays as written.
_INLINE = re.compile(r"[\\`*~\[\]$|@]|(?<![^\W_])_|_(?![^\W_])|:(?=//)|(?i:(?<=www))\.")
# ... and at the start of a line: a heading, a list item, a numbered item.
_LINE_START = re.compile(r"^(?:([#+\-])|(\d+)([.)]))")


def inert(value: Any) -> str:
    """Text for a Markdown element that shows exactly as typed, creating no element (a visitor's link or
    file chose it): HTML's `<`, `>`, `&` become entities, Markdown's punctuation is backslash-escaped
    where it would act, line breaks become spaces."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    text = _INLINE.sub(lambda m: "\\" + m.group(0), text)
    return _LINE_START.sub(lambda m: "\\" + m.group(1) if m.group(1) else m.group(2) + "\\" + m.group(3), text)


# --- a model's structure in words (the library returns the data: ModelConfig, LoadedModel.info) -------


def _joined(parts: list[str], lang: str) -> str:
    return ("，" if lang == "zh" else ", ").join(parts)


def layer_summary(config: ModelConfig, lang: str = "en") -> str:
    """The (decoder) layers grouped by kind, e.g. "15 sliding (window 512, RoPE base 10000) + 3 full (RoPE base
    1e+06)"; partial rotary and NoPE layers are named too."""
    groups: dict[tuple[int | None, str], int] = {}  # (window, details): a sliding layer has its window
    for kind in config.layer_kinds():
        details = []
        if kind.rope is not None:
            details.append(t("card_layer_rope", lang, base=kind.rope_theta))
            if kind.rotary_dims < config.head_dim:
                details.append(t("card_layer_rotate", lang, rotary=kind.rotary_dims, dims=config.head_dim))
        elif config.positional == "rope":
            details.append(t("card_layer_nope", lang))
        group = (kind.window, _joined(details, lang))
        groups[group] = groups.get(group, 0) + 1
    out = []
    for (window, details), n in groups.items():
        key = "card_layers_sliding" if window is not None else "card_layers_full"
        out.append(t(key + ("_details" if details else ""), lang, n=n, window=window, details=details))
    return " + ".join(out)


def block_label(config: ModelConfig, lang: str = "en") -> str:
    """How a block wires its norms and residual, as a formula, e.g. "pre-norm: x + f(norm(x))"."""
    return t(f"card_block_{block_kind(config)}", lang)


def positional_label(config: ModelConfig, lang: str = "en") -> str:
    """A human name for the config's positional scheme (model card, `info` in the terminal)."""
    if config.positional == "rope":
        parts = [t("card_rope_base", lang, base=config.rope_theta)]
        if config.rope_local_theta is not None:
            parts.append(t("card_rope_local", lang, base=config.rope_local_theta))
        if config.rotary_dims < config.head_dim:
            parts.append(t("card_rope_partial", lang, rotary=config.rotary_dims, dims=config.head_dim))
        if config.rope_scaling:
            parts.append(t("card_rope_scaling", lang, kind=config.rope_scaling.get("rope_type")))
        if config.nope_layers:
            parts.append(t("card_rope_nope", lang, n=len(config.nope_layers), layers=config.n_layers))
        return t("card_rope", lang, parts=_joined(parts, lang))
    if config.positional == "learned":
        offset = config.learned_position_offset
        return t("card_learned_offset", lang, n=offset) if offset else t("card_learned", lang)
    if config.positional == "sinusoidal":
        return t(f"card_sinusoidal_{config.sinusoidal_layout}", lang, base=config.sinusoidal_base)
    if config.positional == "relative":
        return t("card_relative", lang, n=config.relative_buckets)
    return t("card_positional_none", lang)


def card_info(lm: Any, lang: str = "en") -> dict[str, Any]:
    """`lm.info()` with the structure in words in `lang`, as the model card shows it."""
    c = lm.config
    return {**lm.info(), "positional_encoding_label": positional_label(c, lang), "block": block_label(c, lang),
            "layer_summary": layer_summary(c, lang)}


# --- model card ---------------------------------------------------------------------------------


def model_card_rows(info: Mapping[str, Any], name: str, lang: str) -> list[tuple[str, str]]:
    """(property, value) rows of the model card, as plain text."""
    c = info.get("config", {})
    heads = c.get("n_heads")
    kv = c.get("n_kv_heads") or heads
    if kv == heads:
        attention = "MHA"
    elif kv == 1:
        attention = "MQA"
    else:
        attention = t("card_gqa", lang, g=heads // kv if isinstance(heads, int) and isinstance(kv, int) and kv else "?")
    seq2seq = info.get("kind") == "seq2seq"
    layers = str(c.get("n_layers"))
    if seq2seq:
        layers = t("card_layers_seq2seq", lang, encoder=c.get("n_encoder_layers"), decoder=c.get("n_layers"))
    elif info.get("layer_summary"):
        layers = f"{layers}: {info['layer_summary']}"
    gated = c.get("mlp") == "gated"
    activation = "SwiGLU" if gated and c.get("activation") == "silu" else c.get("activation")
    mlp = t("card_ffn_gated" if gated else "card_ffn_plain", lang, activation=activation)
    yes, no = t("card_yes", lang), t("card_no", lang)
    rows = [
        ("card_checkpoint", name),
        ("card_family", str(info.get("family"))),
        ("card_type", t("kind_seq2seq" if seq2seq else "kind_decoder", lang)),
        ("card_parameters", f"{int(info.get('parameters', 0)):,}"),
        ("card_layers", layers),
        ("card_heads", f"{heads} / {kv} · {attention}"),
        *_stacks(info, lang),
        ("card_head_dim", str(c.get("head_dim"))),
        ("card_d_model", str(c.get("d_model"))),
        ("card_ffn", f"{c.get('d_ff')} · {mlp}"),
        ("card_norm", f"{c.get('norm')} · {info.get('block') or c.get('norm_position')}"),
        ("card_positional", str(info.get("positional_encoding_label"))),
        ("card_vocabulary", f"{c.get('vocab_size'):,}" if isinstance(c.get("vocab_size"), int) else "?"),
        ("card_context", t("card_positions", lang, n=f"{c.get('max_positions'):,}")
         if isinstance(c.get("max_positions"), int) else "?"),
        ("card_tied", yes if c.get("tie_word_embeddings") else no),
        ("card_dtype", f"{info.get('dtype')} · {info.get('device')}"),
        ("card_disk", format_bytes(int(info.get("file_bytes", 0)))),
        ("card_load_time", f"{float(info.get('load_seconds', 0.0)):.2f} s"),
        ("card_chat", yes if info.get("chat_template") else no),
    ]
    outside = info.get("special_ids_outside_vocab")
    if outside:
        ids = ", ".join(f"{name.removesuffix('_token_id').replace('_token_id.', ' ')} {value}" for name, value in outside.items())
        rows.append(("card_special_ids", t("card_special_ids_outside", lang, ids=ids)))
    if info.get("tokenizer_error"):
        rows.append(("card_tokenizer", t("card_tokenizer_missing", lang, why=info["tokenizer_error"])))
    return [(t(key, lang), value) for key, value in rows]


def _stacks(info: Mapping[str, Any], lang: str) -> list[tuple[str, str]]:
    """An encoder-decoder whose stacks differ gets one row per stack (DistilBART: 12 encoder, 6 decoder)."""
    if info.get("kind") != "seq2seq" or info.get("symmetric", True):
        return []
    return [(f"card_{side}", t("card_stack", lang, **{k: info[side].get(k) for k in ("layers", "heads", "kv_heads",
                                                                                       "head_dim", "d_ff")}))
            for side in ("encoder", "decoder") if isinstance(info.get(side), Mapping)]


def model_card_html(info: Mapping[str, Any], name: str, lang: str = "en") -> str:
    """The model card as an HTML table; every value escaped (config strings come from the file)."""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in model_card_rows(info, name, lang))
    return f'<table class="pg-card"><thead><tr><th>{esc(t("card_property", lang))}</th>' \
           f'<th>{esc(t("card_value", lang))}</th></tr></thead><tbody>{body}</tbody></table>'


# --- notes and captions -------------------------------------------------------------------------


def notes_markdown(notes: Sequence[str], lang: str = "en") -> str:
    """Clamps and adjustments, shown above the live screen so nobody misses them: each keyed note in `lang`."""
    if not notes:
        return ""
    return "\n".join(f"- **{t('note', lang)}:** {inert(render(n, lang))}" for n in notes)


def step_caption(step: TokenStep, lang: str = "en", number: int | None = None) -> str:
    """The inspector's words for one step; `number`: the step as the run counts it (`Run.step_number`, which
    continues a branch's count), else the engine's own index read as `playground.steps` says."""
    token = html.escape(repr(step.token_text), quote=False)
    caption = t("step_caption", lang, step=step_number(step.step) if number is None else number, token=token,
                id=step.token_id, p=f"{step.prob:.3f}")
    if step.source_beam is not None:
        caption += t("beam_caption", lang, beam=step.source_beam)
    removed = [c for c in step.candidates or [] if c.removed_by]
    if removed:
        caption += t("removed_caption", lang, n=len(removed), m=len(step.candidates or []))
    return caption


def funnel_items(step: TokenStep) -> list[dict[str, Any]]:
    """Candidate dicts for `viz.candidate_funnel`: every stage the run applied, as the engine named it."""
    return [
        {"token": c.text, "id": c.token_id, "stages": dict(c.stages), "removed_by": c.removed_by,
         "chosen": c.token_id == step.token_id}
        for c in step.candidates or []
    ]


def beam_steps(events: Sequence[StepEvent]) -> list[list[dict[str, Any]]]:
    """Per step, the beams for `viz.beam_table` / `viz.beam_tree` (best first)."""
    out = []
    for e in events:
        beams = [{"tokens": b.text, "score": b.score, "finished": b.finished} for b in e.beams or []]
        if beams:
            out.append(beams)
    return out


# --- KV cache -----------------------------------------------------------------------------------


def growth_series(events: Sequence[StepEvent], number: Callable[[int], int] = step_number,
                  ) -> tuple[list[int], list[int], list[int], list[int]]:
    """(step number, bytes used, bytes allocated, MHA-equivalent bytes) per step, the step numbered as on the
    live screen by `number` (`Run.step_number`, so a branch continues its count; step 1 is a run's first new
    token), not by the cache's length."""
    rows = [(e.step, e.cache) for e in events if e.cache]
    return (
        [number(step) for step, _ in rows],
        [int(c.get("bytes", 0)) for _, c in rows],
        [int(c.get("allocated_bytes", 0)) for _, c in rows],
        [int(c.get("mha_equivalent_bytes", c.get("bytes", 0))) for _, c in rows],
    )


def reused_bytes(cache: Mapping[str, Any]) -> tuple[int, int]:
    """(tokens, bytes) of a run's cache restored from the server's prefix cache (a sliding layer holds no more
    than its window of them)."""
    tokens = int(cache.get("reused_tokens", 0))
    if not tokens:
        return 0, 0
    per = [int(p.get("bytes", 0)) * min(tokens, int(p.get("tokens") or 0)) // max(1, int(p.get("tokens") or 0))
           for p in cache.get("per_layer") or []]
    return tokens, sum(per)


def _kv_formula(cache: Mapping[str, Any], lang: str) -> str:
    return kv_formula(cache, lang=lang)


def policy_words(policy: Mapping[str, Any], lang: str) -> str:
    """A cache policy as the engine reports it (window, sink, heavy, dtype), in the visitor's words."""
    words = []
    if policy.get("dtype"):
        words.append(t("kvlab_policy_quant", lang, dtype=policy["dtype"]))
    if policy.get("window"):
        words.append(t("kvlab_policy_window", lang, n=policy["window"])
                     + (t("kvlab_policy_sink", lang, n=policy["sink"]) if policy.get("sink") else "")
                     + (t("kvlab_policy_heavy", lang, n=policy["heavy"]) if policy.get("heavy") else ""))
    rope = policy.get("rope_scaling")
    if isinstance(rope, Mapping):
        words.append(t("kvlab_policy_scaled", lang, kind=rope.get("type"), factor=f"{rope.get('factor', 1):g}"))
    return " · ".join(words) or t("kvlab_policy_rope", lang)


def cache_markdown(cache: Mapping[str, Any], lang: str = "en") -> str:
    """The KV tab's summary: tokens, bytes used vs allocated, the formula filled in, per-layer shape."""
    if not cache:
        return t("cache_intro", lang)
    lines = [
        t("cache_summary", lang, tokens=cache.get("tokens"), max=cache.get("max_tokens", "?"),
          used=format_bytes(cache.get("bytes", 0)), allocated=format_bytes(cache.get("allocated_bytes", 0)))
        + (t("cache_mha", lang,
             mha=format_bytes(cache["mha_equivalent_bytes"])) if "mha_equivalent_bytes" in cache else ""),
        "",
        _kv_formula(cache, lang) if "element_size" in cache else "",
        "",
        t("kv_symbols", lang),
    ]
    reused, tokens = int(cache.get("reused_tokens", 0)), int(cache.get("tokens") or 0)
    if reused:  # the positions whose K/V came from the server's prefix cache, and the ones this run computed
        lines += ["", t("cache_reused", lang, last=reused - 1, reused=reused, first=reused, end=tokens - 1,
                        computed=tokens - reused)]
    policy = cache.get("policy")
    if isinstance(policy, Mapping):  # the run's own cache (the KV lab): what it really holds
        lines += ["", t("cache_policy", lang, policy=policy_words(policy, lang), kept=cache.get("kept_positions", "?"),
                        tokens=cache.get("tokens"), held=format_bytes(int(cache.get("bytes", 0))),
                        plain=format_bytes(int(cache.get("plain_bytes", 0))))]
    per_layer = cache.get("per_layer") or []
    windowed = any(p.get("window") for p in per_layer)
    if per_layer and not windowed and all(p.get("k_shape") == per_layer[0].get("k_shape") for p in per_layer):
        lines += ["", t("cache_per_layer", lang, shape=tuple(per_layer[0].get("k_shape")), layers=len(per_layer))]
    elif per_layer:  # layers hold different amounts (sliding windows keep only their window)
        lines += ["", t("cache_layers_differ", lang), ""]
        lines += [t("cache_layer_row", lang, layer=p.get("layer"), attention=p.get("attention", "full"),
                    window=p.get("window") or "–", tokens=p.get("tokens"), shape=tuple(p.get("k_shape") or ()),
                    bytes=format_bytes(int(p.get("bytes", 0)))) for p in per_layer]
    cross = cache.get("cross_attention")
    if cross:
        lines += ["", t("cache_cross", lang, layers=cross.get("layers"), heads=cross.get("kv_heads"),
                        tokens=cross.get("tokens"), dims=cross.get("head_dim"), bytes=format_bytes(cross.get("bytes", 0)))]
    return "\n".join(lines)
