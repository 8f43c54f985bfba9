"""Per-request memory budget: what a generation will allocate, estimated before it allocates.

`estimate_request` is a pure function of the model's config and the request's shape; every term is
a closed formula over the sizes below (e = bytes per element of the model's dtype, 4 for the
float32 numbers that captures keep):

    L, E      decoder / encoder layers          B   rows = num_beams x batch
    h, h_kv   query / key-value heads           P   prompt tokens (the source for seq2seq)
    d, d_h    model width / head size           T   decoder positions held = prefix + new tokens
    F, V      MLP width / vocabulary            N   new tokens
    (encoder terms use the encoder's own heads, head size and MLP width: ModelConfig.encoder_config())

    kv_cache         2·L·B·h_kv·T·d_h·e (+ 2·L·h_kv·P·d_h·e: beam search prefills one row first)
    cross_cache      seq2seq: 2·L·B·h_kv·P·d_h·e cross K/V + the encoder output P·d·e
    activations      one forward pass: tokens·(4d + 2(h + 2h_kv)·d_h + 2h·d_h + 4F [+ 4(h + h_kv)·d_h
                     for RoPE])·e, tokens = P for the prefill (B·T per step without a cache),
                     + 8·B·V·4 for the logits stages
    masks            explicit masks and biases over the prompt: a sliding window shorter than the
                     prompt (6·P²: boolean masks and SDPA's float copy), T5's relative bias
                     (h·P²·e + 40·P² of bucket indices)
    prompt_attention layers recorded at the prefill keep (h, P, P) weights each: n·h·P²·e, + 3·h·P²·4
                     while one layer computes its softmax; prompt_maps: the float32 maps a run keeps
                     with capture_prompt_attention, n·h·P²·4
    attention_rows   per step and recorded layer, each row's attention over the keys:
                     Σ_t n·B·h·S_t·4 with S_t = P + t (self) or P (cross)
    residual         per step B·(L + 1)·d·4; at the prefill (L + 1)·P·d·e
    final_maps       generate_all with capture_attention: one pass over the final sequence keeping every
                     layer's (h, T, T) maps (and (h, T, P) cross, (h, P, P) encoder): in e and float32
    tokens           the token buffers of the stepper and beam search: 4·B·T·8
    runtime          32 MiB of allocator and interpreter slack
    policy_scratch   an evicting KV policy (`kv_window` shorter than the run) masks its prompt pass per query: 4·P²
                     booleans and SDPA's float copy, 4·P²; with heavy hitters (`kv_heavy`) it computes the explicit
                     softmax, in query chunks of at most `POLICY_SCRATCH_BYTES` of scores (`models.kv_policy`):
                     three (h, c, P) float32 blocks (scores, masked, softmax)
    draft_cache      speculative decoding with a model drafter (a second model, or the target's first K layers):
                     its own rewindable cache, 2·L_d·h_kv,d·T_d·d_h,d·e_d with T_d = min(T + K, its context)
    draft_activations that drafter's first pass reads the whole prompt: P·width_d·e_d + 8·V·4

Parts live in phases (`PHASES`: the prefill, the decoding steps, the final maps after the run) and
the request's peak is its largest phase. The model itself (`LoadedModel.resident_bytes`: weights, position tables, module objects, counted at
load time) plus the request must fit in `Limits.memory_budget_bytes`. `playground.generation.plan`
calls `check_request` for every run, so the CLI, `generate`, `generate_all` and the app all get it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from playground.checkpoints.limits import Limits, human_bytes
from playground.config import ModelConfig
from playground.generation.config import GenerationConfig, SettingsError
from playground.loaded import LoadedModel
from playground.models.kv_policy import policy_chunk

F32 = 4


class BudgetError(SettingsError):
    """A request that would not fit the memory budget; the message gives the numbers and the knob."""


@dataclass(frozen=True)
class DraftShape:
    """A model drafter's share of a run (speculative decoding): the drafting model's config and element size, the
    layers it runs (all of a second model's, K of the target's) and the positions its own cache holds."""

    config: ModelConfig
    element_size: int
    layers: int
    positions: int


@dataclass(frozen=True)
class Request:
    """The shape of one run, as far as memory goes."""

    prompt_tokens: int  # what the model reads first: the decoder prompt, or the seq2seq source
    prefix_tokens: int  # the decoder stream's start: the prompt (decoder-only) or the start token
    max_new_tokens: int
    num_beams: int = 1
    batch: int = 1
    use_cache: bool = True
    capture_attention: bool = False
    attention_layers: tuple[int, ...] | None = None  # None: every layer
    capture_prompt_attention: bool = False
    capture_residual: bool = False
    final_maps: bool = False  # attention maps over the whole final sequence (generate_all, the panels)
    final_layers: tuple[int, ...] | None = None  # the layers those maps cover (None: every layer)
    policy_window: int | None = None  # an evicting KV policy's window (its prompt pass masks every query)
    policy_heavy: int = 0  # its heavy hitters (the prompt pass scores every key explicitly)
    draft: DraftShape | None = field(default=None, compare=False)  # a model drafter's cache and passes

    @classmethod
    def of(cls, cfg: GenerationConfig, prompt_tokens: int, prefix_tokens: int, *, final_maps: bool = False,
           draft: DraftShape | None = None) -> Request:
        layers = None if cfg.attention_layers is None else tuple(cfg.attention_layers)
        return cls(prompt_tokens, prefix_tokens, cfg.max_new_tokens, cfg.num_beams, 1, cfg.use_cache,
                   cfg.capture_attention, layers, cfg.capture_prompt_attention, cfg.capture_residual, final_maps,
                   policy_window=cfg.kv_window, policy_heavy=cfg.kv_heavy or 0, draft=draft)

    @property
    def rows(self) -> int:
        return self.num_beams * self.batch

    @property
    def positions(self) -> int:
        """Decoder positions the run holds (the stepper's buffers): prefix + new tokens."""
        return self.prefix_tokens + self.max_new_tokens


@dataclass(frozen=True)
class RequestEstimate:
    parts: dict[str, int]  # bytes per term (see the module docstring), zero terms left out
    resident: int  # the model itself
    budget: int
    copy: int = 0  # a copy of the model at another weight precision the run needs (playground.variants.copy_bytes)
    copy_name: str = ""  # that precision

    @property
    def request(self) -> int:
        """The run's peak: its largest phase (prefill, decoding, or the final attention maps)."""
        return peak_bytes(self.parts)[0]

    @property
    def peak_phase(self) -> str:
        return peak_bytes(self.parts)[1]

    @property
    def total(self) -> int:
        return self.resident + self.copy + self.request

    @property
    def fits(self) -> bool:
        return self.total <= self.budget


def _recorded(layers: tuple[int, ...] | None, count: int) -> int:
    return count if layers is None else len({i for i in layers if 0 <= i < count})


# Phases of a run, and the parts alive in each: the run's peak is the largest phase.
PHASES: dict[str, tuple[str, ...]] = {
    "prefill": ("kv_cache", "cross_cache", "activations", "masks", "prompt_attention", "policy_scratch", "draft_cache",
                "tokens", "runtime"),
    "decode": ("kv_cache", "cross_cache", "activations", "prompt_maps", "attention_rows", "residual", "draft_cache",
               "draft_activations", "tokens", "runtime"),
    "final": ("final_maps", "prompt_maps", "attention_rows", "residual", "tokens", "runtime"),
}
RUNTIME_BYTES = 32 * 1024**2  # allocator and interpreter slack, measured at 10-15 MiB on small runs


def estimate_request(config: ModelConfig, element_size: int, r: Request) -> dict[str, int]:
    """Bytes of each part of a run (see the module docstring for the formulas); `peak_bytes` combines them."""
    c, e = config, element_size
    L, E, h, hk, dh, d, V = c.n_layers, c.n_encoder_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.d_model, c.vocab_size
    B, P, N, T = r.rows, r.prompt_tokens, r.max_new_tokens, r.positions
    seq2seq = c.kind == "seq2seq"
    parts: dict[str, int] = {"runtime": RUNTIME_BYTES}

    if r.use_cache:
        parts["kv_cache"] = 2 * L * B * hk * T * dh * e
        if B > 1 and not seq2seq:
            parts["kv_cache"] += 2 * L * hk * P * dh * e  # the one-row prefill cache, copied into every beam
    if seq2seq:
        cross_layers = L if r.use_cache else 1  # without a cache each layer projects the source again
        parts["cross_cache"] = 2 * cross_layers * B * hk * P * dh * e + P * d * e

    enc = c.encoder_config() if seq2seq else c  # the encoder's own heads, head size and FFN width
    if seq2seq:  # the encoder reads the source once; the decoder reads B rows (B·T per step without a cache)
        decoder_tokens = B if r.use_cache else B * T
        parts["activations"] = max(P * _width(enc), decoder_tokens * _width(c)) * e + 8 * B * V * F32
    else:
        pass_tokens = max(P, B) if r.use_cache else max(P, B * T)
        parts["activations"] = pass_tokens * _width(c) * e + 8 * B * V * F32
    if r.capture_residual:  # the recorder keeps views of each block's (P, d) output during the prefill
        parts["activations"] += (L + 1) * P * d * e

    square = P if r.use_cache else max(P, T)  # the longest (queries x keys) a pass attends over
    masks = 0
    if c.sliding_window is not None and square > c.sliding_window:
        masks += 6 * square * square  # two boolean (P, P) masks, and the float copy SDPA makes of one
    if c.positional == "relative":  # the (h, P, P) bias and its bucket indices, encoder or decoder side
        masks += max(enc.n_heads * P * P, h * square * square) * e + 40 * square * square
    parts["masks"] = masks

    if r.capture_attention or r.capture_prompt_attention:
        n = _recorded(r.attention_layers, L)
        if seq2seq:
            maps = _recorded(r.attention_layers, E) * enc.n_heads * P * P + n * h * r.prefix_tokens * (r.prefix_tokens + P)
        else:
            maps = n * h * P * P
        parts["prompt_attention"] = maps * e + 3 * h * P * P * F32  # kept weights + one layer's softmax
        if r.capture_prompt_attention:
            parts["prompt_maps"] = maps * F32  # the float32 maps a run keeps (shared with the weights in float32)

    if r.capture_attention:
        n = _recorded(r.attention_layers, L)
        keys = N * (N + 1) // 2 + N * P if seq2seq else N * P + N * (N - 1) // 2  # Σ_t keys seen at step t
        parts["attention_rows"] = n * B * h * keys * F32

    if r.capture_residual:
        parts["residual"] = N * B * (L + 1) * d * F32

    if r.final_maps:
        final = r.prefix_tokens + N if seq2seq else P + N
        nd, ne = _recorded(r.final_layers, L), _recorded(r.final_layers, E)
        maps = nd * h * final * final + ((ne * enc.n_heads * P * P + nd * h * final * P) if seq2seq else 0)
        parts["final_maps"] = maps * (e + F32) + 3 * h * max(final, P) ** 2 * F32

    if r.policy_window is not None and r.use_cache and not seq2seq and r.policy_window < T:
        parts["policy_scratch"] = 8 * P * P  # the prompt pass's masks (one row: beam search prefills one)
        if r.policy_heavy:
            parts["policy_scratch"] += 3 * h * min(P, policy_chunk(h, P)) * P * F32

    if r.draft is not None:
        dc, de = r.draft.config, r.draft.element_size
        parts["draft_cache"] = 2 * r.draft.layers * dc.n_kv_heads * r.draft.positions * dc.head_dim * de
        window = dc.sliding_window is not None and P > dc.sliding_window
        parts["draft_activations"] = P * _width(dc) * de + 8 * dc.vocab_size * F32 + (6 * P * P if window else 0)

    parts["tokens"] = 4 * B * T * 8
    return {name: value for name, value in parts.items() if value}


def _width(c: ModelConfig) -> int:
    """Elements per token a block holds at its peak: the input and norms, q/k/v and the attention
    output (twice: projections and reshapes), the MLP's hidden layer, and RoPE's rotated q and k."""
    width = 4 * c.d_model + 2 * (c.n_heads + 2 * c.n_kv_heads) * c.head_dim + 2 * c.n_heads * c.head_dim + 4 * c.d_ff
    if c.positional == "rope":
        width += 4 * (c.n_heads + c.n_kv_heads) * c.head_dim  # the rotated half, two products and their sum
    return width


def peak_bytes(parts: dict[str, int]) -> tuple[int, str]:
    """(bytes, phase) of the largest phase of a run: what must fit besides the model."""
    sums = {phase: sum(parts.get(p, 0) for p in members) for phase, members in PHASES.items()}
    phase = max(sums, key=sums.__getitem__)
    return sums[phase], phase


def _knob(part: str, r: Request) -> str:
    fewer = "use fewer beams, a shorter prompt or fewer new tokens" if r.num_beams > 1 else (
        "use a shorter prompt or fewer new tokens")
    return {
        "attention_rows": "record attention for fewer layers (attention_layers) or turn attention capture off",
        "prompt_attention": "turn prompt attention capture off, record fewer layers or use a shorter prompt",
        "final_maps": "turn attention capture off or use a shorter prompt",
        "residual": "turn the residual-stream capture off or ask for fewer new tokens",
        "policy_scratch": "use a shorter prompt or a KV window without heavy hitters",
        "draft_cache": "draft with a smaller model (or the model's own first layers), or use a shorter prompt",
        "draft_activations": "draft with a smaller model (or the model's own first layers), or use a shorter prompt",
    }.get(part, fewer)


def _describe(r: Request) -> str:
    tokens = f"{r.prompt_tokens:,}-token prompt + {r.max_new_tokens:,} new tokens"
    return f"beam {r.num_beams} × ({tokens})" if r.num_beams > 1 else f"a {tokens}"


def check_request(lm: LoadedModel, request: Request, copy: tuple[str, int] | None = None) -> RequestEstimate:
    """Estimate `request` on `lm`; raise BudgetError (one line: the numbers and the knob) if the model
    plus the request would exceed `lm.limits.memory_budget_bytes`. `copy`: (precision, bytes) of the copy of
    the model the run decodes with (weight_precision), checked before it is built."""
    limits = lm.limits or Limits.default()
    element_size = lm.dtype.itemsize
    name, extra = copy if copy is not None else ("", 0)
    estimate = RequestEstimate(estimate_request(lm.config, element_size, request), lm.resident_bytes,
                               limits.memory_budget_bytes, extra, name)
    if estimate.fits:
        return estimate
    model = f"the model {human_bytes(estimate.resident)}" + (f", its {name} copy {human_bytes(extra)}" if extra else "")
    if estimate.resident + extra > estimate.budget:
        if extra:
            raise BudgetError(
                f"the model ({human_bytes(estimate.resident)}) and its {name} copy ({human_bytes(extra)}) take "
                f"{human_bytes(estimate.resident + extra)} but the memory budget is {human_bytes(estimate.budget)}: "
                f"run it at its own precision, or load a smaller model (or raise PLAYGROUND_MEMORY_BUDGET_BYTES)"
            )
        raise BudgetError(
            f"the model alone takes {human_bytes(estimate.resident)} but the memory budget is "
            f"{human_bytes(estimate.budget)}: load a smaller model (or raise PLAYGROUND_MEMORY_BUDGET_BYTES)"
        )
    phase = PHASES[estimate.peak_phase]
    ranked = sorted(((k, v) for k, v in estimate.parts.items() if k in phase and k != "runtime"), key=lambda kv: -kv[1])
    detail = ", ".join(f"{part.replace('_', ' ')} {human_bytes(value)}" for part, value in ranked[:3])
    raise BudgetError(
        f"{_describe(request)} needs {human_bytes(estimate.total)} ({detail}, {model}), the budget is "
        f"{human_bytes(estimate.budget)}: {_knob(ranked[0][0], request)}"
    )


def check_full_attention(
    lm: LoadedModel, prompt_tokens: int, generated_tokens: int, layers: list[int] | None = None
) -> RequestEstimate:
    """The budget check for `full_attention(lm, prompt_ids, token_ids, layers)` over a finished run (what
    the attention panels compute): call it first with the same lengths and layers."""
    prefix = prompt_tokens if lm.kind == "decoder" else 1
    request = Request(prompt_tokens, prefix, generated_tokens, use_cache=False, final_maps=True,
                      final_layers=None if layers is None else tuple(layers))
    return check_request(lm, request)
