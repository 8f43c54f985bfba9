"""Steppers: run a model one token at a time, with or without a static KV cache.

A stepper owns everything that differs between decoder-only and encoder-decoder models: where the
decoder stream starts (the prompt, or the decoder start token), how many positions the model
holds, how a whole sequence's attention is recomputed, and the cache statistics. The engine's
loops only ever call `start`, `step`, `reorder`, `sequence` and `stats`.

`start` prefills (one pass over the prompt) and returns the next-token logits; `step(tokens)` feeds
one token per row and returns the next logits; `reorder` follows beam search. With
`use_cache=False` every step recomputes the whole sequence (same tokens, for comparison). Each call
takes an optional `Recorder` for what that forward pass should keep.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import nn

from playground.config import ModelConfig
from playground.errors import PlaygroundError
from playground.models.cache_blend import blended_prompt
from playground.models.kv_cache import CacheStats, CrossCacheStats, dtype_name
from playground.models.kv_policy import KVPolicy
from playground.models.recorder import Recorder

if TYPE_CHECKING:
    from playground.loaded import LoadedModel

_UNBOUNDED_POSITIONS = ("relative", "none")  # T5's relative bias and no positions set no length limit


class Stepper:
    """What both kinds share: the decoder stream's token buffer and the cache."""

    decoder_only: ClassVar[bool]
    prefix_length: ClassVar[int]  # decoder ids before the first generated one (0: the prompt itself)
    kinds: ClassVar[tuple[str, ...]]  # attention kinds a decoding step records

    def __init__(
        self, model: nn.Module, *, batch: int, max_tokens: int, use_cache: bool, policy: KVPolicy | None = None,
        blend: tuple[tuple[int, ...], int] | None = None,
    ) -> None:
        self.model, self.config = model, model.config
        self.policy = policy  # a run's own KV policy (decoder-only; the plan refuses it elsewhere)
        self.blend = blend  # cache_blend's chunk starts and r over the prompt (decoder-only; `Plan.blend`)
        self.batch, self.max_tokens, self.use_cache = batch, max_tokens, use_cache
        self.dtype = model.dtype
        self.tokens = torch.zeros((batch, max_tokens), dtype=torch.long, device=model.device)
        self.length = 0
        self.cache = None

    # --- what the kinds decide -------------------------------------------------------------------

    @staticmethod
    def context_limit(config: ModelConfig) -> int | None:
        raise NotImplementedError

    @staticmethod
    def decoder_prefix(config: ModelConfig, prompt_ids: list[int]) -> list[int]:
        raise NotImplementedError

    @staticmethod
    def empty_prompt(config: ModelConfig) -> list[int]:
        raise NotImplementedError

    @staticmethod
    def attention_layer_count(config: ModelConfig) -> int:
        """Layers a per-step capture can name (decoder layers)."""
        return config.n_layers

    # --- running ---------------------------------------------------------------------------------

    def _new_cache(self, batch: int, max_tokens: int) -> Any:
        if self.policy is None:
            return self.model.new_cache(batch, max_tokens)
        return self.model.new_cache(batch, max_tokens, policy=self.policy)

    def sequence(self) -> torch.Tensor:
        """(B, length) the decoder stream so far: prompt (or decoder prefix) + generated."""
        return self.tokens[:, : self.length]

    def _append(self, tokens: torch.Tensor) -> None:
        self.tokens[:, self.length] = tokens
        self.length += 1

    def reorder(self, index: torch.Tensor) -> None:
        """Row b becomes old row index[b] (beam search)."""
        self.tokens[:, : self.length] = self.tokens[:, : self.length].index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)

    def stats(self) -> CacheStats:
        if self.cache is not None:
            return self.cache.stats()
        c = self.config
        return CacheStats(
            enabled=False, layers=c.n_layers, batch=self.batch, kv_heads=c.n_kv_heads, query_heads=c.n_heads,
            head_dim=c.head_dim, tokens=0, max_tokens=0, dtype=dtype_name(self.dtype),
            element_size=torch.empty((), dtype=self.dtype).element_size(), recomputed_tokens=self.length,
            windows=tuple(kind.window for kind in c.layer_kinds()),
        )


