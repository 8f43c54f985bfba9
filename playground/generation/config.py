"""`GenerationConfig`: the decoding knobs, what to record, and their validation.

Semantics follow Hugging Face `generate()`: `temperature == 0` is greedy decoding, `num_beams > 1`
is (deterministic) beam search, otherwise we sample after repetition penalty, temperature, top-k,
top-p and min-p, in that order.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from playground.errors import PlaygroundError
from playground.interventions import Intervention, InterventionError, as_interventions

MAX_BEAMS = 16  # the engine's hard limit (the app offers fewer: playground.app.limits)
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
    capture_attention: bool = False  # each step's attention row of the new token (StepEvent.attention)
    top_candidates: int = 5  # candidates per StepEvent (0: none, fastest)
    chat: bool = False  # wrap a text prompt in the checkpoint's chat template
    min_p: float = 0.0  # 0.0: off
    stop_strings: tuple[str, ...] = ()
    truncate_prompt: bool = False  # drop tokens from the left of a prompt that does not fit the context
    # What else to record (all off: the fast path). Recording a layer's attention makes that layer
    # compute the explicit softmax instead of SDPA; the others stay on the fast path.
    attention_layers: tuple[int, ...] | None = None  # layers whose attention is recorded (None: all)
    capture_prompt_attention: bool = False  # the whole prompt's attention at prefill (StepEvent.prompt_attention)
    capture_residual: bool = False  # the new position's residual stream after each block (StepEvent.residual)
    # The first generated token, forced (transformers' forced_bos_token_id): the target language code of
    # mBART-50, M2M100 and NLLB (see playground.generation.languages). None: the checkpoint's own setting.
    forced_bos_token_id: int | None = None
    # Edits to the model's computation at every forward pass (playground.interventions): Ablate, Steer,
    # Patch, or their dicts (converted by validate). Empty: the model runs unedited, nothing installed.
    interventions: tuple[Intervention, ...] = ()

    @property
    def records(self) -> bool:
        """Whether any forward pass records something."""
        return self.capture_attention or self.capture_prompt_attention or self.capture_residual

    @property
    def do_sample(self) -> bool:
        return self.num_beams == 1 and self.temperature > 0.0

    def replace(self, **changes: Any) -> GenerationConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["stop_strings"] = list(self.stop_strings)
        if self.attention_layers is not None:
            data["attention_layers"] = list(self.attention_layers)
        data["interventions"] = [iv.to_dict() for iv in as_interventions(self.interventions)]
        return data

    def validate(self) -> GenerationConfig:
        """Raise SettingsError naming the knob to change; return self when every value is usable."""
        _int(self, "max_new_tokens", 1, None, "ask for at least 1 new token")
        _int(self, "top_k", 0, None, "use 0 to switch top-k off")
        _int(self, "num_beams", 1, MAX_BEAMS, f"use 1 (no beam search) up to {MAX_BEAMS} beams")
        _int(self, "top_candidates", 0, 1000, "use 0 to skip the candidate list, or a small number like 5")
        if self.seed is not None:
            _int(self, "seed", 0, MAX_SEED, "use a non-negative integer seed, or none")
        if self.forced_bos_token_id is not None:
            _int(self, "forced_bos_token_id", 0, None, "use the token id of the target language code, or none")
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
        for name in ("use_cache", "capture_attention", "chat", "truncate_prompt", "capture_prompt_attention",
                     "capture_residual"):
            if not isinstance(getattr(self, name), bool):
                raise SettingsError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not usable_stop_strings(self.stop_strings):
            raise SettingsError("stop_strings must be a list of non-empty strings")
        layers = self.attention_layers
        if layers is not None and not (
            isinstance(layers, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)
        ):
            raise SettingsError(f"attention_layers must be a list of layer indices (or none for all), got {layers!r}")
        try:
            self.interventions = as_interventions(self.interventions)
        except InterventionError as error:
            raise SettingsError(str(error)) from None
        return self


def _int(cfg: GenerationConfig, name: str, low: int, high: int | None, hint: str) -> None:
    value = getattr(cfg, name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SettingsError(f"{name} must be a whole number, got {value!r}; {hint}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise SettingsError(f"{name} is {value}; it must be {bound}: {hint}")


def usable_stop_strings(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(s, str) and s for s in value)


def _float(cfg: GenerationConfig, name: str) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SettingsError(f"{name} must be a finite number, got {value!r}")
