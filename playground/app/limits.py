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

from playground.generation.config import DRAFT_TOKENS, GenerationConfig, SettingsError, usable_stop_strings
from playground.generation.knobs import EARLY_STOPPING, KNOBS, Knob, offered_ranges
from playground.generation.plan import fit_to_context
from playground.generation.speculative import check_draft
from playground.generation.stepper import stepper_class
from playground.interventions import InterventionError, as_interventions, check


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
RANGES: dict[str, tuple[float, float]] = {**offered_ranges(), "pace_ms": (0, CAPS.pace_ms)}
# Link values that must be whole numbers.
WHOLE = frozenset({k.name for k in KNOBS.values() if k.kind is int} | {"pace_ms"})


def clamp_settings(
    cfg: GenerationConfig, lm: Any, prompt_ids_len: int, caps: Caps = CAPS
) -> tuple[GenerationConfig, list[str]]:
    """A copy of `cfg` moved into the range the app and the model accept, and one human note per change.

    `lm` needs `.config` and `.kind`. Never raises for out-of-range knobs: the page shows the notes
    next to the result instead.
    """
    notes: list[str] = []
    c = dataclasses.replace(cfg)
    vocab = lm.config.vocab_size

    def flag(name: str, default: bool) -> None:
        if not isinstance(getattr(c, name), bool):
            notes.append(f"{name} {getattr(c, name)!r} is not true or false: using {default}")
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
            notes.append(f"attention_layers {layers!r} are not layer indices 0..{count - 1}: recording every layer")
            c.attention_layers = None
    seed = KNOBS["seed"]
    if c.seed is not None and not (seed.typed(c.seed) and seed.in_range(c.seed)):
        notes.append(f"seed {c.seed!r} is not a non-negative whole number: using a random seed")
        c.seed = None
    forced = c.forced_bos_token_id
    if forced is not None and not (isinstance(forced, int) and not isinstance(forced, bool) and 0 <= forced < vocab):
        notes.append(f"forced_bos_token_id {forced!r} is not a token id of this model: using the checkpoint's own")
        c.forced_bos_token_id = None
    try:  # the run's edits must fit this model; unusable ones are dropped, never half-applied
        c.interventions = as_interventions(c.interventions)
        check(c.interventions, lm.config)
    except InterventionError as error:
        notes.append(f"interventions {error}: running without them")
        c.interventions = ()
    tokens = DRAFT_TOKENS  # not a page knob (yet): checked here, not through the KNOBS table
    if not (tokens.typed(c.draft_tokens) and tokens.in_range(c.draft_tokens)):
        notes.append(f"draft_tokens {c.draft_tokens!r} is not a whole number from 1 to 16: using 4")
        c.draft_tokens = 4
    try:  # a draft this model cannot use is dropped: the run decodes plainly (the same tokens, one per pass)
        check_draft(lm, c)
    except SettingsError as error:
        notes.append(f"{error}: decoding without a draft")
        c.draft = None
    if not usable_stop_strings(c.stop_strings):
        notes.append(f"stop strings {c.stop_strings!r} are not a list of non-empty texts: using none")
        c.stop_strings = ()
    for knob in KNOBS.values():
        if knob.name != "seed":
            setattr(c, knob.name, _lenient(knob, getattr(c, knob.name), caps, notes))
    if c.top_k > vocab:
        notes.append(f"top_k {c.top_k} is more than the vocabulary ({vocab} tokens): using {vocab}")
        c.top_k = vocab
    if c.num_beams > 1 and (c.temperature > 0 or c.top_k or c.top_p < 1.0 or c.min_p):
        notes.append("beam search is deterministic: temperature, top-k, top-p and min-p are ignored")
    if c.early_stopping not in EARLY_STOPPING:
        notes.append(f"early_stopping {c.early_stopping!r} is not true, false or 'never': using false")
        c.early_stopping = False
    stepper = stepper_class(lm.kind)
    if prompt_ids_len <= 0:
        if stepper.decoder_only and lm.config.bos_token_id is None:
            notes.append("the prompt is empty and this model has no BOS token to start from: type a prompt")
        else:
            notes.append("the prompt is empty: generating from the start token alone")
        prompt_ids_len = 1
    fit = fit_to_context(stepper, stepper.context_limit(lm.config), prompt_ids_len, c.max_new_tokens,
                         truncate=c.truncate_prompt, shrink=True)
    notes += fit.notes
    c.max_new_tokens = fit.max_new_tokens
    if fit.keep < prompt_ids_len:
        c.truncate_prompt = True
    return c, notes


def _lenient(knob: Knob, value: Any, caps: Caps, notes: list[str]) -> Any:
    """`value` moved into the knob's range (and under the app's cap), with a note for every change."""
    if not knob.typed(value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            if value != int(value):
                notes.append(f"{knob.name} {value!r} is not a whole number: using {int(value)}")
            value = int(value)
        else:
            notes.append(f"{knob.name} {value!r} is not a finite number: using {knob.default:g}")
            return knob.default
    if knob.kind is float:
        value = float(value)
    if not knob.in_range(value):
        fixed = knob.fallback(value)
        off = " (off)" if knob.off is not None and fixed == knob.off else ""
        notes.append(f"{knob.name} {value} must be {knob.bounds()}: using {fixed}{off}")
        value = fixed
    cap = getattr(caps, knob.name, None) if knob.capped else None
    if cap is not None and value > cap:
        notes.append(f"{knob.name} {value} is above the limit of {cap}: using {cap}")
        value = cap
    return value
