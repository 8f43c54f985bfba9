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
from playground.viz import language
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


_BLOCK_LABELS = {
    "pre": "pre-norm: x + f(norm(x))",
    "post": "post-norm: norm(x + f(x))",
    "sandwich": "sandwich norms: x + norm(f(norm(x)))",
    "output": "output norms: x + norm(f(x))",
    "parallel": "parallel residual: x + attn(norm(x)) + mlp(norm(x))",
}


def layer_summary(config: ModelConfig) -> str:
    """The (decoder) layers grouped by kind, e.g. "15 sliding (window 512, RoPE base 10000) +
    3 full (RoPE base 1e+06)"; partial rotary and NoPE layers are named too."""
    groups: dict[str, int] = {}
    for kind in config.layer_kinds():
        label = kind.attention if kind.window is None else f"sliding (window {kind.window}"
        details = []
        if kind.rope is not None:
            details.append(f"RoPE base {kind.rope_theta:g}")
            if kind.rotary_dims < config.head_dim:
                details.append(f"{kind.rotary_dims} of {config.head_dim} dims rotate")
        elif config.positional == "rope":
            details.append("no RoPE")
        if kind.window is not None:
            label += "".join(f", {d}" for d in details) + ")"
        elif details:
            label += f" ({', '.join(details)})"
        groups[label] = groups.get(label, 0) + 1
    return " + ".join(f"{n} {label}" for label, n in groups.items())


def block_label(config: ModelConfig) -> str:
    """How a block wires its norms and residual, as a formula, e.g. "pre-norm: x + f(norm(x))"."""
    return _BLOCK_LABELS[block_kind(config)]


_SINUSOIDAL_LABELS = {
    "interleaved": ")",
    "halves": ", sin half | cos half)",
    "fairseq": ", fairseq: sin half | cos half, positions from row pad + 1)",
}


def positional_label(config: ModelConfig) -> str:
    """A human name for the config's positional scheme (model card, `info` in the terminal)."""
    if config.positional == "rope":
        parts = [f"base {config.rope_theta:g}"]
        if config.rope_local_theta is not None:
            parts.append(f"sliding layers base {config.rope_local_theta:g}")
        if config.rotary_dims < config.head_dim:
            parts.append(f"{config.rotary_dims} of {config.head_dim} dims per head")
        if config.rope_scaling:
            parts.append(f"{config.rope_scaling.get('rope_type')} scaling")
        if config.nope_layers:
            parts.append(f"no positions on {len(config.nope_layers)} of {config.n_layers} layers")
        return f"RoPE (rotary, {', '.join(parts)})"
    return {
        "learned": "learned absolute positions"
        + (f" (offset {config.learned_position_offset})" if config.learned_position_offset else ""),
        "sinusoidal": f"sinusoidal (base {config.sinusoidal_base:g}" + _SINUSOIDAL_LABELS[config.sinusoidal_layout],
        "relative": f"T5 relative position bias ({config.relative_buckets} buckets)",
        "none": "none",
    }[config.positional]


def card_info(lm: Any) -> dict[str, Any]:
    """`lm.info()` with the structure in words, as the model card shows it."""
    c = lm.config
    return {**lm.info(), "positional_encoding_label": positional_label(c), "block": block_label(c),
            "layer_summary": layer_summary(c)}


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
    mlp = f"{c.get('mlp')} ({c.get('activation')})"
    if c.get("mlp") == "gated":
        mlp = f"gated ({'SwiGLU' if c.get('activation') == 'silu' else c.get('activation')})"
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
    if lang == "zh":  # the checkpoint's own structure, described by the library in English
        rows = [(key, zh_structure(value) if key in _DESCRIBED_ROWS else value) for key, value in rows]
    return [(t(key, lang), value) for key, value in rows]


# Rows whose values are the library's descriptions of a structure (layers, FFN, norm, positions).
_DESCRIBED_ROWS = ("card_layers", "card_ffn", "card_norm", "card_positional")
# The structure descriptions above come from a few fixed templates;
# their words in 中文, longest first so a phrase wins over its parts.
_ZH_PHRASES = (
    (r"pre-norm: ", "前置归一化:"), (r"post-norm: ", "后置归一化:"), (r"sandwich norms: ", "三明治归一化:"),
    (r"output norms: ", "输出归一化:"), (r"parallel residual: ", "并行残差:"),
    (r"RoPE \(rotary, ", "RoPE(旋转位置编码,"), (r"sliding layers base ", "滑动窗口层基数 "),
    (r"(\d+) of (\d+) dims per head", r"每个头 \2 维中的 \1 维"), (r"(\d+) of (\d+) dims rotate", r"\2 维中 \1 维旋转"),
    (r"no positions on (\d+) of (\d+) layers", r"\2 层中 \1 层不用位置"), (r"(\w+) scaling", r"\1 缩放"),
    (r"learned absolute positions", "可学习的绝对位置"), (r"\(offset (\d+)\)", r"(偏移 \1)"),
    (r"sinusoidal \(base ", "正弦位置编码(基数 "), (r"sin half \| cos half", "前半 sin | 后半 cos"),
    (r"positions from row pad \+ 1", "位置从 pad + 1 行开始"),
    (r"T5 relative position bias \((\d+) buckets\)", r"T5 相对位置偏置(\1 个桶)"),
    (r"(\d+) sliding \(window (\d+)", r"\1 层滑动窗口(窗口 \2"), (r"(\d+) full\b", r"\1 层全注意力"),
    (r"RoPE base ", "RoPE 基数 "), (r"no RoPE", "无 RoPE"), (r"\bbase ", "基数 "),
    (r"\bgated\b", "门控"), (r"\bplain\b", "普通"), (r"^none$", "无"),
)


def zh_structure(text: str) -> str:
    """A structure description of the library (layers, FFN, norm, positions) in 中文."""
    for pattern, repl in _ZH_PHRASES:
        text = re.sub(pattern, repl, text)
    return text


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
    caption = t("step_caption", lang, step=step_number(step.step) if number is None else number, token=token, id=step.token_id, p=f"{step.prob:.3f}")
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


def _kv_formula(cache: Mapping[str, Any], lang: str) -> str:
    with language(lang):
        return kv_formula(cache)


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
        + (t("cache_mha", lang, mha=format_bytes(cache["mha_equivalent_bytes"])) if "mha_equivalent_bytes" in cache else ""),
        "",
        _kv_formula(cache, lang) if "element_size" in cache else "",
        "",
        t("kv_symbols", lang),
    ]
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
