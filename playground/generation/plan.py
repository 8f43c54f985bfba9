"""Planning a run: settings and a prompt -> a validated `Plan`, before any forward pass.

One rule decides how a prompt and the new tokens share the model's positions (`fit_to_context`):
the engine applies it strictly (refuse, or truncate when asked), the app leniently (shrink and say so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.config import ModelConfig
from playground.generation.budget import DraftShape, Request, check_request
from playground.generation.config import GenerationConfig, SettingsError
from playground.generation.processors import Pipeline, build_pipeline
from playground.generation.speculative import DraftSpec, resolve_draft
from playground.generation.stepper import Stepper, stepper_class
from playground.interventions import InterventionError, check
from playground.loaded import LoadedModel
from playground.models.cache_blend import chunk_starts, parse_blend, why_not_movable
from playground.models.kv_policy import KVPolicy
from playground.models.rope_scaling import RopeScalingError, rotary_override
from playground.notes import Note
from playground.variants import VARIANTS, Builder, copy_bytes, run_here, variant


@dataclass(frozen=True)
class ContextFit:
    """How a prompt of `prompt_len` tokens and the new tokens fit: keep the last `keep` prompt tokens."""

    keep: int
    max_new_tokens: int
    notes: tuple[Note, ...] = ()  # English, with a key and values for the app's words


def fit_to_context(
    stepper: type[Stepper],
    context: int | None,
    prompt_len: int,
    max_new_tokens: int,
    *,
    truncate: bool,
    shrink: bool = False,
    forced: int = 0,
) -> ContextFit:
    """Fit a prompt and `max_new_tokens` into `context` positions (None: no limit).

    Decoder-only models hold prompt + new tokens in one sequence; seq2seq models hold the source in
    the encoder and the decoder prefix + new tokens in the decoder. `forced` tokens (a branch's
    chosen continuation) follow the prompt or the decoder prefix and are never dropped. `truncate`
    drops prompt tokens from the left; `shrink` (the app) also lowers max_new_tokens, with a note
    for each change. Otherwise a request that does not fit raises SettingsError saying what to change.
    """
    keep, new, notes = prompt_len, max_new_tokens, []
    if context is None:
        return ContextFit(keep, new)
    if stepper.decoder_only:
        room = context - prompt_len - forced
        if new <= room:
            return ContextFit(keep, new)
        if shrink and room >= 1:
            notes.append(Note(f"max_new_tokens {new} does not fit the model's remaining context of {room} tokens: "
                              f"using {room}", "fit_context_new", new=new, room=room))
            return ContextFit(keep, room, tuple(notes))
        if shrink:
            new = max(1, min(new, context // 4))
        keep = context - new - forced
        if (truncate or shrink) and keep >= 1:
            notes.append(Note(
                f"the prompt has {prompt_len} tokens but the model holds {context}: dropping the first "
                f"{prompt_len - keep} tokens (truncated on the left) to leave room for {new} new tokens",
                "fit_prompt_dropped", n=prompt_len, context=context, dropped=prompt_len - keep, new=new))
            return ContextFit(keep, new, tuple(notes))
        fix = (f"lower max_new_tokens to {context - prompt_len} or shorten the prompt" if context - prompt_len >= 1
               else f"shorten the prompt to at most {max(context - 1, 0)} tokens")  # 0 new tokens is no run
        raise SettingsError(
            f"the prompt ({prompt_len} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the model's context of "
            f"{context} positions; {fix}"
        )
    if prompt_len > context:
        if not (truncate or shrink):
            raise SettingsError(f"the source has {prompt_len} tokens but the encoder holds {context}; shorten it")
        keep = context
        notes.append(Note(
            f"the source has {prompt_len} tokens but the encoder holds {context}: dropping the first "
            f"{prompt_len - context} tokens (truncated on the left)",
            "fit_source_dropped", n=prompt_len, context=context, dropped=prompt_len - context))
    room = context - stepper.prefix_length - forced
    if new > room:
        if not shrink:
            raise SettingsError(
                f"max_new_tokens ({new}) exceeds the decoder's {context} positions; use at most {room}"
            )
        notes.append(Note(f"max_new_tokens {new} does not fit the decoder's {context} positions: using {room}",
                          "fit_decoder_new", new=new, context=context, room=room))
        new = room
    return ContextFit(keep, new, tuple(notes))


@dataclass
class Plan:
    """Everything decided before the first forward pass."""

    lm: LoadedModel
    cfg: GenerationConfig
    stepper: type[Stepper]
    prompt_ids: list[int]  # what the model reads (decoder prompt, or seq2seq source)
    prefix_ids: list[int]  # what the decoder stream starts with (= prompt for decoder-only)
    eos_ids: list[int]
    pipeline: Pipeline
    notes: list[str] = field(default_factory=list)
    forced_ids: list[int] = field(default_factory=list)  # the end of prefix_ids that was forced (a branch)
    policy: KVPolicy | None = None  # the run's own KV cache policy / RoPE table (None: the plain cache)
    precision: dict[str, Any] | None = None  # with weight_precision: what the variant is (variants.Variant.to_dict)
    draft: DraftSpec | None = None  # speculative decoding's drafter (None: plain decoding)
    decoding: dict[str, Any] | None = None  # set by the run: captured or eager, and why (GenerationResult.decoding)
    request: Request | None = None  # what the run will hold (generation.budget): checked here, admitted by the batch
    prefix: Any = None  # the batch's prefix store a captured step's prefill reads and fills (None: none)
    steps: Any = None  # a scheduler's captured steps shared by its runs (`shared_step.Seating`; None: a step of its own)
    blend: tuple[tuple[int, ...], int] | None = None  # cache_blend's chunk starts and r (None: the plain prefill)

    @property
    def max_length(self) -> int:
        return len(self.prefix_ids) + self.cfg.max_new_tokens

    def memory_request(self) -> Request:
        """The run's memory shape: the one the plan was checked with (a plan built by hand: from its settings)."""
        if self.request is not None:
            return self.request
        return Request.of(self.cfg, len(self.prompt_ids), len(self.prefix_ids),
                          draft=draft_shape(self.draft, self.max_length, self.cfg.draft_tokens))


