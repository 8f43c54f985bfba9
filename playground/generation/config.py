"""`GenerationConfig`: the decoding knobs, their validation, and `clamp_settings` for the UI.

Semantics follow Hugging Face `generate()`: `temperature == 0` is greedy decoding, `num_beams > 1`
is (deterministic) beam search, otherwise we sample after repetition penalty, temperature, top-k,
top-p and min-p, in that order.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from playground.errors import PlaygroundError

if TYPE_CHECKING:
    from playground.loaded import LoadedModel

MAX_BEAMS = 16  # the engine's hard limit; the UI caps lower (Caps.num_beams)
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed accepts up to this


class SettingsError(PlaygroundError):
    """Generation settings that cannot work; the message says which knob to change and how."""


@dataclass
class GenerationConfig:
    max_new_tokens: int = 32
    temperature: float = 0.0  # 0: greedy (deterministic)
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    repetition_penalty: float = 1.0  # 1.0: off
    num_beams: int = 1  # > 1: beam search (deterministic; sampling knobs are ignored)
    length_penalty: float = 1.0
    early_stopping: bool | str = False  # True, False or "never", as in transformers
    seed: int | None = None
    use_cache: bool = True
    capture_attention: bool = False
    top_candidates: int = 5  # candidates per StepEvent (0: none, fastest)
    chat: bool = False  # wrap a text prompt in the checkpoint's chat template
    min_p: float = 0.0  # 0.0: off
    stop_strings: tuple[str, ...] = ()
    truncate_prompt: bool = False  # drop tokens from the left of a prompt that does not fit the context

    @property
    def do_sample(self) -> bool:
        return self.num_beams == 1 and self.temperature > 0.0

    def replace(self, **changes: Any) -> "GenerationConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["stop_strings"] = list(self.stop_strings)
        return data

    def validate(self) -> "GenerationConfig":
        """Raise SettingsError naming the knob to change; return self when every value is usable."""
        _int(self, "max_new_tokens", 1, None, "ask for at least 1 new token")
        _int(self, "top_k", 0, None, "use 0 to switch top-k off")
        _int(self, "num_beams", 1, MAX_BEAMS, f"use 1 (no beam search) up to {MAX_BEAMS} beams")
        _int(self, "top_candidates", 0, 1000, "use 0 to skip the candidate list, or a small number like 5")
        if self.seed is not None:
            _int(self, "seed", 0, MAX_SEED, "use a non-negative integer seed, or none")
        _float(self, "temperature")
        if self.temperature < 0:
            raise SettingsError(f"temperature is {self.temperature}; use 0 for greedy decoding or a positive value")
        _float(self, "top_p")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingsError(f"top_p is {self.top_p}; it must be in (0, 1] (1 switches top-p off)")
        _float(self, "min_p")
        if not 0.0 <= self.min_p <= 1.0:
            raise SettingsError(f"min_p is {self.min_p}; it must be in [0, 1] (0 switches min-p off)")
        _float(self, "repetition_penalty")
        if self.repetition_penalty <= 0:
            raise SettingsError(
                f"repetition_penalty is {self.repetition_penalty}; it must be positive (1 switches it off)"
            )
        _float(self, "length_penalty")
        if self.early_stopping not in (True, False, "never"):
            raise SettingsError(f"early_stopping is {self.early_stopping!r}; use True, False or 'never'")
        for name in ("use_cache", "capture_attention", "chat", "truncate_prompt"):
            if not isinstance(getattr(self, name), bool):
                raise SettingsError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not _usable_stop_strings(self.stop_strings):
            raise SettingsError("stop_strings must be a list of non-empty strings")
        return self


def _int(cfg: GenerationConfig, name: str, low: int, high: int | None, hint: str) -> None:
    value = getattr(cfg, name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SettingsError(f"{name} must be a whole number, got {value!r}; {hint}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise SettingsError(f"{name} is {value}; it must be {bound}: {hint}")


def _usable_stop_strings(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(s, str) and s for s in value)


def _float(cfg: GenerationConfig, name: str) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SettingsError(f"{name} must be a finite number, got {value!r}")


@dataclass(frozen=True)
class Caps:
    """Upper limits the UI keeps settings within (the engine itself allows more)."""

    max_new_tokens: int = 1024
    num_beams: int = 8
    top_candidates: int = 20


def context_limit(lm: "LoadedModel") -> int:
    """How many decoder positions the model has (prompt + new tokens for decoder-only models)."""
    return lm.config.max_positions


def decoder_start_length(lm: "LoadedModel") -> int:
    """Tokens the seq2seq decoder starts from before generating (the decoder start token)."""
    return 1 if lm.kind == "seq2seq" else 0


def clamp_settings(
    cfg: GenerationConfig, lm: "LoadedModel", prompt_ids_len: int, caps: Caps = Caps()
) -> tuple[GenerationConfig, list[str]]:
    """A copy of `cfg` moved into the range the engine and the model accept, and one human note per change.

    Never raises for out-of-range knobs: the UI shows the notes next to the result instead.
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

    for name, default in (("use_cache", True), ("capture_attention", False), ("chat", False), ("truncate_prompt", False)):
        flag(name, default)
    if c.seed is not None and not (isinstance(c.seed, int) and not isinstance(c.seed, bool) and 0 <= c.seed <= MAX_SEED):
        notes.append(f"seed {c.seed!r} is not a non-negative whole number: using a random seed")
        c.seed = None
    if not _usable_stop_strings(c.stop_strings):
        notes.append(f"stop strings {c.stop_strings!r} are not a list of non-empty texts: using none")
        c.stop_strings = ()
    c.temperature = num(c.temperature, 0.0, "temperature")
    if c.temperature < 0:
        notes.append(f"temperature {c.temperature} is negative: using 0 (greedy decoding)")
        c.temperature = 0.0
    c.top_p = num(c.top_p, 1.0, "top_p")
    if not 0.0 < c.top_p <= 1.0:
        new = 1.0 if c.top_p > 1.0 or c.top_p <= 0.0 else c.top_p
        notes.append(f"top_p {c.top_p} is outside (0, 1]: using {new} (top-p off)")
        c.top_p = new
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

    context = context_limit(lm)
    if prompt_ids_len <= 0:
        bos = lm.config.bos_token_id if lm.kind == "decoder" else None
        if lm.kind == "decoder" and bos is None:
            notes.append("the prompt is empty and this model has no BOS token to start from: type a prompt")
        else:
            notes.append("the prompt is empty: generating from the start token alone")
        prompt_ids_len = 1
    if lm.kind == "seq2seq" and lm.config.positional in ("relative", "none"):
        room = c.max_new_tokens  # T5's relative positions set no length limit
    elif lm.kind == "seq2seq":
        if prompt_ids_len > context:
            notes.append(
                f"the source has {prompt_ids_len} tokens but the encoder holds {context}: "
                f"dropping the first {prompt_ids_len - context} tokens (truncated on the left)"
            )
            c.truncate_prompt = True
        room = context - decoder_start_length(lm)
    else:
        room = context - prompt_ids_len
        if room < 1:
            new = max(1, min(c.max_new_tokens, context // 4))
            keep = context - new
            notes.append(
                f"the prompt has {prompt_ids_len} tokens but the model holds {context}: dropping the first "
                f"{prompt_ids_len - keep} tokens (truncated on the left) to leave room for {new} new tokens"
            )
            c.truncate_prompt = True
            room = new
    if c.max_new_tokens > room:
        notes.append(
            f"max_new_tokens {c.max_new_tokens} does not fit the model's remaining context of {room} tokens: using {room}"
        )
        c.max_new_tokens = room
    return c, notes
