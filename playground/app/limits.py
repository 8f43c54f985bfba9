"""The app's limits and its one lenient pass over a run's config.

The decoding knobs' ranges come from their one table (`playground.generation.knobs`): the engine's hard limits and
what the app offers (less, so a public server stays responsive); the other settings' from their rows
(`playground.app.fields`, each experiment's). `lenient` moves whatever a person, a link or a script asked for into
these ranges and says what it changed, instead of refusing: one small rule per concern, then each setting's and
each experiment's own. No Gradio here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from playground.app import experiments
from playground.app.fields import PACE_MS
from playground.app.notes import note
from playground.generation.config import GenerationConfig, usable_stop_strings
from playground.generation.knobs import EARLY_STOPPING, KNOBS, Knob
from playground.generation.plan import ContextFit, context_limit, fit_to_context
from playground.generation.stepper import stepper_class
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
    pace_ms: int = PACE_MS


CAPS = Caps()


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
    for rule in (_flags, _attention_layers, _seed, _forced_bos):
        rule(c, lm, notes)
    for experiment in experiments.EXPERIMENTS:  # in their order: a drafter is checked against the cache it runs with
        for row in experiment.fields:
            if row.lenient is not None:
                row.lenient(c, lm, notes)
        if experiment.lenient is not None:
            experiment.lenient(c, lm, notes)
    if not usable_stop_strings(c.stop_strings):
        notes.append(note("bad_stop_strings", value=repr(c.stop_strings)))
        c.stop_strings = ()
    _knobs(c, lm, notes, caps)
    fit = _fit(c, lm, notes, prompt_ids_len, forced_tokens)
    return Lenient(c, notes, fit)


def _flags(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    for name, default in (("use_cache", True), ("capture_attention", False), ("chat", False), ("truncate_prompt", False),
                          ("capture_prompt_attention", False), ("capture_residual", False)):
        if not isinstance(getattr(c, name), bool):
            notes.append(note("not_a_flag", name=name, value=repr(getattr(c, name)), default=default))
            setattr(c, name, default)


def _attention_layers(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    layers = c.attention_layers
    if layers is None:
        return
    count = stepper_class(lm.kind).attention_layer_count(lm.config)
    valid = isinstance(layers, (list, tuple)) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < count for i in layers)
    if not valid:
        notes.append(note("bad_attention_layers", layers=repr(layers), last=count - 1))
        c.attention_layers = None


def _seed(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    seed = KNOBS["seed"]
    if c.seed is not None and not (seed.typed(c.seed) and seed.in_range(c.seed)):
        notes.append(note("bad_seed", seed=repr(c.seed)))
        c.seed = None


def _forced_bos(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    forced = c.forced_bos_token_id
    if forced is not None and not (isinstance(forced, int) and not isinstance(forced, bool)
                                   and 0 <= forced < lm.config.vocab_size):
        notes.append(note("bad_forced_bos", value=repr(forced)))
        c.forced_bos_token_id = None


def _knobs(c: GenerationConfig, lm: Any, notes: list[Note], caps: Caps) -> None:
    """Every decoding knob in its range and under the app's caps; the combinations that mean nothing said."""
    for knob in KNOBS.values():
        if knob.name != "seed":
            setattr(c, knob.name, _lenient(knob, getattr(c, knob.name), caps, notes))
    vocab = lm.config.vocab_size
    if c.top_k > vocab:
        notes.append(note("top_k_vocab", k=c.top_k, vocab=vocab))
        c.top_k = vocab
    if c.num_beams > 1 and (c.temperature > 0 or c.top_k or c.top_p < 1.0 or c.min_p):
        notes.append(note("beam_deterministic"))
    if c.early_stopping not in EARLY_STOPPING:
        notes.append(note("bad_early_stopping", value=repr(c.early_stopping)))
        c.early_stopping = False


def _fit(c: GenerationConfig, lm: Any, notes: list[Note], prompt_ids_len: int, forced_tokens: int) -> ContextFit:
    """How the prompt and the new tokens fit the model's context (the new tokens moved to fit, once)."""
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
    return fit


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