def as_ids(lm: LoadedModel, prompt: str | list[int] | torch.Tensor, cfg: GenerationConfig) -> list[int]:
    """The prompt as token ids: text is tokenized (in the chat template with `cfg.chat`)."""
    if isinstance(prompt, str):
        return lm.tokenize(prompt, chat=cfg.chat) if prompt else []
    if isinstance(prompt, torch.Tensor):
        if prompt.dim() == 2 and prompt.shape[0] == 1:
            prompt = prompt[0]
        if prompt.dim() != 1 or prompt.dtype.is_floating_point:
            raise SettingsError(f"prompt ids must be one sequence of integers, got a tensor of shape {tuple(prompt.shape)}")
        return [int(i) for i in prompt.tolist()]
    if isinstance(prompt, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        return [int(i) for i in prompt]
    raise SettingsError("the prompt must be text, a list of token ids or a 1-D tensor of ids")


def plan(
    lm: LoadedModel,
    prompt: str | list[int] | torch.Tensor,
    cfg: GenerationConfig,
    forced_prefix: Sequence[int] = (),
    *,
    final_maps: bool = False,
) -> Plan:
    """Validate the settings against the model and the prompt; raise SettingsError saying what to change.

    `forced_prefix`: tokens the output must start with (a branch from a chosen step), placed after
    the prompt (decoder-only) or after the decoder start token (seq2seq); new tokens follow them.

    The run's memory (KV cache, captures, and with `final_maps` the attention maps over the final
    sequence that generate_all computes) is checked against the model's budget before anything is
    allocated (`playground.generation.budget`): a BudgetError names the numbers and the knob.
    """
    cfg.validate()
    c = lm.config
    stepper = stepper_class(lm.kind)
    ids = as_ids(lm, prompt, cfg)
    forced = [int(i) for i in forced_prefix]
    notes: list[Note] = []
    layers = stepper.attention_layer_count(c)
    if cfg.attention_layers is not None and any(i >= layers for i in cfg.attention_layers):
        raise SettingsError(f"attention_layers {list(cfg.attention_layers)}: this model has layers 0..{layers - 1}")
    try:
        check(cfg.interventions, c)
    except InterventionError as error:
        raise SettingsError(str(error)) from None
    if not ids:
        ids = stepper.empty_prompt(c)
        notes.append(Note("the prompt was empty: starting from the start token", "plan_empty_prompt"))
    fit = fit_to_context(stepper, context_limit(lm, cfg), len(ids), cfg.max_new_tokens, truncate=cfg.truncate_prompt,
                         forced=len(forced))
    return assemble(lm, ids, cfg, forced, fit, notes + list(fit.notes), final_maps=final_maps)


def assemble(
    lm: LoadedModel,
    ids: list[int],
    cfg: GenerationConfig,
    forced_prefix: Sequence[int],
    fit: ContextFit,
    notes: Sequence[Note] = (),
    *,
    final_maps: bool = False,
    build: Builder | None = None,
) -> Plan:
    """The plan of settings already checked and fitted to the context (by `plan`'s strict pass, or by the
    app's lenient one, `playground.app.limits.lenient`): nothing about them is checked again here but
    what only the token ids and the memory can say (ids in the vocabulary, the run's memory budget).

    With weight_precision the run decodes with a copy of the model at that precision (`playground.variants`): the
    copy's bytes are checked with the run before it is built; `build` runs its building steps (the app: a job
    on the torch thread between the batch's steps; default: here). `lm` itself never changes."""
    c = lm.config
    stepper = stepper_class(lm.kind)
    forced = [int(i) for i in forced_prefix]
    notes = list(notes)  # the fit's own notes are the caller's (it said them in its own pass)
    if cfg.draft is not None and cfg.num_beams > 1:
        notes.append(Note("the draft is not used with beam search: beams decode without speculation", "plan_draft_beams"))
    bad = [i for i in ids + forced if not 0 <= i < c.vocab_size]
    if bad:
        raise SettingsError(f"token id {bad[0]} is outside the vocabulary (0..{c.vocab_size - 1}); fix the prompt ids")
    if cfg.forced_bos_token_id is not None and cfg.forced_bos_token_id >= c.vocab_size:
        raise SettingsError(
            f"forced_bos_token_id {cfg.forced_bos_token_id} is outside the vocabulary (0..{c.vocab_size - 1}); "
            "pick the target language from the tokenizer's codes"
        )
    ids = list(ids[len(ids) - fit.keep :])
    cfg = cfg.replace(max_new_tokens=fit.max_new_tokens) if fit.max_new_tokens != cfg.max_new_tokens else cfg
    prefix = stepper.decoder_prefix(c, ids) + forced
    max_length = len(prefix) + cfg.max_new_tokens

    def request_for(draft: DraftSpec | None) -> Request:
        shape = draft_shape(draft, max_length, cfg.draft_tokens)
        return Request.of(cfg, len(ids), len(prefix), final_maps=final_maps, draft=shape)

    precision, base, draft = None, lm, resolve_draft(lm, cfg)
    request = request_for(draft)
    if cfg.weight_precision is None:
        check_request(lm, request)
    else:
        copy = (cfg.weight_precision, copy_bytes(lm, cfg.weight_precision))
        fits = check_request(lm, request, copy)  # before any weight is copied
        room = fits.budget - fits.resident - fits.request  # what the cached copies may hold beside the model and run
        chosen = variant(lm, cfg.weight_precision, run=build or run_here, room=room)
        # (the copy is shared by every loaded copy of the model; the run keeps its own model's captured steps)
        lm, precision = dataclasses.replace(chosen.lm, captured=base.captured), chosen.to_dict()
        draft = resolve_draft(lm, cfg)  # a "layer:K" draft reads the copy's layers
        request = request_for(draft)
        try:  # the copy's own dtype and drafter, the model's own resident bytes and the copy's
            check_request(dataclasses.replace(lm, resident_bytes=base.resident_bytes), request, copy)
        except SettingsError:
            VARIANTS.discard(base, cfg.weight_precision)  # refused: the copy is not kept for later runs
            raise
    config_bos, config_eos = (_forceable(c, name, notes) for name in ("forced_bos_token_id", "forced_eos_token_id"))
    forced_bos_id = cfg.forced_bos_token_id if cfg.forced_bos_token_id is not None else config_bos
    forced_bos = (forced_bos_id, 1) if forced_bos_id is not None else None  # as transformers: at length 1
    forced_eos = (config_eos, max_length - 1) if config_eos is not None else None
    min_keep = 1 if cfg.num_beams == 1 else len(c.eos_token_ids) + 1
    pipeline = build_pipeline(cfg, forced_bos=forced_bos, forced_eos=forced_eos, min_tokens_to_keep=min_keep)
    return Plan(lm, cfg, stepper, ids, prefix, c.eos_token_ids, pipeline, notes, forced, kv_policy(lm, cfg), precision,
                draft, request=request, blend=prompt_blend(lm, cfg, ids, notes))


_UNMOVABLE = {"learned": "learned positions", "sinusoidal": "sinusoidal positions", "relative": "T5's relative bias",
              "none": "no positions on its keys", "seq2seq": "an encoder-decoder", "window": "sliding-window layers"}


def prompt_blend(lm: LoadedModel, cfg: GenerationConfig, ids: list[int], notes: list[Note]) -> tuple[tuple[int, ...], int] | None:
    """cache_blend's chunk starts over the prompt `ids` and its r (None: the plain prefill); SettingsError where the
    model's cached keys cannot be moved. A prompt of one token has nothing to reuse: a note, and the plain prefill."""
    if cfg.cache_blend is None:
        return None
    why = why_not_movable(lm)
    if why is not None:
        raise SettingsError(f"cache_blend moves cached keys by rotation, which this model cannot ({_UNMOVABLE[why]}); "
                            "run it without cache_blend")
    if len(ids) < 2:
        notes.append(Note("CacheBlend needs a prompt of two tokens at least: the prompt was prefilled whole",
                          "plan_blend_short"))
        return None
    mode, r = parse_blend(cfg.cache_blend)
    if r == 100:  # everything recomputed is the full prefill itself: the plain run, bitwise
        return None
    return tuple(chunk_starts(lm.token_texts(ids), mode)), r


def draft_shape(draft: DraftSpec | None, max_length: int, draft_tokens: int) -> DraftShape | None:
    """What a model drafter holds beside the run (`speculative.ModelDrafter`: its own cache of the run's positions
    plus one draft, within its context); None for prompt lookup or no draft."""
    if draft is None or draft.module is None:
        return None
    config = draft.module.config
    element_size = draft.module.embed.weight.element_size()  # its cache's dtype (drafters.rewindable_cache)
    return DraftShape(config, element_size, draft.layers, min(max_length + draft_tokens, config.max_positions))


def context_limit(lm: LoadedModel, cfg: GenerationConfig) -> int | None:
    """The positions a run of `cfg` may use: the model's, or factor × the trained length under RoPE scaling
    (SettingsError where the model cannot take the run's KV settings)."""
    policy = kv_policy(lm, cfg)
    if policy is not None and policy.rotary is not None:  # the scaled table reaches factor × the trained length
        return policy.rotary.max_positions
    return stepper_class(lm.kind).context_limit(lm.config)


def kv_policy(lm: LoadedModel, cfg: GenerationConfig) -> KVPolicy | None:
    """The run's KV policy (None: the plain cache); SettingsError where the model cannot take it."""
    if not cfg.kv_policy:
        return None
    if lm.kind != "decoder":
        raise SettingsError(
            "kv_window, kv_dtype and rope_scaling apply to decoder-only models; leave them off for this seq2seq model"
        )
    rotary = None
    if cfg.rope_scaling is not None:
        try:
            rotary = rotary_override(lm.config, cfg.rope_scaling)
        except RopeScalingError as error:
            raise SettingsError(str(error)) from None
    return KVPolicy(window=cfg.kv_window, sink=cfg.kv_sink, heavy=cfg.kv_heavy, dtype=cfg.kv_dtype, rotary=rotary)


def _forceable(config: ModelConfig, name: str, notes: list[Note]) -> int | None:
    """The config's forced token id, or None (with a note) when the vocabulary has no such token: a token
    that never occurs cannot be forced (transformers would fail indexing the scores)."""
    value = getattr(config, name)
    if value is not None and not 0 <= value < config.vocab_size:
        notes.append(Note(f"the config's {name} {value} lies outside the vocabulary: no token is forced",
                          "plan_forced_outside", name=name, value=value))
        return None
    return value
