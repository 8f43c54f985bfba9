"""One config dataclass for every model family we build.

Choices (norm kind, MLP kind, positional scheme...) are stored as plain strings so the config stays
JSON-serialisable: it travels inside our own safetensors files and into the UI's model card.
Family-specific translation from Hugging Face `config.json` lives in `playground.checkpoints.families`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from playground.errors import ConfigError

Kind = Literal["decoder", "seq2seq"]
NormKind = Literal["rmsnorm", "rmsnorm_f32", "rmsnorm_gemma", "layernorm"]
NormPosition = Literal["pre", "post", "sandwich", "output"]
QKNorm = Literal["none", "head", "projection"]
AttentionType = Literal["full", "sliding"]
MlpKind = Literal["gated", "plain"]
Activation = Literal["silu", "gelu", "gelu_tanh", "relu"]
Positional = Literal["rope", "learned", "sinusoidal", "relative", "none"]
SinusoidalLayout = Literal["interleaved", "halves", "fairseq"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "kind": ("decoder", "seq2seq"),
    "norm": ("rmsnorm", "rmsnorm_f32", "rmsnorm_gemma", "layernorm"),
    "norm_position": ("pre", "post", "sandwich", "output"),
    "qk_norm": ("none", "head", "projection"),
    "mlp": ("gated", "plain"),
    "activation": ("silu", "gelu", "gelu_tanh", "relu"),
    "positional": ("rope", "learned", "sinusoidal", "relative", "none"),
    "sinusoidal_layout": ("interleaved", "halves", "fairseq"),
}


_ENCODER_FIELDS = ("n_encoder_heads", "n_encoder_kv_heads", "encoder_head_dim", "encoder_d_ff")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


ROPE_SCALINGS = ("default", "linear", "llama3", "longrope")


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer does that may differ from its neighbours (`ModelConfig.layer_kinds()`)."""

    index: int
    attention: AttentionType  # "full": every earlier position; "sliding": the last `window` positions
    window: int | None  # keys a query sees, itself included (None: all earlier ones)
    rope: Literal["global", "local"] | None  # which rotary table turns q and k; None: no RoPE on this layer
    rope_theta: float | None  # that table's base
    rope_scaling: str | None  # its scaling type ("linear", "llama3", "longrope"), None: unscaled
    rotary_dims: int  # leading dims of each head that rotate (0 without RoPE)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- meaningless values (see ModelConfig._check_meaningful)
# attention_scale multiplies q·k before the softmax: head_dim ** -0.5 (<= 1) or T5's 1.0 in practice.
# Above 1e3 float16 scores overflow (max 65504) for |q·k| > 65 and float32 softmax is a hard argmax:
# such a value is a corrupt config, not a design.
MAX_ATTENTION_SCALE = 1e3
# The single-id special token fields (the end id may also be a list: see `ModelConfig.eos_token_ids`).
SPECIAL_ID_FIELDS = ("bos_token_id", "pad_token_id", "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id")


def _positive_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value) and value > 0


def _check_rope_scaling(scaling: dict[str, Any]) -> None:
    """Factors of linear / llama3 RoPE scaling: finite positive numbers, high_freq_factor > low_freq_factor."""
    kind = scaling.get("rope_type", "default")
    required = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor")}.get(kind, ())
    for key in (*required, *(k for k in ("factor",) if k in scaling and k not in required)):
        if not _positive_number(scaling.get(key)):
            raise ConfigError(
                f"rope_scaling '{key}' is {scaling.get(key)!r}; {kind} RoPE scaling needs a positive number there"
            )
    if kind == "llama3":
        if scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
            raise ConfigError(
                f"rope_scaling high_freq_factor ({scaling['high_freq_factor']}) must exceed low_freq_factor "
                f"({scaling['low_freq_factor']}); Llama 3 uses 4 and 1"
            )
        original = scaling.get("original_max_position_embeddings")
        if not (_is_int(original) and original > 0):
            raise ConfigError(
                f"rope_scaling 'original_max_position_embeddings' is {original!r}; llama3 RoPE scaling needs a "
                "positive whole number (8192 for Llama 3)"
            )


