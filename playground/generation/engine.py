"""The generation engine: one generator of `StepEvent`s that the UI, the CLI and the tests consume.

    for event in generate(lm, "Once upon a time", GenerationConfig(max_new_tokens=20)):
        print(event.token_text, end="")

Work happens inside `torch.inference_mode()` one step at a time (never across a `yield`, so the
consumer's own torch code is unaffected). Setting the `stop` Event or closing the generator ends
the run before the next forward pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from playground.generation import search
from playground.generation.beam import LARGE_NEGATIVE, BeamSearch
from playground.generation.config import GenerationConfig, SettingsError
from playground.generation.events import GenerationResult, Hypothesis, StepEvent
from playground.generation.processors import Pipeline, build_pipeline
from playground.generation.stepper import DecoderStepper, Seq2SeqStepper
from playground.loaded import LoadedModel

_UNBOUNDED_POSITIONS = ("relative", "none")


@dataclass
class Plan:
    """Everything decided before the first forward pass."""

    lm: LoadedModel
    cfg: GenerationConfig
    prompt_ids: list[int]  # what the model reads (decoder prompt, or seq2seq source)
    prefix_ids: list[int]  # what the decoder stream starts with (= prompt for decoder-only)
    eos_ids: list[int]
    pipeline: Pipeline
    notes: list[str] = field(default_factory=list)

    @property
    def max_length(self) -> int:
        return len(self.prefix_ids) + self.cfg.max_new_tokens


def _as_ids(lm: LoadedModel, prompt: str | list[int] | torch.Tensor, cfg: GenerationConfig) -> list[int]:
    if isinstance(prompt, str):
        return lm.encode(prompt, chat=cfg.chat) if prompt else []
    if isinstance(prompt, torch.Tensor):
        if prompt.dim() == 2 and prompt.shape[0] == 1:
            prompt = prompt[0]
        if prompt.dim() != 1 or prompt.dtype.is_floating_point:
            raise SettingsError(f"prompt ids must be one sequence of integers, got a tensor of shape {tuple(prompt.shape)}")
        return [int(i) for i in prompt.tolist()]
    if isinstance(prompt, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        return [int(i) for i in prompt]
    raise SettingsError("the prompt must be text, a list of token ids or a 1-D tensor of ids")


def decoder_prefix(lm: LoadedModel) -> list[int]:
    """The ids a seq2seq decoder starts from: [decoder_start_token_id], as transformers' generate()."""
    c = lm.config
    start = c.decoder_start_token_id if c.decoder_start_token_id is not None else c.bos_token_id
    if start is None:
        raise SettingsError("this seq2seq model's config has no decoder_start_token_id; the checkpoint is incomplete")
    return [start]


def plan(lm: LoadedModel, prompt: str | list[int] | torch.Tensor, cfg: GenerationConfig) -> Plan:
    """Validate the settings against the model and the prompt; raise SettingsError saying what to change."""
    cfg.validate()
    c = lm.config
    ids = _as_ids(lm, prompt, cfg)
    notes: list[str] = []
    bad = [i for i in ids if not 0 <= i < c.vocab_size]
    if bad:
        raise SettingsError(f"token id {bad[0]} is outside the vocabulary (0..{c.vocab_size - 1}); fix the prompt ids")
    if not ids:
        start = c.bos_token_id if lm.kind == "decoder" else (c.eos_token_ids[:1] or [None])[0]
        if start is None:
            raise SettingsError("the prompt is empty and the model has no start token; type a prompt")
        ids = [start]
        notes.append("the prompt was empty: starting from the start token")
    context = c.max_positions
    bounded = c.positional not in _UNBOUNDED_POSITIONS
    if lm.kind == "decoder":
        if len(ids) + cfg.max_new_tokens > context:
            keep = context - cfg.max_new_tokens
            if not cfg.truncate_prompt or keep < 1:
                raise SettingsError(
                    f"the prompt ({len(ids)} tokens) plus max_new_tokens ({cfg.max_new_tokens}) exceeds the model's "
                    f"context of {context} positions; lower max_new_tokens to {max(context - len(ids), 0)} or shorten the prompt"
                )
            notes.append(f"the prompt was truncated on the left from {len(ids)} to {keep} tokens to fit the context")
            ids = ids[-keep:]
        prefix = ids
    else:
        if bounded and len(ids) > context:
            if not cfg.truncate_prompt:
                raise SettingsError(
                    f"the source has {len(ids)} tokens but the encoder holds {context}; shorten it"
                )
            notes.append(f"the source was truncated on the left from {len(ids)} to {context} tokens")
            ids = ids[-context:]
        prefix = decoder_prefix(lm)
        if bounded and len(prefix) + cfg.max_new_tokens > context:
            raise SettingsError(
                f"max_new_tokens ({cfg.max_new_tokens}) exceeds the decoder's {context} positions; "
                f"use at most {context - len(prefix)}"
            )
    max_length = len(prefix) + cfg.max_new_tokens
    forced_bos = (c.forced_bos_token_id, 1) if c.forced_bos_token_id is not None else None
    forced_eos = (c.forced_eos_token_id, max_length - 1) if c.forced_eos_token_id is not None else None
    min_keep = 1 if cfg.num_beams == 1 else len(c.eos_token_ids) + 1
    pipeline = build_pipeline(cfg, forced_bos=forced_bos, forced_eos=forced_eos, min_tokens_to_keep=min_keep)
    return Plan(lm, cfg, ids, prefix, c.eos_token_ids, pipeline, notes)


