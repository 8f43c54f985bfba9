"""Speculative decoding: a drafter proposes K tokens, one pass of the model checks them all.

Each round (a *target pass*):
1. the drafter (`generation.drafters`) proposes up to K tokens d1..dK after the sequence so far;
2. the model runs ONE forward over the last accepted token and d1..dK with its KV cache, giving its
   next-token logits at K + 1 positions;
3. position by position, with the run's own processors applied to that position's own prefix (the
   repetition penalty depends on the tokens before it), the draft is checked:
   - greedy: kept while the model's argmax equals it; the first mismatch is replaced by the argmax;
   - sampling (Leviathan et al. 2023, Chen et al. 2023): kept with probability min(1, p(x)/q(x)) against a
     uniform coin; on rejection a token is drawn from normalize(max(0, p − q)) and the round ends;
   - every draft kept: one more token (the bonus) from the model's last position;
4. the cache is rewound (a length reset) to the kept tokens.
So greedy gives the model's own greedy tokens, and sampling the model's own distribution, whatever the
drafter; the drafter only changes how many tokens one pass yields. Events stay one per token; each
carries its check in `event.speculation`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from playground.generation import sampling
from playground.generation.config import GenerationConfig, SettingsError, draft_layers, draft_name
from playground.generation.drafters import Draft, ModelDrafter, NgramDrafter, first_layers, rewindable_cache
from playground.generation.events import StepEvent
from playground.generation.stepper import DecoderStepper
from playground.generation.tail import EventTail
from playground.loaded import LoadedModel
from playground.models.edits import edited
from playground.models.kv_cache import KVCache

if TYPE_CHECKING:
    from playground.generation.plan import Plan

RESIDUAL_TOP = 5  # residual entries kept per rejection, to draw max(0, p − q)


@dataclass(frozen=True)
class DraftSpec:
    """A run's drafter, resolved against the model at planning (before any batching proxy wraps it)."""

    name: str  # "ngram", "layer:K" or "model:<name>"
    module: torch.nn.Module | None = None  # the drafting module (the target's first layers, or a second model)
    layers: int = 0

    def drafter(self, max_tokens: int) -> NgramDrafter | ModelDrafter:
        if self.module is None:
            return NgramDrafter()
        return ModelDrafter(self.name, self.module, self.layers, max_tokens)


def resolve_draft(lm: LoadedModel, cfg: GenerationConfig) -> DraftSpec | None:
    """The run's drafter, or SettingsError saying why this model and these settings cannot speculate."""
    if cfg.draft is None or cfg.num_beams > 1:  # beam search ignores the draft (the plan says so)
        return None
    check_draft(lm, cfg)
    if cfg.draft == "ngram":
        return DraftSpec("ngram")
    k = draft_layers(cfg.draft)
    if k is not None:
        return DraftSpec(f"layer:{k}", first_layers(lm.model, k), k)
    return DraftSpec(draft_name(cfg.draft), cfg.draft.model, cfg.draft.config.n_layers)


def check_draft(lm: Any, cfg: GenerationConfig) -> None:
    """SettingsError when `cfg.draft` cannot run on `lm` (which needs `.kind` and `.config` only)."""
    if cfg.draft is None:
        return
    k = draft_layers(cfg.draft)
    if lm.kind != "decoder":
        raise SettingsError("draft (speculative decoding) runs on decoder-only models; set draft to none for this one")
    if cfg.kv_policy:  # the verify pass rewinds a plain cache; an evicting or quantised one cannot be rewound yet
        raise SettingsError("draft does not combine with kv_window, kv_dtype or rope_scaling yet; run one of them alone")
    recorded = [n for n in ("capture_attention", "capture_prompt_attention", "capture_residual") if getattr(cfg, n)]
    if recorded:
        raise SettingsError(f"draft does not record what {recorded[0]} asks for; turn {recorded[0]} off or set draft to none")
    if k is not None and k > lm.config.n_layers:
        n = lm.config.n_layers
        raise SettingsError(f"draft 'layer:{k}': this model has {n} layers; use layer:1 to layer:{n}")
    other = cfg.draft
    if isinstance(other, LoadedModel):
        if other.kind != "decoder":
            raise SettingsError("the draft model is an encoder-decoder; draft with a decoder-only model of the same vocabulary")
        if other.config.vocab_size != lm.config.vocab_size or _vocab(other) != _vocab(lm):
            raise SettingsError(
                f"the draft model's vocabulary ({other.config.vocab_size} tokens) differs from this model's "
                f"({lm.config.vocab_size}); draft with a model of the same tokenizer"
            )


def _vocab(lm: Any) -> dict[str, int] | None:
    get = getattr(getattr(lm, "tokenizer", None), "get_vocab", None)
    return get() if get is not None else None