@dataclass
class ModelConfig:
    """Architecture of a decoder-only or encoder-decoder Transformer.

    For seq2seq models `n_layers` counts decoder layers and `n_encoder_layers` encoder layers; the
    head counts, head size and FFN width describe the decoder (its self- and cross-attention), and the
    `encoder_*` fields the encoder where it differs (DistilBART, mBART variants...): see `encoder_config()`.
    """

    family: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    kind: Kind = "decoder"
    n_kv_heads: int | None = None  # None: same as n_heads (MHA); 1: MQA; otherwise GQA
    head_dim: int | None = None  # None: d_model // n_heads
    n_encoder_layers: int = 0
    max_positions: int = 2048

    # --- blocks
    # rmsnorm: x/rms(x) cast to the dtype, then × w (Llama); rmsnorm_f32: × w before the cast (OLMo 2);
    # rmsnorm_gemma: × (1 + w) before the cast (Gemma stores w - 1)
    norm: NormKind = "rmsnorm"
    norm_eps: float = 1e-5
    norm_bias: bool = True  # LayerNorm only
    # pre: x + f(norm(x)); post: norm(x + f(x)); sandwich: x + norm(f(norm(x))) (Gemma 3);
    # output: x + norm(f(x)) (OLMo 2). sandwich, output and parallel blocks are decoder-only.
    norm_position: NormPosition = "pre"
    parallel_residual: bool = False  # x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX / Pythia)
    final_norm: bool = True  # a norm after the last block (pre-LN models)
    embedding_norm: bool = False  # a norm right after the embeddings (BART's layernorm_embedding)
    mlp: MlpKind = "gated"
    activation: Activation = "silu"
    attention_bias: bool = False  # bias on q, k, v projections
    attention_out_bias: bool = False  # bias on the output projection
    mlp_bias: bool = False
    attention_scale: float | None = None  # None: head_dim ** -0.5 (T5 uses 1.0)
    sliding_window: int | None = None  # a query on a sliding layer sees at most this many keys (itself included)
    qk_norm: QKNorm = "none"  # normalise q and k per head (Qwen3, Gemma 3) or over the whole projection (OLMo 2)

    # --- per-layer structure (see `layer_kinds()`)
    layer_types: list[str] | None = None  # "full" / "sliding" per layer; None: all sliding iff sliding_window
    nope_layers: list[int] = field(default_factory=list)  # layers without RoPE (SmolLM3's NoPE layers)

    # --- positions
    positional: Positional = "rope"
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # {"rope_type": "linear" | "llama3" | "longrope", ...}
    rope_local_theta: float | None = None  # RoPE base of sliding layers, unscaled (Gemma 3); None: as full layers
    partial_rotary_factor: float = 1.0  # fraction of each head's dims that rotate (GPT-NeoX, Phi-4-mini)
    learned_position_offset: int = 0  # BART stores positions shifted by 2
    relative_buckets: int = 32  # T5 relative attention bias
    relative_max_distance: int = 128
    sinusoidal_base: float = 10000.0
    # paper: sin/cos interleaved; Marian, Pegasus: sin half | cos half; "fairseq" (M2M100, NLLB): sin half | cos
    # half with rates base^(-i/(d/2 - 1)), padding tokens get a zero row and the others count from pad + 1
    sinusoidal_layout: SinusoidalLayout = "interleaved"

    # --- embeddings and head
    tie_word_embeddings: bool = True
    d_embed: int | None = None  # embedding width when it differs from d_model (OPT-350m: projected in and out)
    embed_scale: float = 1.0  # sqrt(d_model) for the original Transformer / Marian / Gemma
    logit_scale: float = 1.0  # T5 with tied head rescales by d_model ** -0.5
    final_logits_bias: bool = False  # Marian / BART add a learned bias to the logits
    final_logit_softcap: float | None = None  # logits -> cap · tanh(logits / cap) (Gemma 2 style)

    # --- special tokens
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    decoder_start_token_id: int | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | None = None

    # --- encoder of a seq2seq model, where it differs from the decoder (None: derived in __post_init__)
    n_encoder_heads: int | None = None  # None: n_heads
    n_encoder_kv_heads: int | None = None  # None: n_kv_heads with the decoder's head count, else n_encoder_heads
    encoder_head_dim: int | None = None  # None: head_dim with the decoder's head count, else d_model // heads
    encoder_d_ff: int | None = None  # None: d_ff

    extra: dict[str, Any] = field(default_factory=dict)  # provenance, source config etc.

    def __post_init__(self) -> None:
        self._check_types()
        for name, allowed in _CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(f"config field '{name}' is {value!r}; expected one of {', '.join(allowed)}")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"config field '{name}' must be a positive integer, got {value!r}")
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ConfigError(
                    f"d_model ({self.d_model}) is not divisible by n_heads ({self.n_heads}); "
                    "set head_dim explicitly or fix the head count"
                )
            self.head_dim = self.d_model // self.n_heads
        if self.n_kv_heads <= 0 or self.head_dim <= 0:
            raise ConfigError("config fields 'n_kv_heads' and 'head_dim' must be positive")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads}) "
                "so that query heads can share key/value heads in equal groups"
            )
        if self.rope_scaling and self.rope_scaling.get("rope_type", "default") not in ROPE_SCALINGS:
            raise ConfigError(
                f"config field 'rope_scaling': RoPE scaling {self.rope_scaling.get('rope_type')!r} is not implemented; "
                f"supported: {', '.join(ROPE_SCALINGS)}"
            )
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise ConfigError(f"config field 'partial_rotary_factor' must be in (0, 1], got {self.partial_rotary_factor}")
        if self.positional == "rope" and self.partial_rotary_factor == 1.0 and self.head_dim % 2:
            raise ConfigError(f"RoPE needs an even head_dim, got {self.head_dim}")
        if self.positional == "rope" and (self.rotary_dims % 2 or self.rotary_dims == 0):
            raise ConfigError(
                f"config field 'partial_rotary_factor' ({self.partial_rotary_factor:g}) of head_dim {self.head_dim} "
                f"gives {self.rotary_dims} rotary dims; RoPE rotates whole pairs, so it must be a positive even number"
            )
        self._check_layers()
        if self.rope_scaling and self.rope_scaling.get("rope_type") == "longrope":
            self._check_longrope(self.rope_scaling)
        if self.kind == "seq2seq" and self.n_encoder_layers <= 0:
            raise ConfigError("a seq2seq config needs n_encoder_layers > 0")
        if self.kind == "decoder" and self.n_encoder_layers:
            raise ConfigError("a decoder-only config must have n_encoder_layers = 0; use kind='seq2seq'")
        if self.kind == "seq2seq" and self.positional == "rope":
            raise ConfigError("seq2seq models support sinusoidal, learned, relative or no positions, not RoPE")
        if self.positional == "relative" and not (0 < self.relative_buckets and 0 < self.relative_max_distance):
            raise ConfigError("config fields 'relative_buckets' and 'relative_max_distance' must be positive")
        if self.kind == "seq2seq":
            self._derive_encoder()
        elif any(getattr(self, name) is not None for name in _ENCODER_FIELDS):
            raise ConfigError(f"a decoder-only config has no encoder: leave {', '.join(_ENCODER_FIELDS)} unset")
        if self.positional == "sinusoidal" and self.sinusoidal_layout == "fairseq":
            if self.pad_token_id is None or self.pad_token_id < 0:
                raise ConfigError("fairseq sinusoidal positions count from pad_token_id + 1: set pad_token_id")
            if self.d_model < 4:
                raise ConfigError(f"fairseq sinusoidal positions need d_model >= 4, got {self.d_model}")
        if self.learned_position_offset < 0:
            raise ConfigError("config field 'learned_position_offset' must not be negative")
        if self.norm_eps <= 0:
            raise ConfigError(f"config field 'norm_eps' must be positive, got {self.norm_eps}")
        if self.max_positions > 1_048_576:
            raise ConfigError(f"config field 'max_positions' ({self.max_positions}) is absurdly large")
        if self.max_positions < 2:
            raise ConfigError(f"config field 'max_positions' is {self.max_positions}: the model holds too few positions "
                              "for any prompt and one new token (it needs at least 2)")
        self._check_meaningful()

    def _derive_encoder(self) -> None:
        """Fill the encoder fields left None from the decoder's, then check them like the decoder's."""
        same_heads = self.n_encoder_heads is None or self.n_encoder_heads == self.n_heads
        if self.n_encoder_heads is None:
            self.n_encoder_heads = self.n_heads
        if self.encoder_d_ff is None:
            self.encoder_d_ff = self.d_ff
        for name in _ENCODER_FIELDS:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"config field '{name}' must be a positive integer, got {value!r}")
        if self.n_encoder_kv_heads is None:
            self.n_encoder_kv_heads = self.n_kv_heads if same_heads else self.n_encoder_heads
        if self.encoder_head_dim is None:
            if same_heads:
                self.encoder_head_dim = self.head_dim
            elif self.d_model % self.n_encoder_heads:
                raise ConfigError(
                    f"d_model ({self.d_model}) is not divisible by n_encoder_heads ({self.n_encoder_heads}); "
                    "set encoder_head_dim explicitly or fix the encoder's head count"
                )
            else:
                self.encoder_head_dim = self.d_model // self.n_encoder_heads
        if self.n_encoder_heads % self.n_encoder_kv_heads:
            raise ConfigError(
                f"n_encoder_heads ({self.n_encoder_heads}) must be a multiple of n_encoder_kv_heads "
                f"({self.n_encoder_kv_heads}) so that query heads can share key/value heads in equal groups"
            )

    def _check_layers(self) -> None:
        """Per-layer structure and the decoder-only features."""
        for name in ("sliding_window", "d_embed"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"config field '{name}' must be a positive integer or null, got {value}")
        for name in ("final_logit_softcap", "rope_local_theta"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"config field '{name}' must be positive or null, got {value}")
        if self.rope_theta <= 0:
            raise ConfigError(f"config field 'rope_theta' must be positive, got {self.rope_theta}")
        if self.layer_types is not None:
            if len(self.layer_types) != self.n_layers:
                raise ConfigError(
                    f"config field 'layer_types' lists {len(self.layer_types)} layers but n_layers is {self.n_layers}"
                )
            wrong = [t for t in self.layer_types if t not in ("full", "sliding")]
            if wrong:
                raise ConfigError(f"config field 'layer_types' has {wrong[0]!r}; each entry must be 'full' or 'sliding'")
            if "sliding" in self.layer_types and self.sliding_window is None:
                raise ConfigError("config field 'layer_types' names sliding layers but 'sliding_window' is not set")
        if any(not 0 <= i < self.n_layers for i in self.nope_layers) or len(set(self.nope_layers)) != len(self.nope_layers):
            raise ConfigError(f"config field 'nope_layers' must list distinct layer indices below {self.n_layers}")
        if self.nope_layers and self.positional != "rope":
            raise ConfigError("config field 'nope_layers' only applies to RoPE models (positional='rope')")
        if self.parallel_residual and self.norm_position != "pre":
            raise ConfigError("a parallel residual block normalises before each branch: needs norm_position='pre'")
        if self.kind == "seq2seq":
            decoder_only = {
                "norm_position": self.norm_position in ("sandwich", "output"), "parallel_residual": self.parallel_residual,
                "layer_types": self.layer_types is not None, "nope_layers": bool(self.nope_layers),
                "qk_norm": self.qk_norm != "none", "d_embed": self.d_embed is not None,
                "final_logit_softcap": self.final_logit_softcap is not None,
                "sliding_window": self.sliding_window is not None,
            }
            used = [name for name, on in decoder_only.items() if on]
            if used:
                raise ConfigError(f"config field '{used[0]}' is only implemented for decoder-only models")

    def _check_longrope(self, scaling: dict[str, Any]) -> None:
        pairs = self.rotary_dims // 2
        for name in ("short_factor", "long_factor"):
            factors = scaling.get(name)
            if not (isinstance(factors, list) and len(factors) == pairs
                    and all((_is_int(f) or isinstance(f, float)) and math.isfinite(f) and f > 0 for f in factors)):
                raise ConfigError(f"longrope scaling needs '{name}': {pairs} positive numbers (one per rotary pair)")
        original = scaling.get("original_max_position_embeddings")
        if not _is_int(original) or original <= 0:
            raise ConfigError("longrope scaling needs a positive integer 'original_max_position_embeddings'")
        for name in ("factor", "attention_factor"):
            value = scaling.get(name)
            if value is not None and not ((_is_int(value) or isinstance(value, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"longrope scaling field '{name}' must be a positive number, got {value!r}")

    def _check_types(self) -> None:
        # Configs arrive from untrusted files: a string where a number belongs must fail here, clearly.
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), f.type
            optional = "None" in kind
            if value is None:
                if optional:
                    continue
                raise ConfigError(f"config field '{f.name}' must not be null")
            if kind.startswith("int | list[int]"):
                ok = _is_int(value) or (isinstance(value, list) and all(_is_int(v) for v in value))
            elif kind.startswith("list[int]"):
                ok = isinstance(value, list) and all(_is_int(v) for v in value)
            elif kind.startswith("list[str]"):
                ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            elif kind.startswith("int"):
                ok = _is_int(value)
            elif kind.startswith("float"):
                ok = (_is_int(value) or isinstance(value, float)) and math.isfinite(value)
            elif kind.startswith("bool"):
                ok = isinstance(value, bool)
            elif kind.startswith("dict"):
                ok = isinstance(value, dict)
            else:  # str and Literal choices
                ok = isinstance(value, str)
            if not ok:
                raise ConfigError(f"config field '{f.name}' has the wrong type ({type(value).__name__}: {value!r})")

    # --- values that parse but cannot mean anything (untrusted files reach here)
    def _check_meaningful(self) -> None:
        """Refuse by name the values no model can use: they would load and then compute nonsense."""
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ConfigError(
                f"config field 'sliding_window' is {self.sliding_window}; a query must see at least one key: "
                "use a positive window, or null for none"
            )
        if self.attention_scale is not None and not 0 < self.attention_scale <= MAX_ATTENTION_SCALE:
            raise ConfigError(
                f"config field 'attention_scale' is {self.attention_scale}; it multiplies q·k and must be in "
                f"(0, {MAX_ATTENTION_SCALE:g}] (usually head_dim ** -0.5, or 1.0 for T5): use null for the default"
            )
        for name in ("rope_theta", "sinusoidal_base"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config field '{name}' is {getattr(self, name)}; it must be positive (usually 10000)")
        if self.rope_scaling:
            _check_rope_scaling(self.rope_scaling)

    # --- derived
    def encoder_config(self) -> ModelConfig:
        """The config as the encoder's blocks see it: the encoder's head counts, head size and FFN width
        in the decoder's fields (the blocks read only those). The config itself when they match."""
        if self.kind != "seq2seq":
            raise ValueError("only a seq2seq config has an encoder")
        changes = dict(
            n_heads=self.n_encoder_heads, n_kv_heads=self.n_encoder_kv_heads, head_dim=self.encoder_head_dim,
            d_ff=self.encoder_d_ff,
        )
        if all(getattr(self, name) == value for name, value in changes.items()):
            return self
        return dataclasses.replace(self, **changes)

    @property
    def symmetric(self) -> bool:
        """Whether a seq2seq model's encoder and decoder have as many layers, of the same shapes."""
        return self.kind != "seq2seq" or (self.n_encoder_layers == self.n_layers and self.encoder_config() is self)

    @property
    def kv_groups(self) -> int:
        """Query heads per key/value head (1 for MHA)."""
        return self.n_heads // self.n_kv_heads

    @property
    def attention_kind(self) -> str:
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else f"GQA ({self.kv_groups} query heads per KV head)"

    @property
    def rotary_dims(self) -> int:
        """Leading dimensions of each head that RoPE rotates (as transformers: int(head_dim × factor))."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def embed_dim(self) -> int:
        """Width of the token embeddings (d_model unless projected in and out)."""
        return self.d_embed if self.d_embed is not None else self.d_model

    def layer_kinds(self) -> list[LayerKind]:
        """What each (decoder) layer does: full or sliding-window attention, RoPE on/off and its base.

        Sliding layers use the local RoPE base when the config has one (Gemma 3), else the global one.
        """
        types = self.layer_types or ["sliding" if self.sliding_window is not None else "full"] * self.n_layers
        nope = set(self.nope_layers)
        kinds = []
        for i, attention in enumerate(types):
            rope: str | None = None
            if self.positional == "rope" and i not in nope:
                rope = "local" if attention == "sliding" and self.rope_local_theta is not None else "global"
            kinds.append(
                LayerKind(
                    index=i,
                    attention=attention,  # type: ignore[arg-type]
                    window=self.sliding_window if attention == "sliding" else None,
                    rope=rope,  # type: ignore[arg-type]
                    rope_theta=None if rope is None else self.rope_local_theta if rope == "local" else self.rope_theta,
                    rope_scaling=None if rope != "global" or not self.rope_scaling else self.rope_scaling.get("rope_type"),
                    rotary_dims=self.rotary_dims if rope is not None else 0,
                )
            )
        return kinds

    @property
    def scale(self) -> float:
        return self.attention_scale if self.attention_scale is not None else self.head_dim**-0.5

    @property
    def eos_token_ids(self) -> list[int]:
        if self.eos_token_id is None:
            return []
        return [self.eos_token_id] if isinstance(self.eos_token_id, int) else list(self.eos_token_id)

    def special_ids(self) -> dict[str, int]:
        """Every special token id the config names, keyed by field (`eos_token_id.1` for the second end id)."""
        ids = {name: getattr(self, name) for name in SPECIAL_ID_FIELDS if getattr(self, name) is not None}
        eos = self.eos_token_ids
        ids.update({"eos_token_id" if len(eos) == 1 else f"eos_token_id.{i}": value for i, value in enumerate(eos)})
        return ids

    def special_ids_outside_vocab(self) -> dict[str, int]:
        """The special ids no token of the vocabulary has. Tiny checkpoints often keep GPT-2's 50256 with a
        170-token vocabulary; transformers loads them and treats such an id as a token that never occurs
        (an end id outside the vocabulary never ends a run). So do we: only a use that needs the token
        itself (starting the decoder, an empty prompt's start token, a forced token) refuses it."""
        return {name: value for name, value in self.special_ids().items() if not 0 <= value < self.vocab_size}

    # --- serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        if not isinstance(data, dict):
            raise ConfigError("a model config must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as error:  # a missing required field
            raise ConfigError(f"incomplete config: {error}") from None
