"""The app's limits, in one place: the sliders' ranges, the link parser's bounds and the clamps.

The engine has its own hard limits (`playground.generation.config`); the app offers less, so a
public server stays responsive. `clamp_settings` moves whatever a person (or a link) asked for into
these ranges and says what it changed, instead of refusing. No Gradio here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from playground.generation.config import MAX_SEED, GenerationConfig, usable_stop_strings
from playground.generation.plan import fit_to_context
from playground.generation.stepper import stepper_class
from playground.interventions import InterventionError, as_interventions, check


@dataclass(frozen=True)
class Caps:
    """Upper limits of what the app runs (the engine itself allows more)."""

    max_new_tokens: int = 1024
    num_beams: int = 8
    top_candidates: int = 20
    prompt_chars: int = 4000  # in the page, in links and in generate_text alike
    prompt_tokens: int = 2048  # likewise, after tokenizing (a chat template adds tokens of its own)
    pace_ms: int = 1000


CAPS = Caps()

# (low, high) of every numeric setting: the widgets' bounds and what a link may ask for.
RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 5.0),
    "top_k": (0, 500),
    "top_p": (0.01, 1.0),
    "repetition_penalty": (0.5, 3.0),
    "num_beams": (1, CAPS.num_beams),
    "length_penalty": (-3.0, 3.0),
    "max_new_tokens": (1, CAPS.max_new_tokens),
    "seed": (0, 2**31 - 1),
    "top_candidates": (1, CAPS.top_candidates),
    "pace_ms": (0, CAPS.pace_ms),
}


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

    def num(value: Any, default: float, name: str) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        notes.append(f"{name} {value!r} is not a finite number: using {default:g}")
        return default

    def whole(value: Any, default: int, name: str) -> int:
        x = num(value, default, name)
        if x != int(x):
            notes.append(f"{name} {value!r} is not a whole number: using {int(x)}")
        return int(x)

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
    if c.seed is not None and not (isinstance(c.seed, int) and not isinstance(c.seed, bool) and 0 <= c.seed <= MAX_SEED):
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
    if not usable_stop_strings(c.stop_strings):
        notes.append(f"stop strings {c.stop_strings!r} are not a list of non-empty texts: using none")
        c.stop_strings = ()
    c.temperature = num(c.temperature, 0.0, "temperature")
    if c.temperature < 0:
        notes.append(f"temperature {c.temperature} is negative: using 0 (greedy decoding)")
        c.temperature = 0.0
    c.top_p = num(c.top_p, 1.0, "top_p")
    if not 0.0 < c.top_p <= 1.0:
        notes.append(f"top_p {c.top_p} is outside (0, 1]: using 1.0 (top-p off)")
        c.top_p = 1.0
    c.min_p = num(c.min_p, 0.0, "min_p")
    if not 0.0 <= c.min_p <= 1.0:
        notes.append(f"min_p {c.min_p} is outside [0, 1]: using 0 (min-p off)")
        c.min_p = 0.0
    c.repetition_penalty = num(c.repetition_penalty, 1.0, "repetition_penalty")
    if c.repetition_penalty <= 0:
        notes.append(f"repetition penalty {c.repetition_penalty} must be positive: using 1 (off)")
        c.repetition_penalty = 1.0
    c.length_penalty = num(c.length_penalty, 1.0, "length_penalty")
    c.top_k = whole(c.top_k, 0, "top_k")
    if c.top_k < 0:
        notes.append(f"top_k {c.top_k} is negative: using 0 (top-k off)")
        c.top_k = 0
    if c.top_k > vocab:
        notes.append(f"top_k {c.top_k} is more than the vocabulary ({vocab} tokens): using {vocab}")
        c.top_k = vocab
    c.num_beams = whole(c.num_beams, 1, "num_beams")
    if c.num_beams < 1:
        notes.append(f"num_beams {c.num_beams} is below 1: using 1 (no beam search)")
        c.num_beams = 1
    if c.num_beams > caps.num_beams:
        notes.append(f"num_beams {c.num_beams} is above the limit of {caps.num_beams}: using {caps.num_beams}")
        c.num_beams = caps.num_beams
    if c.num_beams > 1 and (c.temperature > 0 or c.top_k or c.top_p < 1.0 or c.min_p):
        notes.append("beam search is deterministic: temperature, top-k, top-p and min-p are ignored")
    candidates = whole(c.top_candidates, 5, "top_candidates")
    c.top_candidates = min(max(candidates, 0), caps.top_candidates)
    if c.top_candidates != candidates:
        notes.append(f"top_candidates {candidates} is outside 0..{caps.top_candidates}: using {c.top_candidates}")
    if c.early_stopping not in (True, False, "never"):
        notes.append(f"early_stopping {c.early_stopping!r} is not true, false or 'never': using false")
        c.early_stopping = False

    c.max_new_tokens = whole(c.max_new_tokens, 32, "max_new_tokens")
    if c.max_new_tokens < 1:
        notes.append(f"max_new_tokens {c.max_new_tokens} is below 1: using 1")
        c.max_new_tokens = 1
    if c.max_new_tokens > caps.max_new_tokens:
        notes.append(f"max_new_tokens {c.max_new_tokens} is above the limit of {caps.max_new_tokens}: using {caps.max_new_tokens}")
        c.max_new_tokens = caps.max_new_tokens

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
