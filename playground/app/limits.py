"""The app's limits, in one place: the sliders' ranges, the link parser's bounds and the clamps.

The decoding knobs' ranges come from their one table (`playground.generation.knobs`): the engine's
hard limits and what the app offers (less, so a public server stays responsive). `clamp_settings`
moves whatever a person (or a link) asked for into these ranges and says what it changed, instead of
refusing. No Gradio here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from playground.app.notes import note
from playground.generation.config import DRAFT_TOKENS, KV_DTYPES, GenerationConfig, SettingsError, usable_stop_strings
from playground.generation.knobs import EARLY_STOPPING, KNOBS, Knob, offered_ranges
from playground.generation.plan import ContextFit, context_limit, fit_to_context
from playground.generation.speculative import check_draft
from playground.generation.stepper import stepper_class
from playground.interventions import InterventionError, as_interventions, check
from playground.models.quantize import PRECISIONS
from playground.models.rope_scaling import RopeScalingError, rotary_override
from playground.notes import Note


def _offered_high(name: str) -> int:
    return int(KNOBS[name].offer[1])


@dataclass(frozen=True)
class Caps:
    """Upper limits of what the app runs (the engine itself allows more); the knobs' come from their table."""

    max_new_tokens: int = _offered_high("max_new_tokens")
    num_beams: int = _offered_high("num_beams")
    top_candidates: int = _offered_high("top_candidates")
    prompt_chars: int = 4000  # in the page, in links and in generate_text alike
    prompt_tokens: int = 2048  # likewise, after tokenizing (a chat template adds tokens of its own)
    pace_ms: int = 1000


CAPS = Caps()

# (low, high) of every numeric setting: the widgets' bounds and what a link may ask for.
# The KV lab's: a window of 0 keeps every position (no eviction).
KV_RANGES: dict[str, tuple[float, float]] = {"kv_window": (0, 4096), "kv_sink": (0, 64), "kv_heavy": (0, 256)}
RANGES: dict[str, tuple[float, float]] = {**offered_ranges(), "pace_ms": (0, CAPS.pace_ms), **KV_RANGES,
                                          "draft_tokens": (1, 16)}
# Link values that must be whole numbers.
WHOLE = frozenset({k.name for k in KNOBS.values() if k.kind is int} | {"pace_ms", "draft_tokens"} | set(KV_RANGES))


@dataclass(frozen=True)
class Lenient:
    """The app's one pass over a run's settings: a config every check of the engine accepts, a note per change,
    and how the prompt and the new tokens fit the context (`playground.generation.plan.assemble` takes it)."""

    cfg: GenerationConfig
    notes: list[Note]
    fit: ContextFit


def clamp_settings(
    cfg: GenerationConfig, lm: Any, prompt_ids_len: int, caps: Caps = CAPS
) -> tuple[GenerationConfig, list[Note]]:
    """`lenient`'s config and notes (for callers that plan the run themselves)."""
    done = lenient(cfg, lm, prompt_ids_len, caps=caps)
    return done.cfg, done.notes


