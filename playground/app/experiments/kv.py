"""The KV-cache lab: fork a run under a cache policy (a sliding window, attention sinks, heavy hitters, an int8/int4
cache, a RoPE scaling) and compare it with the run it forked from: the bytes each holds per step, the saving, where
the texts part (the divergence along the plain run's tokens), and the attention-sink mass on the first token per
layer and head."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Generator
from typing import Any

from playground.analysis.kv_policies import iter_divergence_along, iter_sink_mass
from playground.app.describe import format_bytes, inert
from playground.app.experiments.base import (
    Action,
    Experiment,
    Fork,
    ForkError,
    ForkRequest,
    Out,
    Row,
    Widget,
    Words,
    compared_with,
)
from playground.app.fields import Field, rope_dict
from playground.app.notes import note, render
from playground.app.run import Run
from playground.app.view import HIDDEN, Context, Drawn, Selection, View, shown
from playground.app.words import t
from playground.generation.config import KV_DTYPES, GenerationConfig
from playground.models.rope_scaling import RopeScalingError, rotary_override
from playground.notes import Note
from playground.steps import step_number
from playground.viz import kv_policy as figures

SINK_STEPS = 16  # the sink mass averages this many greedy steps of the prompt (every layer's softmax recorded)
_MEASURED: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()  # (run, plain run) -> its numbers
_KEEP = 32
WINDOW = Field("kv_window", "whole", 0, 0, 4096, widget=False)  # keep the last N positions (0: no eviction)
SINK = Field("kv_sink", "whole", 0, 0, 64, widget=False)  # and the first S (attention sinks)
HEAVY = Field("kv_heavy", "whole", 0, 0, 256, widget=False)  # and H others by accumulated attention (heavy hitters)
COUNTS = (WINDOW, SINK, HEAVY)


# --- its settings -------------------------------------------------------------------------------------


def has_policy(settings: Any) -> bool:
    """Whether the settings ask for a cache of their own, not the plain cache."""
    return bool(settings.kv_window or settings.kv_dtype or settings.rope_scaling)


def config(settings: Any) -> dict[str, Any]:
    """GenerationConfig's KV-cache settings (none for the plain cache); combinations the engine refuses are moved by
    `lenient`, with a note."""
    kw: dict[str, Any] = {f.name: getattr(settings, f.name) for f in COUNTS if getattr(settings, f.name)}
    if settings.kv_dtype:
        kw["kv_dtype"] = settings.kv_dtype
    if settings.rope_scaling:
        try:
            kw["rope_scaling"] = rope_dict(settings.rope_scaling)
        except ValueError:  # widgets bind their values; a text that is none of them asks for nothing
            pass
    return kw


def lenient(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    """Each setting in range, the combinations the engine refuses undone, the plain cache on a model they do not
    apply to; a note for each change."""
    if c.kv_dtype not in KV_DTYPES:
        notes.append(note("kv_dtype_bad", value=repr(c.kv_dtype)))
        c.kv_dtype = None
    for row in COUNTS:
        value = getattr(c, row.name)
        low = 1 if row is WINDOW else row.low  # a window holds one position at least (None: no window)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and low <= value <= row.high):
            notes.append(note("kv_range", name=row.name, value=repr(value), low=low, high=row.high))
            setattr(c, row.name, None if row is WINDOW else 0)
    if (c.kv_sink or c.kv_heavy) and c.kv_window is None:
        notes.append(note("kv_needs_window"))
        c.kv_sink = c.kv_heavy = 0
    if c.kv_dtype is not None and c.kv_window is not None:
        notes.append(note("kv_dtype_window"))
        c.kv_dtype = None
    if c.rope_scaling is not None and lm.kind == "decoder":
        try:
            rotary_override(lm.config, c.rope_scaling)
        except RopeScalingError as error:
            notes.append(note("rope_dropped", why=error.args[0] if error.args else str(error)))
            c.rope_scaling = None
    if c.kv_policy and lm.kind != "decoder":
        notes.append(note("kv_decoder_only"))
        c.kv_window, c.kv_sink, c.kv_heavy, c.kv_dtype, c.rope_scaling = None, 0, 0, None, None


def badge(settings: Any) -> list[Note]:
    """The policy in words ("window 16 + 4 sinks", "int8 cache", "RoPE ntk × 4"; [] for the plain cache)."""
    words = []
    if settings.kv_dtype:
        words.append(note("kvlab_policy_quant", dtype=settings.kv_dtype))
    if settings.kv_window:
        words.append(note("kvlab_policy_kept", n=settings.kv_window,
                          sinks=note("kvlab_policy_sink", n=settings.kv_sink) if settings.kv_sink else "",
                          heavy=note("kvlab_policy_heavy", n=settings.kv_heavy) if settings.kv_heavy else ""))
    if settings.rope_scaling:
        kind, _, factor = settings.rope_scaling.partition(":")
        words.append(note("kvlab_policy_scaled", kind=kind, factor=factor))
    return words


def fork(req: ForkRequest) -> Fork:
    """The run again under the chosen cache policy and RoPE scaling; refused for neither, or for a window with a
    quantised cache."""
    window, sink, heavy = (max(0, int(req.values.get(f.name) or 0)) for f in COUNTS)
    dtype = str(req.values.get("kv_dtype") or "")
    dtype = dtype if dtype in KV_DTYPES else ""
    rope = str(req.values.get("rope_scaling") or "")
    try:
        rope = rope if rope and rope_dict(rope) else ""
    except ValueError:
        rope = ""
    if dtype and window:
        raise ForkError(note("kvlab_both"))
    if not dtype and not window and not rope:
        raise ForkError(note("kvlab_choose"))
    return Fork({"kv_window": window, "kv_sink": sink if window else 0, "kv_heavy": heavy if window else 0,
                 "kv_dtype": dtype, "rope_scaling": rope})


def rope_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("kvlab_dtype_none", lang), ""),
            *((f"{k}:{f}", f"{k}:{f}") for f in (2, 4) for k in ("linear", "ntk", "yarn"))]


def kv_dtype_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("kvlab_dtype_none", lang), ""), ("int8", "int8"), ("int4", "int4")]


# --- its numbers ----------------------------------------------------------------------------------------


def _bare(cfg: GenerationConfig) -> GenerationConfig:
    """A run's config without what it recorded (the same tokens, nothing captured)."""
    return cfg.replace(capture_attention=False, attention_layers=None, capture_residual=False, top_candidates=0)