class SpeculativeStepper(DecoderStepper):
    """The model's side: a cache that rewinds, and a pass over several new tokens at once (`verify`).

    `length` counts the accepted tokens; the cache holds all but the last (fed with the next pass)."""

    def start(self, source: torch.Tensor | None, prefix: torch.Tensor, recorder: Any = None) -> torch.Tensor:
        n = prefix.shape[0]
        self.tokens[:, :n] = prefix
        self.length = n
        if self.use_cache:
            self.cache = self._new_cache()
        return self.model(prefix[None], self.cache, None, last_only=True)[:, -1].float()

    def _new_cache(self) -> KVCache:
        windows = [k.window for k in self.config.layer_kinds()]
        if any(w is not None and w < self.max_tokens for w in windows):  # a ring could not rewind
            return rewindable_cache(self.model, self.config.n_layers, 1, self.max_tokens)
        return self.model.new_cache(1, self.max_tokens)  # in the shared batch: rows of its pool

    def room(self, k: int) -> int:
        """Drafts the next pass may check: fewer when a pass would cross the point where longrope switches to
        its long factors (the model's plain steps re-encode exactly there; the pass then ends at it)."""
        if self.cache is None:  # each pass recomputes: its length picks the tables for all its positions
            long = self.model.reencodes_at(0, self.length)
            while k > 0 and self.model.reencodes_at(0, self.length + k) != long:
                k -= 1
            return k
        fed = self.length - self.cache.length
        if self.model.reencodes_at(self.cache.length, fed):
            return k
        while k > 0 and self.model.reencodes_at(self.cache.length, fed + k):
            k -= 1
        return k

    def verify(self, drafts: list[int]) -> torch.Tensor:
        """One pass over the not yet cached tokens and `drafts`: logits (len(drafts) + 1, V), row j the model's
        next-token logits after the sequence and drafts[:j]."""
        device = self.tokens.device
        ids = torch.cat((self.sequence()[0], torch.tensor(drafts, dtype=torch.long, device=device)))
        n = len(drafts) + 1
        if self.cache is None:
            return self.model(ids[None], None, None)[0, -n:].float()
        start = self.cache.length
        if self.model.reencodes_at(start, self.length - start):  # longrope switching: everything again
            self.cache = self._new_cache()
            start = 0
        return self.model(ids[None, start:], self.cache, None)[0, -n:].float()

    def accept(self, tokens: list[int]) -> None:
        """Append the pass's tokens; the cache keeps the accepted drafts, all but the newest token."""
        for t in tokens:
            self._append(torch.tensor(t, device=self.tokens.device))
        if self.cache is not None and self.cache.length > self.length - 1:
            self.cache.rewind(self.length - 1)


def accept_probability(p_x: float, q_x: float) -> float:
    """min(1, p(x) / q(x)): the chance a drafted token x is kept (q(x) > 0: the drafter proposed x)."""
    return 1.0 if p_x >= q_x else p_x / q_x


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p − q)): what a rejection draws from, so that kept + redrawn tokens follow p."""
    r = torch.clamp(p - q, min=0.0)
    total = r.sum()
    return r / total if total > 0 else p  # p == q: nothing is ever rejected (guards rounding only)


def _check_position(
    x: int, p: torch.Tensor, q: torch.Tensor | None, scores: torch.Tensor, sample: bool, generator: torch.Generator | None,
) -> tuple[int, dict[str, Any]]:
    """Keep or replace drafted token x against the model's distribution p (V,). Returns the token and its record."""
    q_x = 1.0 if q is None else float(q[x])
    p_x = float(p[x])
    if not sample:
        target = int(torch.argmax(scores))
        kept = target == x
        record = {"q": q_x, "p": p_x, "accept_prob": 1.0 if kept else 0.0, "coin": None, "accepted": kept}
        if not kept:
            record["resampled_token"] = target
        return target, record
    ratio = accept_probability(p_x, q_x)
    coin = float(torch.rand((), generator=generator, device=p.device))
    kept = coin < ratio
    record = {"q": q_x, "p": p_x, "accept_prob": ratio, "coin": coin, "accepted": kept}
    if kept:
        return x, record
    q_full = torch.zeros_like(p) if q is None else q
    if q is None:
        q_full[x] = 1.0
    r = residual(p, q_full)
    token = int(torch.multinomial(r, 1, generator=generator))
    top = torch.topk(r, min(RESIDUAL_TOP, r.shape[0]))
    record["resampled_token"] = token
    record["residual_top"] = [
        {"token_id": int(i), "p": float(p[i]), "q": float(q_full[i]), "residual": float(v)}
        for v, i in zip(top.values.tolist(), top.indices.tolist()) if v > 0
    ]
    return token, record