def lenient(cfg: GenerationConfig, lm: Any, prompt_ids_len: int, forced_tokens: int = 0, caps: Caps = CAPS) -> Lenient:
    """A copy of `cfg` moved into the range the app and the model accept, and one keyed note per change.

    `lm` needs `.config` and `.kind`; `forced_tokens`: tokens after the prompt that are never dropped (a branch's).
    Never raises for out-of-range knobs: the page shows the notes next to the result instead.
    """
    notes: list[Note] = []
    c = dataclasses.replace(cfg)
    vocab = lm.config.vocab_size

    def flag(name: str, default: bool) -> None:
        if not isinstance(getattr(c, name), bool):
            notes.append(note("not_a_flag", name=name, value=repr(getattr(c, name)), default=default))
            setattr(c, name, default)

    for name, default in (("use_cache", True), ("capture_attention", False), ("chat", False), ("truncate_prompt", False),
                          ("capture_prompt_attention", False), ("capture_residual", False)):
        flag(name, default)
    layers = c.attention_layers
    if layers is not None:
        count = stepper_class(lm.kind).attention_layer_count(lm.config)
        valid = isinstance(layers, (list, tuple)) and all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < count for i in layers)
        if not valid:
            notes.append(note("bad_attention_layers", layers=repr(layers), last=count - 1))
            c.attention_layers = None
    seed = KNOBS["seed"]
    if c.seed is not None and not (seed.typed(c.seed) and seed.in_range(c.seed)):
        notes.append(note("bad_seed", seed=repr(c.seed)))
        c.seed = None
    forced = c.forced_bos_token_id
    if forced is not None and not (isinstance(forced, int) and not isinstance(forced, bool) and 0 <= forced < vocab):
        notes.append(note("bad_forced_bos", value=repr(forced)))
        c.forced_bos_token_id = None
    try:  # the run's edits must fit this model; unusable ones are dropped, never half-applied
        c.interventions = as_interventions(c.interventions)
        check(c.interventions, lm.config)
    except InterventionError as error:
        notes.append(note("edits_dropped", why=error.args[0] if error.args else str(error)))
        c.interventions = ()
    _lenient_kv(c, lm, notes)
    if c.weight_precision is not None and c.weight_precision not in PRECISIONS:
        notes.append(note("precision_bad", value=repr(c.weight_precision)))
        c.weight_precision = None
    tokens = DRAFT_TOKENS  # not a page knob (yet): checked here, not through the KNOBS table
    if not (tokens.typed(c.draft_tokens) and tokens.in_range(c.draft_tokens)):
        notes.append(note("draft_tokens_bad", value=repr(c.draft_tokens)))
        c.draft_tokens = 4
    try:  # a draft this model cannot use is dropped: the run decodes plainly (the same tokens, one per pass)
        check_draft(lm, c)
    except SettingsError as error:
        notes.append(note("draft_dropped", why=str(error)))
        c.draft = None
    if not usable_stop_strings(c.stop_strings):
        notes.append(note("bad_stop_strings", value=repr(c.stop_strings)))
        c.stop_strings = ()
    for knob in KNOBS.values():
        if knob.name != "seed":
            setattr(c, knob.name, _lenient(knob, getattr(c, knob.name), caps, notes))
    if c.top_k > vocab:
        notes.append(note("top_k_vocab", k=c.top_k, vocab=vocab))
        c.top_k = vocab
    if c.num_beams > 1 and (c.temperature > 0 or c.top_k or c.top_p < 1.0 or c.min_p):
        notes.append(note("beam_deterministic"))
    if c.early_stopping not in EARLY_STOPPING:
        notes.append(note("bad_early_stopping", value=repr(c.early_stopping)))
        c.early_stopping = False
    stepper = stepper_class(lm.kind)
    if prompt_ids_len <= 0:
        if stepper.decoder_only and lm.config.bos_token_id is None:
            notes.append(note("empty_prompt_no_bos"))
        else:
            notes.append(note("empty_prompt_start"))
        prompt_ids_len = 1
    fit = fit_to_context(stepper, context_limit(lm, c), prompt_ids_len, c.max_new_tokens,
                         truncate=c.truncate_prompt, shrink=True, forced=forced_tokens)
    notes += fit.notes
    c.max_new_tokens = fit.max_new_tokens
    if fit.keep < prompt_ids_len:
        c.truncate_prompt = True
    return Lenient(c, notes, fit)


def _lenient_kv(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    """The KV lab's settings moved to what the engine runs: each in range, the combinations it refuses undone,
    the plain cache on a model they do not apply to; a note for each change."""
    if c.kv_dtype not in KV_DTYPES:
        notes.append(note("kv_dtype_bad", value=repr(c.kv_dtype)))
        c.kv_dtype = None
    for name, (low, high) in KV_RANGES.items():
        value = getattr(c, name)
        if value is None:
            continue
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        if not ok or (name == "kv_window" and value < 1):
            fixed = None if name == "kv_window" else 0
            notes.append(note("kv_range", name=name, value=repr(value), low=max(low, 1 if name == "kv_window" else low),
                              high=high))
            setattr(c, name, fixed)
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


def _lenient(knob: Knob, value: Any, caps: Caps, notes: list[Note]) -> Any:
    """`value` moved into the knob's range (and under the app's cap), with a note for every change."""
    if not knob.typed(value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            if value != int(value):
                notes.append(note("not_whole", name=knob.name, value=repr(value), fixed=int(value)))
            value = int(value)
        else:
            notes.append(note("not_finite", name=knob.name, value=repr(value), fixed=f"{knob.default:g}"))
            return knob.default
    if knob.kind is float:
        value = float(value)
    if not knob.in_range(value):
        fixed = knob.fallback(value)
        off = knob.off is not None and fixed == knob.off
        notes.append(note("knob_range_off" if off else "knob_range", name=knob.name, value=value,
                          bounds=bounds_note(knob), fixed=fixed))
        value = fixed
    cap = getattr(caps, knob.name, None) if knob.capped else None
    if cap is not None and value > cap:
        notes.append(note("knob_cap", name=knob.name, value=value, cap=cap))
        value = cap
    return value


def bounds_note(knob: Knob) -> Note:
    """A knob's range as a keyed phrase (the words of `Knob.bounds`, in both languages)."""
    low, high = (None if b is None else f"{b:g}" for b in (knob.low, knob.high))
    if low is None and high is None:
        return note("bounds_any")
    if high is None:
        return note("bounds_positive") if knob.low_open and knob.low == 0 else note("bounds_at_least", low=low)
    if knob.low_open:
        return note("bounds_open", low=low, high=high)
    return note("bounds_between" if knob.kind is int else "bounds_closed", low=low, high=high)
