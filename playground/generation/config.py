"""`GenerationConfig`: the decoding knobs, what to record, and their validation.

Semantics follow Hugging Face `generate()`: `temperature == 0` is greedy decoding, `num_beams > 1`
is (deterministic) beam search, otherwise we sample after repetition penalty, temperature, top-k,
top-p and min-p, in that order.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from playground.errors import PlaygroundError
from playground.generation.knobs import EARLY_STOPPING, KNOBS, Knob
from playground.interventions import Intervention, InterventionError, as_interventions
from playground.loaded import LoadedModel
from playground.models.cache_blend import parse_blend
from playground.models.quantize import PRECISIONS
from playground.models.rope_scaling import RopeScalingError, check_rope_scaling


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
    # The KV-cache lab (playground.models.kv_policy); all off: the plain cache. kv_window keeps the last N
    # positions, kv_sink also the first S (StreamingLLM), kv_heavy also the H others with the largest
    # accumulated attention (H2O); kv_dtype stores K per channel and V per token in int8 / int4 codes.
    kv_window: int | None = None
    kv_sink: int = 0
    kv_heavy: int = 0
    kv_dtype: str | None = None  # None | "int8" | "int4"
    # {"type": "linear" | "ntk" | "yarn", "factor": f}: the run's own RoPE table, reaching f times the
    # trained length (playground.models.rope_scaling); the loaded model's table is never changed.
    rope_scaling: dict[str, Any] | None = None
    # The weights at another precision (playground.models.quantize: weight-only, "float32" | "bfloat16" |
    # "float16" | "int8" | "int4"): the run uses a cached copy of the model; None: the model as loaded.
    weight_precision: str | None = None
    # Speculative decoding (playground.generation.speculative): who drafts the next tokens that one pass of
    # the model then checks. None: plain decoding. "ngram": prompt lookup; "layer:K": the model's own first K
    # layers read through its final norm and head; a LoadedModel with the same vocabulary: a second model.
    # The tokens are the model's own either way (greedy: the same ids; sampling: the same distribution).
    draft: str | LoadedModel | None = None
    draft_tokens: int = 4  # tokens drafted per pass of the model
    # CacheBlend (playground.models.cache_blend): the prompt's keys and values but its last token's come from its
    # chunks cached alone, moved to their places, r % of the positions recomputed ("paragraphs@15",
    # "tokens:16@40"); the last prompt token is then computed over them and the run decodes as usual. None: the
    # plain prefill.
    cache_blend: str | None = None

    @property
    def records(self) -> bool:
        """Whether any forward pass records something."""
        return self.capture_attention or self.capture_prompt_attention or self.capture_residual

    @property
    def kv_policy(self) -> bool:
        """Whether the run asks for its own KV cache (eviction, quantisation) or RoPE scaling."""
        return self.kv_window is not None or self.kv_dtype is not None or self.rope_scaling is not None

    @property
    def do_sample(self) -> bool:
        return self.num_beams == 1 and self.temperature > 0.0

    def replace(self, **changes: Any) -> GenerationConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(dataclasses.replace(self, draft=None))  # asdict would copy a draft model's weights
        data["draft"] = draft_name(self.draft)
        data["stop_strings"] = list(self.stop_strings)
        if self.attention_layers is not None:
            data["attention_layers"] = list(self.attention_layers)
        data["interventions"] = [iv.to_dict() for iv in as_interventions(self.interventions)]
        if self.rope_scaling is not None:
            data["rope_scaling"] = dict(self.rope_scaling)
        return data

    def validate(self) -> GenerationConfig:
        """Raise SettingsError naming the knob to change; return self when every value is usable."""
        for knob in KNOBS.values():
            _check(knob, getattr(self, knob.name))
        if self.forced_bos_token_id is not None:
            _check(_FORCED_BOS, self.forced_bos_token_id)
        if self.early_stopping not in EARLY_STOPPING:
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
        if self.weight_precision is not None and self.weight_precision not in PRECISIONS:
            raise SettingsError(
                f"weight_precision is {self.weight_precision!r}; use one of {', '.join(PRECISIONS)} (weight-only), "
                "or none for the model as loaded"
            )
        try:
            self.interventions = as_interventions(self.interventions)
        except InterventionError as error:
            raise SettingsError(str(error)) from None
        self._validate_kv()
        self._validate_blend()
        _check(DRAFT_TOKENS, self.draft_tokens)
        draft_layers(self.draft)  # raises for a draft that is none of the kinds
        return self

    def _validate_blend(self) -> None:
        if self.cache_blend is None:
            return
        try:
            parse_blend(self.cache_blend)
        except ValueError as error:
            raise SettingsError(str(error)) from None
        if not self.use_cache:
            raise SettingsError("cache_blend fills the KV cache: set use_cache=True")
        if self.kv_policy:
            raise SettingsError("cache_blend and a KV-cache policy (kv_window, kv_dtype, rope_scaling) do not combine; "
                                "run one or the other")
        if self.draft is not None:
            raise SettingsError("cache_blend and speculative decoding do not combine; run one or the other")
        if self.interventions:
            raise SettingsError("cache_blend computes the prompt's cache without edits; run the edit or the blend")

    def _validate_kv(self) -> None:
        for knob in KV_KNOBS:
            _check(knob, getattr(self, knob.name))
        if (self.kv_sink or self.kv_heavy) and self.kv_window is None:
            raise SettingsError("kv_sink and kv_heavy add to an eviction window: set kv_window too (e.g. kv_window=64)")
        if self.kv_dtype not in KV_DTYPES:
            raise SettingsError(f"kv_dtype is {self.kv_dtype!r}; use 'int8', 'int4' or none for the model's own dtype")
        if self.kv_dtype is not None and self.kv_window is not None:
            raise SettingsError("kv_dtype and kv_window do not combine yet; run the quantised cache or the eviction alone")
        if self.rope_scaling is not None:
            try:
                check_rope_scaling(self.rope_scaling)
            except RopeScalingError as error:
                raise SettingsError(str(error)) from None
        if self.kv_policy and not self.use_cache:
            raise SettingsError("kv_window, kv_dtype and rope_scaling act on the KV cache: set use_cache=True")


KV_DTYPES = (None, "int8", "int4")
KV_KNOBS = (
    Knob("kv_window", int, None, None, 1, None, "keep at least 1 position, or none for no eviction", optional=True),
    Knob("kv_sink", int, 0, 0, 0, None, "use 0 for no sink, or the first few positions (e.g. 4)"),
    Knob("kv_heavy", int, 0, 0, 0, None, "use 0 for no heavy hitters, or how many to keep (e.g. 16)"),
)

# Not a decoding knob of the page, but checked the same way.
_FORCED_BOS = Knob("forced_bos_token_id", int, None, None, 0, None, "use the token id of the target language code, or none")


DRAFT_TOKENS = Knob("draft_tokens", int, None, None, 1, 16, "draft between 1 and 16 tokens per pass of the model")
_LAYER_DRAFT = re.compile(r"layer:(\d+)")


def draft_layers(draft: Any) -> int | None:
    """The K of a "layer:K" draft (None for the other kinds); SettingsError for something that is no draft."""
    if draft is None or draft == "ngram" or isinstance(draft, LoadedModel):
        return None
    match = _LAYER_DRAFT.fullmatch(draft) if isinstance(draft, str) else None
    if match is None or int(match.group(1)) < 1:
        raise SettingsError(
            f"draft is {draft!r}; use 'ngram', 'layer:K' (K from 1 to the model's layers), a loaded model with the "
            "same vocabulary, or none"
        )
    return int(match.group(1))


def draft_name(draft: str | LoadedModel | None) -> str | None:
    """How a draft is written in settings and links: its string, or "model:<folder name>" for a model."""
    if isinstance(draft, LoadedModel):
        return f"model:{draft.path.name}"
    return draft


def _check(knob: Knob, value: Any) -> None:
    """One line naming the knob, its value and what to do, for a value of the wrong type or range."""
    if value is None and knob.optional:
        return
    if not knob.typed(value):
        kind = "a whole number" if knob.kind is int else "a finite number"
        raise SettingsError(f"{knob.name} must be {kind}, got {value!r}; {knob.hint}")
    if not knob.in_range(value):
        raise SettingsError(f"{knob.name} is {value}; it must be {knob.bounds()}: {knob.hint}")


def usable_stop_strings(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(s, str) and s for s in value)
