"""No work escapes the scheduler's slices (round 5, rows 3 and 8).

Row 3: a run drafted by a second model ran all its drafter's passes inside one step of the shared batch (16
per token with 16 draft tokens), so another visitor's 32-token request took 56-78 s instead of 3 s. Row 8: a
run with its own KV policy, edits or a draft read a 2,000-token prompt in one pass in its own turn, while the
batch feeds everyone else's prompt in 32-token chunks (another visitor waited 28.2 of its 28.3 s).

Now a drafter's passes and the prompts of runs that take their own turns go one turn at a time: a step of the
scheduler runs at most one pass of such a run beside the batch's shared pass, no pass reads more than a chunk
of a prompt, and each run still picks the tokens it picks alone.
"""

from __future__ import annotations

import numpy as np
import pytest

import playground
from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import CHUNK, Scheduler
from playground.generation.plan import plan
from playground.interventions import Ablate
from tests.hf_tiny import llama_like, save_decoder

LONG = [(7 * i) % 90 + 3 for i in range(3 * CHUNK + 5)]  # four chunks


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("target")
    save_decoder(directory, "llama", llama_like(), init_std=0.1)
    return playground.load_model(directory)


@pytest.fixture(scope="module")
def drafter(tmp_path_factory):
    directory = tmp_path_factory.mktemp("drafter")
    save_decoder(directory, "llama", llama_like(), seed=7, init_std=0.1)
    return playground.load_model(directory)


class Passes:
    """Every forward pass through a model's first block in each scheduler step: its token count."""

    def __init__(self, *models) -> None:
        self.steps: list[list[int]] = []
        self._current: list[int] = []
        self._hooks = [m.model.blocks[0].register_forward_pre_hook(self._seen) for m in models]

    def _seen(self, _module, args) -> None:
        self._current.append(args[0].shape[0] * args[0].shape[1])

    def step(self, scheduler: Scheduler) -> None:
        self._current = []
        scheduler.step()
        self.steps.append(self._current)

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()


def _run_beside_a_plain_request(lm, other_models, cfg: GenerationConfig, prompt: list[int]):
    """`cfg` on `prompt` beside a plain 12-token request: the runs' events and the passes of each step."""
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4)
    passes = Passes(lm, *other_models)
    try:
        plain = scheduler.submit(plan(lm, [5, 9, 23, 40, 7], GenerationConfig(max_new_tokens=12)))
        special = scheduler.submit(plan(lm, prompt, cfg))
        while scheduler.busy():
            passes.step(scheduler)
    finally:
        passes.close()
    return special.drain(), plain.drain(), passes.steps


def test_a_model_drafter_drafts_one_pass_per_step(lm, drafter, one_thread):
    """16 draft tokens by a second model: at most one drafter pass per step beside the batch's pass, and the
    plain request decodes while the drafted run drafts."""
    cfg = GenerationConfig(max_new_tokens=12, draft=drafter, draft_tokens=16)
    got, plain, steps = _run_beside_a_plain_request(lm, [drafter], cfg, [5, 9, 23, 40, 7])
    reference = generate_all(lm, [5, 9, 23, 40, 7], cfg)
    assert got[-1].token_ids == reference.token_ids == generate_all(lm, [5, 9, 23, 40, 7], cfg.replace(draft=None)).token_ids
    assert max(len(s) for s in steps) <= 2, [len(s) for s in steps]  # before: 16 drafter passes in one step
    assert plain[-1].finished and len(plain) == 12


def test_a_drafters_long_prompt_is_fed_a_chunk_per_turn(lm, drafter, one_thread):
    cfg = GenerationConfig(max_new_tokens=4, draft=drafter, draft_tokens=4)
    got, _, steps = _run_beside_a_plain_request(lm, [drafter], cfg, LONG)
    # (the target's own prompt goes in the batch's chunks, its last one in a pass beside the plain prompt's 5)
    assert max(n for s in steps for n in s) <= CHUNK + 5
    assert got[-1].token_ids == generate_all(lm, LONG, cfg).token_ids


