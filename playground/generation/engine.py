"""The generation engine: one generator of `StepEvent`s that the app, the CLI and the tests consume.

    for event in generate(lm, "Once upon a time", GenerationConfig(max_new_tokens=20)):
        print(event.token_text, end="")

`plan` validates first; then one of two loops runs: greedy / sampled decoding, or beam search.
Work happens inside `torch.inference_mode()` one step at a time (never across a `yield`, so the
consumer's own torch code is unaffected). Setting the `stop` Event or closing the generator ends
the run before the next forward pass. What a run records (attention, residual stream) is asked for
in the config and costs nothing when it is not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from playground.generation import captured, captures, sampling, shared_step, speculative
from playground.generation.beam import LARGE_NEGATIVE, BeamSearch
from playground.generation.config import GenerationConfig
from playground.generation.events import Beams, GenerationResult, Hypothesis, StepCapture, StepEvent, TokenStep
from playground.generation.plan import Plan, plan
from playground.generation.stepper import Stepper, full_attention
from playground.generation.tail import Clock, EventTail
from playground.generation.tokens import Tokens, generated_start
from playground.loaded import LoadedModel
from playground.models.edits import edited

T = TypeVar("T")


def generate(
    lm: LoadedModel,
    prompt: str | list[int] | torch.Tensor,
    cfg: GenerationConfig | None = None,
    *,
    stop: threading.Event | None = None,
    forced_prefix: Sequence[int] = (),
) -> Iterator[StepEvent]:
    """Stream one StepEvent per generated token (per beam step for beam search).

    Raises SettingsError at once (before any work) for settings that cannot run. The stream ends
    after the event with `finished=True`, or early — without such an event — when `stop` is set or
    the generator is closed. `forced_prefix`: tokens the output is made to start with (branching
    from a step); events describe only the tokens generated after them.
    """
    return run_plan(plan(lm, prompt, cfg if cfg is not None else GenerationConfig(), forced_prefix), stop)


def run_plan(p: Plan, stop: threading.Event | None = None) -> Iterator[StepEvent]:
    """Run a plan made by `plan()` (for callers that show what planning decided before the run)."""
    reason = captured.why_eager(p)
    if reason is None:  # loaded with compile=True and a run the captured step takes
        return shared_step.decode(p, stop, _greedy_or_sample)
    p.decoding = captured.eager_decoding(p, reason)
    if p.draft is not None:
        return speculative.speculate(p, stop)
    loop = _beam_search if p.cfg.num_beams > 1 else _greedy_or_sample
    return loop(p, stop)


def _new_stepper(p: Plan, batch: int) -> Stepper:
    return p.stepper(p.lm.model, batch=batch, max_tokens=p.max_length, use_cache=p.cfg.use_cache, policy=p.policy,
                     blend=p.blend)


def _forward(p: Plan, stepper: Stepper, step: int, tokens: torch.Tensor | None):
    """Prefill (step 0) or one decoding step; returns the logits and what it recorded (or None)."""
    if p.cfg.interventions:  # the run's edits, installed for this pass only; nothing at all without them
        with edited(p.lm.model, p.cfg.interventions):
            return _pass(p, stepper, step, tokens)
    return _pass(p, stepper, step, tokens)


def _pass(p: Plan, stepper: Stepper, step: int, tokens: torch.Tensor | None):
    recorder = captures.recorder_for(p.cfg, prefill=step == 0)
    if step == 0:
        device = p.lm.device
        source = torch.tensor(p.prompt_ids, dtype=torch.long, device=device)
        logits = stepper.start(source, torch.tensor(p.prefix_ids, dtype=torch.long, device=device), recorder)
    else:
        logits = stepper.step(tokens, recorder)
    return logits, recorder


def _recorded(p: Plan, recorder, step: int) -> tuple[Any, Any, Any]:
    """(attention rows of every batch row, residual rows, the prompt's attention maps) of one pass."""
    if recorder is None:
        return None, None, None
    c = p.lm.config
    rows = captures.last_rows(recorder, p.stepper.kinds, c.n_layers) if p.cfg.capture_attention else None
    prompt = None
    if step == 0 and p.cfg.capture_prompt_attention:
        counts = {kind: c.n_layers for kind in p.stepper.kinds}
        if not p.stepper.decoder_only:
            counts["encoder"] = c.n_encoder_layers
        prompt = captures.prompt_maps(recorder, counts)
    return rows, captures.residual_rows(recorder), prompt


def _greedy_or_sample(p: Plan, stop: threading.Event | None) -> Iterator[StepEvent]:
    lm, cfg, pipeline = p.lm, p.cfg, p.pipeline
    generator = None
    if pipeline.sampling:
        generator = torch.Generator(device=lm.device)
        generator.manual_seed(cfg.seed) if cfg.seed is not None else generator.seed()
    stepper = _new_stepper(p, batch=1)
    tail = EventTail(p)
    token: torch.Tensor | None = None
    for step in range(cfg.max_new_tokens):
        if stop is not None and stop.is_set():
            return
        t0 = time.perf_counter()
        with torch.inference_mode():
            logits, recorder = _forward(p, stepper, step, token)
            sequence = stepper.sequence()
            stages = pipeline.run_stages(sequence, logits) if cfg.top_candidates > 0 else None
            scores = stages[-1][1] if stages is not None else pipeline.run(sequence, logits)
            token, prob = sampling.choose(scores, sample=pipeline.sampling, generator=generator)
            token_id = int(token)
            cands = None
            if stages is not None:
                cands = sampling.candidates([(n, s[0]) for n, s in stages], token_id, cfg.top_candidates, lm.token_text)
            rows, residual, prompt = _recorded(p, recorder, step)
        event = tail.event(step, token_id, prob, t0, kv=stepper.stats(), candidates=cands,
                           attention=captures.pick_row(rows, 0), residual=captures.pick_residual(residual, 0),
                           prompt_attention=prompt)
        yield event
        if event.finished:
            return


def _beam_search(p: Plan, stop: threading.Event | None) -> Iterator[StepEvent]:
    lm, cfg, pipeline = p.lm, p.cfg, p.pipeline
    nb = cfg.num_beams
    stepper = _new_stepper(p, batch=nb)
    clock = Clock()
    beams = BeamSearch(
        torch.tensor(p.prefix_ids, dtype=torch.long, device=lm.device), num_beams=nb, max_length=p.max_length,
        eos_token_ids=p.eos_ids, length_penalty=cfg.length_penalty, early_stopping=cfg.early_stopping,
        pad_token_id=lm.config.pad_token_id,
    )
    result = None
    step = 0
    tree = _BeamTree(generated_start(p.lm))
    while True:
        if stop is not None and stop.is_set():
            return
        t0 = time.perf_counter()
        with torch.inference_mode():
            if result is not None and not bool((result.beam_index == torch.arange(nb, device=lm.device)).all()):
                stepper.reorder(result.beam_index)
            logits, recorder = _forward(p, stepper, step, None if result is None else result.next_tokens)
            sequence = beams.flat_running()
            log_probs = torch.log_softmax(logits, dim=-1)
            stages = pipeline.run_stages(sequence, log_probs) if cfg.top_candidates > 0 else None
            processed = stages[-1][1] if stages is not None else pipeline.run(sequence, log_probs)
            result = beams.step(processed)
            live, finished = beams.live(), beams.finished()
            best = finished[0] if result.done and finished else live[0]
            best_ids, _, best_path = best
            if len(best_ids) == step + 1:  # the best hypothesis was extended at this step
                source, token_id = best_path[-1], best_ids[-1]
            else:  # it ended earlier: describe this step's best continuation
                source, token_id = int(result.beam_index[0]), int(result.next_tokens[0])
            token_probs = torch.log_softmax(processed, dim=-1)
            sources, kept_tokens = result.kept_sources, result.kept_tokens
            # (source beam, token, probability) of every continuation kept, as one float64 table (ids fit exactly)
            kept = torch.stack((sources.double(), kept_tokens.double(),
                                token_probs[sources, kept_tokens].exp().double())).T.cpu().numpy()
            prob = float(token_probs[source, token_id].exp())
            per_beam = None
            if stages is not None:  # every beam's candidates, each with the continuations kept from it
                per_beam = [
                    sampling.candidates(
                        [("raw", logits[b])] + [(n, s[b]) for n, s in stages[1:]], token_id if b == source else -1,
                        cfg.top_candidates, lm.token_text, include=[int(t) for src, t, _ in kept if src == b],
                    )
                    for b in range(nb)
                ]
            rows, residual, prompt = _recorded(p, recorder, step)
        reason = None
        if result.done:
            reason = "eos" if best_ids and best_ids[-1] in p.eos_ids else "length"
        # Slots of beams that ended carry a placeholder score; they are not hypotheses.
        running = [(ids, s, path) for ids, s, path in live if s > LARGE_NEGATIVE / 2]
        hypotheses = Beams([tree.node(ids, path) for ids, _, path in running + finished],
                           [s for _, s, _ in running + finished], len(running))
        tree.forget_older()
        step_ms = clock.record(step, t0)
        yield StepEvent(
            step=step, token_id=token_id, token_text=lm.token_text(token_id), prob=prob,
            tokens=tree.node(best_ids, best_path), candidates=None if per_beam is None else per_beam[source],
            beams=hypotheses, kv=stepper.stats(), clock=clock.timing(step_ms, step + 1),
            attention=captures.pick_row(rows, source), finished=result.done, finish_reason=reason,
            residual=captures.pick_residual(residual, source), prompt_attention=prompt, source_beam=source,
            beam_captures={"attention": rows, "residual": residual, "candidates": per_beam, "kept": kept},
        )
        if result.done:
            return
        step += 1


class _BeamTree:
    """The beam search's hypotheses as nodes of one tree: a hypothesis that extends one of the last step's (the
    same ids and beam path but its last token) shares that one's node, so a step adds a node per beam, not a copy."""

    def __init__(self, start: Tokens) -> None:
        self.start = start
        self.known: dict[tuple[tuple[int, ...], tuple[int, ...]], Tokens] = {}
        self.older: dict[tuple[tuple[int, ...], tuple[int, ...]], Tokens] = {}

    def node(self, ids: list[int], path: list[int]) -> Tokens:
        key = (tuple(ids), tuple(path))
        found = self.known.get(key) or self.older.get(key)
        if found is None:
            parent = self.older.get((key[0][:-1], key[1][:-1])) if ids else None
            if parent is None:  # no hypothesis of the last step is its beginning: a branch from the start
                parent = self.start
                for token_id, source in zip(ids[:-1], path[:-1]):
                    parent = parent.extend(token_id, source)
            found = parent.extend(ids[-1], path[-1]) if ids else self.start
        self.known[key] = found
        return found

    def forget_older(self) -> None:
        """This step's hypotheses become the ones the next step's extend."""
        self.older, self.known = self.known, {}


def token_path(lm: LoadedModel, events: list[StepEvent], final: Hypothesis | None) -> list[TokenStep]:
    """The returned sequence token by token. Greedy/sampled: the events themselves. Beam search: the
    winning hypothesis, each token with the probability, candidates and captures of the beam (its
    `beam_path` entry) that chose it at that step."""
    if final is None:
        return [
            TokenStep(e.step, e.token_id, e.token_text, e.prob, e.candidates, None, e.capture) for e in events
        ]
    path = []
    for t, (token_id, source) in enumerate(zip(final.token_ids, final.beam_path)):
        extra = events[t].beam_captures or {}
        prob = next(float(pr) for b, tok, pr in extra["kept"] if b == source and tok == token_id)
        per_beam = extra.get("candidates")
        cands = None
        if per_beam is not None:
            cands = per_beam[source].with_chosen(token_id)
        capture = StepCapture(
            captures.pick_row(extra.get("attention"), source), captures.pick_residual(extra.get("residual"), source)
        )
        text = events[t].token_text if events[t].token_id == token_id else lm.token_text(token_id)  # one string
        path.append(TokenStep(t, token_id, text, prob, cands, source, capture))
    return path


def final_hypothesis(last: StepEvent) -> Hypothesis:
    """Beam search's answer from its last event: the best finished hypothesis, else the best still open."""
    finished = [b for b in last.beams or [] if b.finished]
    return finished[0] if finished else last.beams[0]


def generate_all(
    lm: LoadedModel,
    prompt: str | list[int] | torch.Tensor,
    cfg: GenerationConfig | None = None,
    *,
    stop: threading.Event | None = None,
    forced_prefix: Sequence[int] = (),
) -> GenerationResult:
    """Run `generate` to the end and collect a GenerationResult: the n-best list, the final cache,
    timings, the returned sequence's token path (with what was recorded) and, with
    `capture_attention`, the full attention maps of the final sequence."""
    return drain(iter_generate_all(lm, prompt, cfg, stop=stop, forced_prefix=forced_prefix))


def drain(work: Generator[Any, None, T]) -> T:
    """The return value of a generator of slices (`iter_generate_all` and the sliced analyses), all at once."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value


def iter_generate_all(
    lm: LoadedModel,
    prompt: str | list[int] | torch.Tensor,
    cfg: GenerationConfig | None = None,
    *,
    stop: threading.Event | None = None,
    forced_prefix: Sequence[int] = (),
) -> Generator[None, None, GenerationResult]:
    """`generate_all` one step per `next()` (it yields None after each step and returns the result), so that a
    caller sharing the torch thread (the app's jobs) can let others run between the steps."""
    cfg = cfg if cfg is not None else GenerationConfig()
    p = plan(lm, prompt, cfg, forced_prefix, final_maps=cfg.capture_attention)
    steps = []
    for event in run_plan(p, stop):
        steps.append(event)
        yield
    last = steps[-1] if steps else None
    token_ids = last.token_ids if last else []
    text = last.text if last else ""
    final = None
    if last is not None and last.beams is not None:
        finished = [b for b in last.beams if b.finished]
        sequences = finished or [b for b in last.beams if not b.finished][:1]
        final = final_hypothesis(last)
    else:
        score = float(sum(np.log(max(e.prob, 1e-45)) for e in steps))
        sequences = [Hypothesis(token_ids, text, score, bool(last and last.finish_reason == "eos"))]
    reason = last.finish_reason if last is not None and last.finished else "stopped"
    attention = None
    if cfg.capture_attention and token_ids:  # p.lm: the run's own model (a precision variant, if asked)
        with edited(p.lm.model, cfg.interventions):
            attention = full_attention(p.lm, p.prompt_ids, p.forced_ids + token_ids, policy=p.policy)
    return GenerationResult(
        token_ids=token_ids, text=text, sequences=sequences, prompt_ids=list(p.prompt_ids),
        cache=last.cache if last else {}, timing=dict(last.timing) if last else {}, finish_reason=reason,
        steps=steps, attention=attention, notes=list(p.notes), path=token_path(lm, steps, final),
        prompt_attention=steps[0].prompt_attention if steps else None, decoder_prefix=list(p.prefix_ids),
        interventions=[iv.to_dict() for iv in cfg.interventions], precision=p.precision,
        speculation=speculative.summary(steps, cfg), decoding=p.decoding,
    )