def bytes_series(run: Run) -> dict[str, list[int]]:
    """Per step (numbered as on the page): the KV bytes the run's cache held, and what the plain cache holds at
    that length (a policy cache reports both; a plain run's are the same)."""
    rows = [(e.step, e.cache) for e in run.events if e.cache]
    return {"steps": [run.step_number(s) for s, _ in rows], "held": [int(c.get("bytes", 0)) for _, c in rows],
            "plain": [int(c.get("plain_bytes", c.get("bytes", 0))) for _, c in rows],
            "kept": [int(c.get("kept_positions", c.get("tokens", 0))) for _, c in rows]}


def sink_config(run: Run) -> GenerationConfig:
    """The greedy steps of `run`'s prompt over which the sink mass is averaged."""
    return GenerationConfig(max_new_tokens=max(1, min(SINK_STEPS, len(run.path))), chat=False, use_cache=True)


def measure_slices(lm: Any, run: Run, plain: Run | None) -> Generator[None, None, dict[str, Any]]:
    """The lab's numbers for `run` (and the run it is compared with), one forward pass per `next()`: bytes per step
    of each, the divergence along the plain run's tokens, and the sink mass; remembered per pair (runs never change
    once finished)."""
    key = (run.token, plain.token if plain is not None else "")
    if key in _MEASURED:
        _MEASURED.move_to_end(key)
        return _MEASURED[key]
    sink = yield from iter_sink_mass(lm, list(run.prompt_ids), sink_config(run))
    out: dict[str, Any] = {"bytes": bytes_series(run), "sink": sink.tolist(), "div": None}
    if plain is not None and has_policy(run.settings) and lm.kind == "decoder":
        tokens = [s.token_id for s in plain.path]
        div = yield from iter_divergence_along(lm, list(run.prompt_ids), _bare(plain.cfg), _bare(run.cfg), tokens,
                                               [s.token_id for s in run.path])
        out["div"] = div.to_dict()
        out["plain_bytes"] = bytes_series(plain)
    _MEASURED[key] = out
    while len(_MEASURED) > _KEEP:
        _MEASURED.popitem(last=False)
    return out


# --- its view ---------------------------------------------------------------------------------------------


def compute(ctx: Context, sel: Selection) -> Generator[None, None, dict[str, Any]]:
    """In slices (one forward pass each): the sink mass and the divergence rerun the prompt."""
    run, lm = ctx.run, ctx.lm
    policy = has_policy(run.settings)
    plain = compared_with(run, ctx.runs) if policy else None
    if plain is not None and has_policy(plain.settings):
        plain = None  # the policy is compared with the plain cache only
    numbers = yield from measure_slices(lm, run, plain)
    return {
        "number": run.number, "policy": badge(run.settings), "plain": None if plain is None else plain.number,
        "plain_texts": [s.token_text for s in plain.path] if plain is not None else [],
        "texts": [s.token_text for s in run.path], **numbers,
    }


def _policy(d: dict[str, Any], lang: str) -> str:
    return " · ".join(render(n, lang) for n in d["policy"])


def draw(d: dict[str, Any], lang: str) -> Drawn:
    out: Drawn = {"kvlab_bytes": HIDDEN, "kvlab_div": HIDDEN, "kvlab_sink": shown(figures.sink_figure(d["sink"],
                                                                                                      lang=lang))}
    if d["policy"]:
        out["kvlab_bytes"] = shown(figures.bytes_figure(d["bytes"], _policy(d, lang), lang=lang))
    if d["div"] is not None:
        out["kvlab_div"] = shown(figures.divergence_figure(d["div"], d["plain_texts"], lang=lang))
    return out