def generate(
    lm: LoadedModel,
    prompt: str | list[int] | torch.Tensor,
    cfg: GenerationConfig | None = None,
    *,
    stop: threading.Event | None = None,
) -> Iterator[StepEvent]:
    """Stream one StepEvent per generated token (per beam step for beam search).

    Raises SettingsError at once (before any work) for settings that cannot run. The stream ends
    after the event with `finished=True`, or early — without such an event — when `stop` is set or
    the generator is closed.
    """
    p = plan(lm, prompt, cfg if cfg is not None else GenerationConfig())
    return _run(p, stop)


def _run(p: Plan, stop: threading.Event | None) -> Iterator[StepEvent]:
    if p.cfg.num_beams > 1:
        yield from _beam_search(p, stop)
    else:
        yield from _greedy_or_sample(p, stop)


def _stepper(p: Plan, batch: int) -> DecoderStepper | Seq2SeqStepper:
    cls = DecoderStepper if p.lm.kind == "decoder" else Seq2SeqStepper
    return cls(p.lm.model, batch=batch, max_tokens=p.max_length, use_cache=p.cfg.use_cache, capture=p.cfg.capture_attention)


def _start(p: Plan, stepper: DecoderStepper | Seq2SeqStepper) -> torch.Tensor:
    device = p.lm.device
    prompt = torch.tensor(p.prompt_ids, dtype=torch.long, device=device)
    if isinstance(stepper, DecoderStepper):
        return stepper.start(prompt)
    return stepper.start(prompt, torch.tensor(p.prefix_ids, dtype=torch.long, device=device))


def _attention_rows(stepper: DecoderStepper | Seq2SeqStepper, row: int) -> dict[str, list[np.ndarray]] | None:
    """This step's attention: per layer the last query row (h, S) of batch row `row`."""
    if stepper.attention is None:
        return None
    return {
        kind: [w[min(row, w.shape[0] - 1), :, -1].float().cpu().numpy() for w in layers]
        for kind, layers in stepper.attention.items()
    }


class _Clock:
    """prefill / per-step timings of engine work (time spent in the consumer is not counted)."""

    def __init__(self) -> None:
        self.prefill_ms = 0.0
        self.decode_ms = 0.0
        self.decode_steps = 0
        self.total_ms = 0.0

    def record(self, step: int, started: float) -> float:
        """Account one step that began at perf_counter() `started`; returns its milliseconds."""
        step_ms = (time.perf_counter() - started) * 1000
        self.total_ms += step_ms
        if step > 0:  # step 0 is the prefill
            self.decode_ms += step_ms
            self.decode_steps += 1
        return step_ms

    def timing(self, step_ms: float, tokens: int) -> dict[str, float]:
        per_token = self.decode_ms / self.decode_steps if self.decode_steps else 0.0
        return {
            "prefill_ms": round(self.prefill_ms, 3),
            "step_ms": round(step_ms, 3),
            "decode_ms_per_token": round(per_token, 3),
            # decode rate after the prefill; before any decode step, the rate including the prefill
            "tokens_per_s": round(1000.0 / per_token if per_token else tokens * 1000.0 / max(self.total_ms, 1e-9), 3),
            "elapsed_ms": round(self.total_ms, 3),
        }


def _decoder(lm: LoadedModel):
    def decode_one(token_id: int) -> str:
        return lm.decode([token_id])

    return decode_one