class DecoderStepper(Stepper):
    """Decoder-only models (`DecoderLM`): the prompt is the start of the decoder stream."""

    decoder_only = True
    prefix_length = 0
    kinds = ("self",)

    @staticmethod
    def context_limit(config: ModelConfig) -> int | None:
        return config.max_positions

    @staticmethod
    def decoder_prefix(config: ModelConfig, prompt_ids: list[int]) -> list[int]:
        return list(prompt_ids)

    @staticmethod
    def empty_prompt(config: ModelConfig) -> list[int]:
        if config.bos_token_id is None:
            raise PlaygroundError("the prompt is empty and the model has no start token; type a prompt")
        _require_in_vocab(config, "bos_token_id", "start an empty prompt; type a prompt")
        return [config.bos_token_id]

    def start(self, source: torch.Tensor, prefix: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        """prefix: (P,) the decoder stream's first ids (the prompt, plus any forced tokens; `source`
        is not read separately). Returns next-token logits (B, V) in float32."""
        prompt = prefix
        n = prompt.shape[0]
        self.tokens[:, :n] = prompt
        self.length = n
        if not self.use_cache:
            return self.model(prompt[None], None, recorder, last_only=True)[:, -1].float().expand(self.batch, -1)
        self.cache = self._new_cache(self.batch, self.max_tokens)
        if self.batch == 1:
            return self._prefill(source, prompt, self.cache, recorder)
        # prefill once, then copy into every beam's rows (a policy cache of the same length: same layer kinds)
        first = self._new_cache(1, n if self.policy is None else self.max_tokens)
        logits = self._prefill(source, prompt, first, recorder)
        self.cache.fill_from(first)
        return logits.expand(self.batch, -1)

    def _prefill(self, source: torch.Tensor, prefix: torch.Tensor, cache: Any, recorder: Recorder | None) -> torch.Tensor:
        """The pass over the decoder stream's first ids into `cache`. With a blend, the prompt's positions but its
        last come from CacheBlend first (computed alone, by the model itself: outside any shared batch, in the
        request's turn), then the pass runs over the rest (the prompt's last token, and a branch's forced ones)."""
        if self.blend is not None:
            starts, r = self.blend
            ids = source.tolist()
            alone = getattr(self.model, "alone", None)  # a shared batch's request: the model's own pass, in its turn

            def blended(model: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
                return blended_prompt(model, ids, starts, r)

            keys, values = alone(blended) if alone is not None else blended(self.model)
            cache.write_span(0, len(ids) - 1, keys, values)
            cache.reused = 0  # blended, not restored from the prefix store: the KV panel does not call it reused
            prefix = prefix[len(ids) - 1:]
        return self.model(prefix[None], cache, recorder, last_only=True)[:, -1].float()

    def step(self, tokens: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        """tokens: (B,) one new token per row. Returns next-token logits (B, V) in float32."""
        self._append(tokens)
        if self.use_cache and self.model.reencodes_at(self.cache.length, 1):
            self.cache = self._new_cache(self.batch, self.max_tokens)
            return self.model(self.sequence(), self.cache, recorder, last_only=True)[:, -1].float()
        if self.use_cache:
            return self.model(tokens[:, None], self.cache, recorder, last_only=True)[:, -1].float()
        return self.model(self.sequence(), None, recorder, last_only=True)[:, -1].float()

    @staticmethod
    def run_whole(
        model: nn.Module, prompt_ids: list[int], token_ids: list[int], recorder: Recorder, policy: KVPolicy | None = None
    ) -> None:
        """One pass over prompt + generated, recording into `recorder`: no cache, or with `policy` a fresh
        policy cache (each query sees what the run's window and sinks left it, with the run's RoPE table)."""
        ids = torch.tensor([list(prompt_ids) + list(token_ids)], dtype=torch.long, device=model.device)
        cache = None if policy is None else model.new_cache(1, ids.shape[1], policy=policy)
        model(ids, cache, recorder)


class Seq2SeqStepper(Stepper):
    """Encoder-decoder models (`EncoderDecoderLM`): the encoder runs once; cross K/V are cached once."""

    decoder_only = False
    prefix_length = 1
    kinds = ("self", "cross")

    def __init__(
        self, model: nn.Module, *, batch: int, max_tokens: int, use_cache: bool, policy: KVPolicy | None = None,
        blend: tuple[tuple[int, ...], int] | None = None,
    ) -> None:
        # (no blend here: the plan refuses cache_blend for an encoder-decoder, whose keys it cannot move)
        super().__init__(model, batch=batch, max_tokens=max_tokens, use_cache=use_cache, policy=policy)
        self.encoder_out: torch.Tensor | None = None
        self.source_length = 0

    @staticmethod
    def context_limit(config: ModelConfig) -> int | None:
        return None if config.positional in _UNBOUNDED_POSITIONS else config.max_positions

    @staticmethod
    def decoder_prefix(config: ModelConfig, prompt_ids: list[int]) -> list[int]:
        """[decoder_start_token_id] (bos when the config has none), as transformers' generate().

        The one place that decides how the decoder stream starts. A forced target language (mBART-50,
        M2M100, NLLB: </s> then the language code) is not part of it: as in transformers, the code is
        the first generated token, forced by the plan's `forced_bos` processor, so its score counts.
        """
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.bos_token_id
        if start is None:
            raise PlaygroundError("this seq2seq model's config has no decoder_start_token_id; the checkpoint is incomplete")
        name = "decoder_start_token_id" if config.decoder_start_token_id is not None else "bos_token_id"
        _require_in_vocab(config, name, "start the decoder; fix the id in config.json")
        return [start]

    @staticmethod
    def empty_prompt(config: ModelConfig) -> list[int]:
        if not config.eos_token_ids:
            raise PlaygroundError("the source is empty and the model has no end token to encode; type a source text")
        eos = config.eos_token_ids[0]
        if not 0 <= eos < config.vocab_size:
            raise PlaygroundError(
                f"the source is empty and the model's end token id {eos} lies outside its {config.vocab_size}-token "
                "vocabulary, so there is nothing to encode; type a source text"
            )
        return [eos]

    def start(self, source: torch.Tensor, prefix: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        """source: (S,) encoder ids; prefix: (D,) the decoder's first ids (start token, plus any forced
        tokens). Returns the first next-token logits (B, V)."""
        encoded = self.model.encode(source[None], None, recorder)  # (1, S, d)
        self.source_length = source.shape[0]
        self.encoder_out = encoded.expand(self.batch, -1, -1) if self.batch > 1 else encoded
        self.tokens[:, : prefix.shape[0]] = prefix
        self.length = prefix.shape[0]
        if self.use_cache:
            self.cache = self.model.new_cache(self.batch, self.max_tokens)
        return self._decode(self.sequence(), recorder)

    def _decode(self, ids: torch.Tensor, recorder: Recorder | None) -> torch.Tensor:
        logits = self.model.decode(ids, self.encoder_out, None, self.cache, recorder, last_only=True)
        return logits[:, -1].float()

    def step(self, tokens: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        self._append(tokens)
        return self._decode(tokens[:, None] if self.use_cache else self.sequence(), recorder)

    def stats(self) -> CacheStats:
        stats = super().stats()
        if self.cache is not None:
            return stats
        c = self.config
        cross = CrossCacheStats(layers=c.n_layers, batch=self.batch, kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                                tokens=self.source_length, element_size=stats.element_size, held=False,
                                query_heads=c.n_heads)
        return dataclasses.replace(stats, cross_attention=cross)

    @classmethod
    def run_whole(
        cls, model: nn.Module, prompt_ids: list[int], token_ids: list[int], recorder: Recorder, policy: None = None
    ) -> None:
        """Encode the source (`prompt_ids`), decode prefix + generated in one pass, recording."""
        device = model.device
        source = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
        target = cls.decoder_prefix(model.config, prompt_ids) + list(token_ids)
        encoded = model.encode(source, None, recorder)
        model.decode(torch.tensor([target], dtype=torch.long, device=device), encoded, None, None, recorder)


def stepper_class(kind: str) -> type[Stepper]:
    return DecoderStepper if kind == "decoder" else Seq2SeqStepper


@torch.inference_mode()
def full_attention(
    lm: LoadedModel, prompt_ids: list[int], token_ids: list[int], layers: list[int] | None = None,
    policy: KVPolicy | None = None,
) -> dict[str, np.ndarray]:
    """Attention over a whole final sequence in one pass, through the same model code as generation.

    Decoder: {"self": (L, h, T, T)} over prompt + generated. Seq2seq: {"encoder": (L_e, h, S, S),
    "self": (L, h, T, T), "cross": (L, h, T, S)} over decoder prefix + generated (prompt_ids is the
    source). With `layers`, only those layers are computed and stacked, in that order. With a run's KV
    `policy`, the pass goes through that policy's cache: evicted keys get weight 0 (heavy hitters are
    chosen step by step, so a whole-sequence pass shows the window and sinks only).
    """
    recorder = Recorder(layers)
    stepper_class(lm.kind).run_whole(lm.model, prompt_ids, token_ids, recorder, policy)
    out = {}
    for kind, by_layer in recorder.attention.items():
        order = sorted(by_layer) if layers is None else [i for i in layers if i in by_layer]
        out[kind] = torch.stack([by_layer[i][0] for i in order]).float().cpu().numpy()
    return out


def _require_in_vocab(config: ModelConfig, name: str, purpose: str) -> None:
    """Refuse a special id the vocabulary lacks where the token itself must be fed to the model."""
    value = getattr(config, name)
    if not 0 <= value < config.vocab_size:
        raise PlaygroundError(
            f"config field '{name}' is {value}, outside the {config.vocab_size}-token vocabulary, so it cannot "
            f"{purpose}"
        )