def caption(d: dict[str, Any], lang: str) -> str:
    """What the policy run saved and changed against the plain run (the tab's intro says the ideas)."""
    if not d["policy"]:
        return t("kvlab_plain", lang, n=d["number"])
    b = d["bytes"]
    held, plain, kept = b["held"][-1], b["plain"][-1], b["kept"][-1]
    saved = plain - held
    lines = [t("kvlab_saved", lang, n=d["number"], policy=_policy(d, lang), held=format_bytes(held),
               plain=format_bytes(plain), saved=format_bytes(saved), share=saved / plain if plain else 0.0, kept=kept)]
    if d["plain"] is None:
        lines.append(t("kvlab_no_plain", lang))
    else:
        lines += _against(d, lang)
    return ("" if lang == "zh" else " ").join(lines)


def _against(d: dict[str, Any], lang: str) -> list[str]:
    """Where the texts part from the plain run's, and how far the distributions move along its tokens."""
    div = d["div"]
    first = div["first_difference"] if div is not None else None
    if first is None:
        lines = [t("kvlab_same_text", lang, n=d["plain"])]
    else:
        ours = d["texts"][first] if first < len(d["texts"]) else ""
        theirs = d["plain_texts"][first] if first < len(d["plain_texts"]) else ""
        # both runs read the request from its start: their steps are counted from there
        lines = [t("kvlab_parted", lang, n=d["plain"], step=step_number(first), token=_quoted(ours),
                   plain_token=_quoted(theirs))]
    if div is not None and div["kl"]:
        kl = div["kl"]
        lines.append(t("kvlab_kl", lang, mean=sum(kl) / len(kl), most=max(kl), step=step_number(kl.index(max(kl)))))
        lines.append(t("kvlab_ppl", lang, plain=perplexity(div["original_prob"]), policy=perplexity(div["prob"])))
    return lines


def perplexity(probs: list[float]) -> float:
    """exp of the mean negative log-probability of the plain run's tokens (teacher-forced)."""
    return math.exp(-sum(math.log(max(p, 1e-300)) for p in probs) / len(probs)) if probs else float("nan")


def _quoted(text: str) -> str:
    """A token inside a sentence's quotes: shown as the model wrote it, creating no Markdown."""
    return inert(text.replace("\n", "↵")) or "∅"


def idle(lang: str, words: str) -> Drawn:
    return {"kvlab_bytes": HIDDEN, "kvlab_div": HIDDEN, "kvlab_sink": HIDDEN}


VIEW = View("kvlab", "kvlab", frozenset({"finished"}), ("kvlab_md", "kvlab_bytes", "kvlab_div", "kvlab_sink"),
            compute, draw, caption, idle, waits="kvlab_needs_run", busy="kvlab_after_run")


def _count(row: Field, label: str, elem_id: str) -> Widget:
    return Widget(row.name, "slider", label, elem_id, default=0, info=f"{label}_info", low=row.low, high=row.high,
                  field=row.name, min_width=200)


EXPERIMENT = Experiment(
    name="kv", tab="kvlab", elem_id="kvlab-tab", order=20,
    fields=(*COUNTS, Field("kv_dtype", "choice", "", choices=("", "int8", "int4"), widget=False),
            # "linear:2" | "ntk:4" | "yarn:2" …: the run's own RoPE table, past the trained length
            Field("rope_scaling", "text", "", check=rope_dict, widget=False)),
    layout=(
        Words("kvlab_intro", ("kvlab_intro",), "kvlab-intro"),
        Row((_count(WINDOW, "kvlab_window", "kv-window"), _count(SINK, "kvlab_sink", "kv-sink"),
             _count(HEAVY, "kvlab_heavy", "kv-heavy"),
             Widget("kv_dtype", "radio", "kvlab_dtype", "kv-dtype", default="", choices=kv_dtype_choices,
                    field="kv_dtype", min_width=200),
             Widget("rope_scaling", "dropdown", "kvlab_rope", "rope-scaling", default="", choices=rope_choices,
                    field="rope_scaling", min_width=200)), elem_id="kvlab-policy"),
        Action("kvlab_fork", "fork", "kvlab_fork", "kvlab-fork-btn",
               inputs=("kv_window", "kv_sink", "kv_heavy", "kv_dtype", "rope_scaling"), run=fork),
        Out("kvlab_md", "markdown", "kvlab-md", words="kvlab_needs_run"),
        Out("kvlab_bytes", "plot", "kvlab-bytes-plot"),
        Out("kvlab_div", "plot", "kvlab-divergence-plot"),
        Out("kvlab_sink", "plot", "kvlab-sink-plot"),
    ),
    view=VIEW, badge=badge, config=config, lenient=lenient, needs_run="kvlab_needs_run",
)