def _finish_reason(p: Plan, token_id: int, generated: int, text: str) -> str | None:
    if token_id in p.eos_ids:
        return "eos"
    if p.cfg.stop_strings and any(s in text for s in p.cfg.stop_strings):
        return "stop_string"
    if generated >= p.cfg.max_new_tokens:
        return "length"
    return None


def _greedy_or_sample(p: Plan, stop: threading.Event | None) -> Iterator[StepEvent]:
    lm, cfg, pipeline = p.lm, p.cfg, p.pipeline
    generator = None
    if pipeline.sampling:
        generator = torch.Generator(device=lm.device)
        generator.manual_seed(cfg.seed) if cfg.seed is not None else generator.seed()
    stepper = _stepper(p, batch=1)
    clock = _Clock()
    decode_one = _decoder(lm)
    generated: list[int] = []
    token: torch.Tensor | None = None
    for step in range(cfg.max_new_tokens):
        if stop is not None and stop.is_set():
            return
        t0 = time.perf_counter()
        with torch.inference_mode():
            if token is None:
                logits = _start(p, stepper)
                clock.prefill_ms = (time.perf_counter() - t0) * 1000
            else:
                logits = stepper.step(token)
            sequence = stepper.sequence()
            if cfg.top_candidates > 0:
                stages = pipeline.run_stages(sequence, logits)
                scores = stages[-1][1]
            else:
                scores = pipeline.run(sequence, logits)
            token, prob = search.choose(scores, sample=pipeline.sampling, generator=generator)
            token_id = int(token)
            cands = (
                search.candidates([(n, s[0]) for n, s in stages], token_id, cfg.top_candidates, decode_one)
                if cfg.top_candidates > 0
                else None
            )
            attention = _attention_rows(stepper, 0)
        generated.append(token_id)
        text = lm.decode(generated, skip_special_tokens=True)
        reason = _finish_reason(p, token_id, len(generated), text)
        cache = stepper.stats()
        step_ms = clock.record(step, t0)
        yield StepEvent(
            step=step, token_id=token_id, token_text=decode_one(token_id), prob=prob, token_ids=list(generated),
            text=text, candidates=cands, beams=None, cache=cache, timing=clock.timing(step_ms, len(generated)),
            attention=attention, finished=reason is not None, finish_reason=reason,
        )
        if reason is not None:
            return


def _beam_search(p: Plan, stop: threading.Event | None) -> Iterator[StepEvent]:
    lm, cfg, pipeline = p.lm, p.cfg, p.pipeline
    nb = cfg.num_beams
    stepper = _stepper(p, batch=nb)
    clock = _Clock()
    decode_one = _decoder(lm)
    beams: BeamSearch | None = None
    result = None
    step = 0
    while True:
        if stop is not None and stop.is_set():
            return
        t0 = time.perf_counter()
        with torch.inference_mode():
            if beams is None:
                prefix = torch.tensor(p.prefix_ids, dtype=torch.long, device=lm.device)
                beams = BeamSearch(
                    prefix, num_beams=nb, max_length=p.max_length, eos_token_ids=p.eos_ids,
                    length_penalty=cfg.length_penalty, early_stopping=cfg.early_stopping,
                    pad_token_id=lm.config.pad_token_id,
                )
                logits = _start(p, stepper)
                clock.prefill_ms = (time.perf_counter() - t0) * 1000
            else:
                if not bool((result.beam_index == torch.arange(nb, device=lm.device)).all()):
                    stepper.reorder(result.beam_index)
                logits = stepper.step(result.next_tokens)
            sequence = beams.flat_running()
            log_probs = torch.log_softmax(logits, dim=-1)
            if cfg.top_candidates > 0:
                stages = pipeline.run_stages(sequence, log_probs)
                processed = stages[-1][1]
            else:
                processed = pipeline.run(sequence, log_probs)
            result = beams.step(processed)
            live, finished = beams.live(), beams.finished()
            if result.done:
                best_ids = finished[0][0] if finished else live[0][0]
                reason = "eos" if best_ids and best_ids[-1] in p.eos_ids else "length"
                source = _extended_beam(sequence, len(p.prefix_ids), best_ids)
            else:
                best_ids, reason, source = live[0][0], None, None
            if source is None:  # this step's best continuation (the best hypothesis may have ended earlier)
                source, token_id = int(result.beam_index[0]), int(result.next_tokens[0])
            else:  # the step that completed the best hypothesis
                token_id = best_ids[-1]
            prob = float(torch.log_softmax(processed[source], dim=-1)[token_id].exp())
            cands = None
            if cfg.top_candidates > 0:
                cand_stages = [("raw", logits[source])] + [(n, s[source]) for n, s in stages[1:]]
                cands = search.candidates(cand_stages, token_id, cfg.top_candidates, decode_one)
            attention = _attention_rows(stepper, source)
        # Slots of beams that ended carry a placeholder score; they are not hypotheses.
        hypotheses = [
            Hypothesis(ids, lm.decode(ids, skip_special_tokens=True), s, False) for ids, s in live if s > LARGE_NEGATIVE / 2
        ] + [Hypothesis(ids, lm.decode(ids, skip_special_tokens=True), s, True) for ids, s in finished]
        cache = stepper.stats()
        step_ms = clock.record(step, t0)
        yield StepEvent(
            step=step, token_id=token_id, token_text=decode_one(token_id), prob=prob, token_ids=list(best_ids),
            text=lm.decode(best_ids, skip_special_tokens=True), candidates=cands, beams=hypotheses, cache=cache,
            timing=clock.timing(step_ms, step + 1), attention=attention, finished=result.done, finish_reason=reason,
        )
        if result.done:
            return
        step += 1