def test_a_run_with_a_kv_window_takes_its_own_turns_and_reads_its_prompt_in_chunks(lm, one_thread):
    """A run with a KV window over a four-chunk prompt: no pass reads more than a chunk, the plain request beside it
    decodes meanwhile, and it picks the tokens it picks alone (probabilities to float32 rounding: the same pass in
    chunks sums in another order)."""
    cfg = GenerationConfig(max_new_tokens=6, kv_window=16, kv_sink=2)
    got, plain, steps = _run_beside_a_plain_request(lm, [], cfg, LONG)
    assert max(n for s in steps for n in s) <= CHUNK, [s for s in steps if max(s, default=0) > CHUNK]
    reference = generate_all(lm, LONG, cfg)
    assert got[-1].token_ids == reference.token_ids
    assert np.allclose([e.prob for e in got], [e.prob for e in reference.steps], rtol=0, atol=1e-5)
    assert plain[-1].finished and len(plain) == 12


def test_an_edited_runs_prompt_goes_in_the_batchs_chunks_beside_the_others(lm, one_thread):
    """An edited run over a four-chunk prompt is fed as everyone's is: a chunk per step, in the same pass as the
    plain request's prompt (never a pass of its own), and it picks the tokens it picks alone."""
    cfg = GenerationConfig(max_new_tokens=6, interventions=(Ablate(0, head=1),))
    got, plain, steps = _run_beside_a_plain_request(lm, [], cfg, LONG)
    assert max(len(s) for s in steps) == 1  # one pass a step: the edited rows share the batch's
    assert max(n for s in steps for n in s) == CHUNK + 5  # its first chunk beside the plain prompt's 5 tokens
    reference = generate_all(lm, LONG, cfg)
    assert got[-1].token_ids == reference.token_ids
    assert np.allclose([e.prob for e in got], [e.prob for e in reference.steps], rtol=0, atol=1e-5)
    assert plain[-1].finished and len(plain) == 12


def test_a_heavy_hitter_run_reads_its_prompt_whole(lm, one_thread):
    """Its evictions follow the whole prompt's attention: chunks would keep other keys, so it stays one pass
    (bounded in memory by the policy's own chunked scoring)."""
    cfg = GenerationConfig(max_new_tokens=4, kv_window=16, kv_heavy=4)
    got, _, steps = _run_beside_a_plain_request(lm, [], cfg, LONG)
    assert max(n for s in steps for n in s) == len(LONG)
    assert got[-1].token_ids == generate_all(lm, LONG, cfg).token_ids


def test_a_model_with_captured_steps_decodes_through_them_in_the_scheduler(lm, one_thread):
    """`load_model(compile=True)`: the server's scheduler runs a run the step takes through the captured step,
    a token per turn, while a plain eager request shares the batch's passes in between; the tokens are what
    generate_all gives through the same step, the probabilities to float32 rounding."""
    import dataclasses

    from playground.generation.captured import CapturedDecoder

    stepped = dataclasses.replace(lm, captured=CapturedDecoder(lm.model, compile=False))  # uncompiled: the same module
    cfg = GenerationConfig(max_new_tokens=8, temperature=0.8, top_k=20, seed=3, capture_attention=True)
    reference = generate_all(stepped, [11, 3, 17], cfg)  # prepares the shape (a scheduler prepares it aside)
    scheduler = Scheduler(stepped, max_rows=16, max_prefills=4)
    plain = scheduler.submit(plan(lm, [5, 9, 23, 40, 7], GenerationConfig(max_new_tokens=12)))
    run = scheduler.submit(plan(stepped, [11, 3, 17], cfg))
    while scheduler.busy():
        scheduler.step()
    got = run.drain()
    assert run.plan.decoding == reference.decoding and reference.decoding["captured"] is True
    assert got[-1].token_ids == reference.token_ids
    assert np.allclose([e.prob for e in got], [e.prob for e in reference.steps], rtol=0, atol=1e-6)
    assert plain.drain()[-1].token_ids == generate_all(lm, [5, 9, 23, 40, 7], GenerationConfig(max_new_tokens=12)).token_ids