def speculate(p: Plan, stop: threading.Event | None) -> Iterator[StepEvent]:
    """The speculative loop over a plan `p` (greedy or sampled); its events end, are timed and are built as plain
    decoding's (`tail.EventTail`)."""
    lm, cfg, pipeline = p.lm, p.cfg, p.pipeline
    generator = None
    if pipeline.sampling:
        generator = torch.Generator(device=lm.device)
        generator.manual_seed(cfg.seed) if cfg.seed is not None else generator.seed()
    stepper = SpeculativeStepper(lm.model, batch=1, max_tokens=p.max_length, use_cache=cfg.use_cache)
    drafter = p.draft.drafter(p.max_length + cfg.draft_tokens)
    totals = {"proposed": 0, "accepted": 0, "target_passes": 0}
    tail = EventTail(p)
    step = 0
    while True:
        if stop is not None and stop.is_set():
            return
        t0 = time.perf_counter()
        with torch.inference_mode():
            if step == 0:
                logits = _target(p, stepper.start, None, torch.tensor(p.prefix_ids, device=lm.device))
                draft, chosen = Draft([]), _plain_choice(p, stepper.sequence(), logits, generator)
            else:
                k = stepper.room(min(cfg.draft_tokens, cfg.max_new_tokens - len(tail.generated) - 1))
                draft = drafter.propose(stepper.sequence(), k, pipeline, generator) if k > 0 else Draft([])
                logits = _target(p, stepper.verify, draft.tokens)
                chosen = _check_pass(p, stepper.sequence(), draft, logits, generator)
            totals["target_passes"] += 1
            totals["proposed"] += len(draft.tokens)
            stepper.accept([token for token, _, _ in chosen])
            stats = stepper.stats()
        for j, (token_id, prob, record) in enumerate(chosen):
            totals["accepted"] += bool(record.get("accepted"))
            record.update(pass_index=totals["target_passes"] - 1, position=j, drafter=p.draft.name,
                          drafted=list(draft.tokens), totals=dict(totals))
            event = tail.event(step, token_id, prob, t0 if j == 0 else time.perf_counter(), kv=stats,
                               candidates=record.pop("_candidates", None), speculation=record)
            yield event
            step += 1
            if event.finished:
                return


def _target(p: Plan, forward: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
    """A pass of the model with the run's edits installed for that pass only (as plain decoding does)."""
    if p.cfg.interventions:
        with edited(p.lm.model, p.cfg.interventions):
            return forward(*args)
    return forward(*args)


def _processed(p: Plan, prefix: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, list | None]:
    """The run's processors on logits (1, V) after `prefix` (1, T): final scores, and every stage when the
    run shows candidates."""
    if p.cfg.top_candidates > 0:
        stages = p.pipeline.run_stages(prefix, logits)
        return stages[-1][1], stages
    return p.pipeline.run(prefix, logits), None


def _candidates(p: Plan, stages: list | None, token_id: int) -> list | None:
    if stages is None:
        return None
    return sampling.candidates([(n, s[0]) for n, s in stages], token_id, p.cfg.top_candidates, p.lm.token_text)


def _plain_choice(p: Plan, prefix: torch.Tensor, logits: torch.Tensor, generator: torch.Generator | None) -> list:
    """The first token (after the prefill), chosen exactly as plain decoding chooses it."""
    scores, stages = _processed(p, prefix, logits)
    token, prob = sampling.choose(scores, sample=p.pipeline.sampling, generator=generator)
    token_id = int(token)
    record = {"kind": "prefill", "draft_token": None, "accepted": None, "_candidates": _candidates(p, stages, token_id)}
    return [(token_id, prob, record)]


def _check_pass(p: Plan, sequence: torch.Tensor, draft: Draft, logits: torch.Tensor, generator: torch.Generator | None) -> list:
    """The tokens one pass yields: the kept drafts, then the replacement of the first rejected one or the
    bonus token. Each as (token id, its probability under the processed p, its record)."""
    out = []
    prefix = sequence
    for j in range(len(draft.tokens) + 1):
        scores, stages = _processed(p, prefix, logits[j : j + 1])
        probs = torch.softmax(scores[0], dim=-1)
        if j < len(draft.tokens):
            x = draft.tokens[j]
            q = None if draft.q is None else draft.q[j]
            token, record = _check_position(x, probs, q, scores[0], p.pipeline.sampling, generator)
            record.update(draft_token=x, kind="accepted" if record["accepted"] else "rejected")
        else:
            chosen, _ = sampling.choose(scores, sample=p.pipeline.sampling, generator=generator)
            token = int(chosen)
            record = {"draft_token": None, "accepted": None, "kind": "bonus" if draft.tokens else "plain"}
        record["_candidates"] = _candidates(p, stages, token)
        out.append((token, float(probs[token]), record))
        if record["accepted"] is False:
            break
        prefix = torch.cat((prefix, prefix.new_tensor([[token]])), dim=1)
    return out


def summary(events: list[StepEvent], cfg: GenerationConfig) -> dict[str, Any] | None:
    """`result.speculation`: proposed, accepted and target passes (ints), the acceptance rate and the tokens
    per pass of the model. None for a run without a draft."""
    if cfg.draft is None:
        return None
    totals = events[-1].speculation["totals"] if events and events[-1].speculation else {}
    proposed, accepted = totals.get("proposed", 0), totals.get("accepted", 0)
    passes = totals.get("target_passes", len(events) if cfg.num_beams > 1 else 0)
    tokens = len(events[-1].token_ids) if events else 0
    return {
        "drafter": draft_name(cfg.draft), "draft_tokens": cfg.draft_tokens, "used": cfg.num_beams == 1,
        "proposed": int(proposed), "accepted": int(accepted), "target_passes": int(passes),
        "acceptance_rate": accepted / proposed if proposed else 0.0,
        "tokens_per_pass": tokens / passes if passes else 0.0,
    }