def _extended_beam(running: torch.Tensor, prefix_len: int, ids: list[int]) -> int | None:
    """The running beam (row of `running`, before this step) that `ids` extended at this step, or None."""
    head = ids[:-1]
    for beam, row in enumerate(running.tolist()):
        if row[prefix_len:] == head:
            return beam
    return None


def generate_all(
    lm: LoadedModel,
    prompt: str | list[int] | torch.Tensor,
    cfg: GenerationConfig | None = None,
    *,
    stop: threading.Event | None = None,
) -> GenerationResult:
    """Run `generate` to the end and collect a GenerationResult (n-best list, final cache, timings,
    full attention matrices when captured)."""
    cfg = cfg if cfg is not None else GenerationConfig()
    p = plan(lm, prompt, cfg)
    steps = list(_run(p, stop))
    last = steps[-1] if steps else None
    token_ids = list(last.token_ids) if last else []
    text = last.text if last else ""
    if last is not None and last.beams is not None:
        finished = [b for b in last.beams if b.finished]
        sequences = finished or [b for b in last.beams if not b.finished][:1]
    else:
        score = float(sum(np.log(max(e.prob, 1e-45)) for e in steps))
        sequences = [Hypothesis(token_ids, text, score, bool(last and last.finish_reason == "eos"))]
    reason = last.finish_reason if last is not None and last.finished else "stopped"
    attention = full_attention(lm, p.prompt_ids, token_ids) if cfg.capture_attention and token_ids else None
    return GenerationResult(
        token_ids=token_ids, text=text, sequences=sequences, prompt_ids=list(p.prompt_ids),
        cache=last.cache if last else {}, timing=dict(last.timing) if last else {}, finish_reason=reason,
        steps=steps, attention=attention, notes=list(p.notes),
    )


@torch.inference_mode()
def full_attention(lm: LoadedModel, prompt_ids: list[int], token_ids: list[int]) -> dict[str, np.ndarray]:
    """Attention over the whole final sequence in one pass: decoder {"self": (L, h, T, T)} over
    prompt + generated; seq2seq {"encoder": (L_e, h, S, S), "self": (L, h, T, T), "cross": (L, h, T, S)}
    over decoder start + generated (prompt_ids is then the source)."""
    device = lm.device
    if lm.kind == "decoder":
        ids = torch.tensor([list(prompt_ids) + list(token_ids)], dtype=torch.long, device=device)
        captured: list[torch.Tensor] = []
        lm.model(ids, None, captured)
        return {"self": torch.stack([w[0] for w in captured]).float().cpu().numpy()}
    source = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    target = torch.tensor([decoder_prefix(lm) + list(token_ids)], dtype=torch.long, device=device)
    enc_capture: list[torch.Tensor] = []
    encoded = lm.model.encode(source, None, capture=enc_capture)
    dec_capture: dict[str, list[torch.Tensor]] = {"self": [], "cross": []}
    lm.model.decode(target, encoded, None, None, capture=dec_capture)
    out: dict[str, Any] = {"encoder": torch.stack([w[0] for w in enc_capture]).float().cpu().numpy()}
    for kind, layers in dec_capture.items():
        out[kind] = torch.stack([w[0] for w in layers]).float().cpu().numpy()
    return out
