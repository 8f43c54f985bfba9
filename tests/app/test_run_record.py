"""Issue 42, row 3: a run's record is O(n) in its tokens, at most 2 KB a token without captures, and counted.

Each `StepEvent` used to keep the cumulative token list and text so far, the cache's per-layer dict and a `Candidate`
object per row: a link replaying 8 branches of 1,024 tokens kept ~30 KB a token, growing with the square of a run's
length. Now the events share one token chain, keep their stats and clock as small objects and their candidates as
one table; `Run.record_bytes` counts what they keep, and tracemalloc checks that count.
"""

from __future__ import annotations

import gc
import json
import pickle
import tracemalloc

import pytest

import playground
from playground.app.run import Run
from playground.app.settings import UISettings
from playground.config import ModelConfig
from tests.library.test_hostile import _random_checkpoint

VOCAB = 300
PROMPT = [5 + i % 200 for i in range(24)]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A random decoder with no end-of-sequence token: every run is as long as it is asked to be."""
    config = ModelConfig(family="llama", vocab_size=VOCAB, max_positions=4096, d_model=32, n_layers=2, n_heads=4,
                         d_ff=64)
    return playground.load_model(_random_checkpoint(tmp_path_factory.mktemp("m") / "m.safetensors", config))


def recorded(lm, n: int, **knobs) -> Run:
    cfg = playground.GenerationConfig(max_new_tokens=n, top_candidates=5, **knobs)
    run = Run(token="t" * 24, number=1, owner="test", settings=UISettings(), cfg=cfg, kind="decoder",
              prompt_ids=PROMPT, prompt_texts=lm.token_texts(PROMPT), prefix_ids=PROMPT, live_layer=0)
    for event in playground.generate(lm, PROMPT, cfg):
        run.add_event(event, lm)
    run.finish(lm)
    return run


def traced(build, warm: bool = True) -> tuple[object, int]:
    """What `build()` returns and the bytes it left allocated (tracemalloc: every Python and numpy allocation)."""
    if warm:
        build()  # first-call allocations (caches, compiled kernels) are not the run's
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        value = build()
        gc.collect()
        return value, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.fixture(autouse=True)
def no_shared_token_texts(monkeypatch):
    """Token texts fresh for every call (the process's cache of them would hand a run strings that it shares with the
    cache, which tracing then counts as the cache's): what a run keeps, measured alone."""
    monkeypatch.setattr(playground.loaded, "TOKEN_TEXTS_KEPT", 0)


def kept(build) -> tuple[Run, int]:
    """The run `build()` makes and the bytes it keeps: what building it left allocated, less what building one and
    dropping it leaves (not the run's: first calls' caches, torch's own Python objects, ~40 KB a beam search on the
    tiny model)."""
    _, left = traced(lambda: build() and None, warm=False)
    run, grown = traced(build, warm=False)
    return run, grown - left


@pytest.mark.parametrize("knobs", [{}, {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "seed": 1},
                                   {"num_beams": 4}], ids=["greedy", "sample", "beam"])
def test_the_count_is_what_the_run_keeps(lm, knobs):
    run, grown = kept(lambda: recorded(lm, 200, **knobs))
    assert run.capture_bytes() == 0 and len(run.path) == 200
    assert 0.9 * grown <= run.record_bytes() <= 1.1 * grown, (run.record_bytes(), grown)


@pytest.mark.parametrize("knobs", [{}, {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "seed": 1},
                                   {"num_beams": 4}], ids=["greedy", "sample", "beam"])
def test_a_token_keeps_at_most_2_kb_and_a_longer_run_no_more_per_token(lm, knobs):
    short, long = recorded(lm, 150, **knobs), recorded(lm, 600, **knobs)
    per_token = long.record_bytes() / 600
    assert per_token <= 2048, per_token
    assert per_token <= 1.05 * short.record_bytes() / 150  # linear: the prompt's share only shrinks


def test_a_beam_search_keeps_no_more_per_token_as_it_grows(lm):
    short, long = recorded(lm, 100, num_beams=4), recorded(lm, 300, num_beams=4)
    assert long.record_bytes() / 300 <= 1.05 * short.record_bytes() / 100


def test_the_events_still_answer_for_the_run_so_far(lm):
    """The ids and text so far are rebuilt from the shared chain; the stats and clock read as dicts; an event
    pickled (a ZeroGPU worker's pipe) comes back equal."""
    cfg = playground.GenerationConfig(max_new_tokens=12, top_candidates=5, temperature=0.8, seed=2)
    events = list(playground.generate(lm, PROMPT, cfg))
    ids = [e.token_id for e in events]
    for i, event in enumerate(events):
        assert event.token_ids == ids[: i + 1] and len(event.tokens) == i + 1
        assert event.text == lm.detokenize(ids[: i + 1], skip_special_tokens=True)
        json.dumps(event.to_dict())
        back = pickle.loads(pickle.dumps(event))
        assert (back.token_ids, back.text, back.cache, back.timing) == (event.token_ids, event.text, event.cache,
                                                                         event.timing)
        assert list(back.candidates) == list(event.candidates) and sum(c.chosen for c in event.candidates) == 1
    assert events[-1].cache["tokens"] == len(PROMPT) + 11 and set(events[-1].timing) >= {"prefill_ms", "tokens_per_s"}


def test_a_finished_beam_search_keeps_its_path_only(lm):
    """What every running beam kept while it could still win (its candidates, the continuations kept from it) goes
    when the search ends: each step keeps one candidates' table, its path step's, and the path reads as before."""
    run = recorded(lm, 60, num_beams=4)
    assert all(e.beam_captures is None for e in run.events)
    assert all(e.candidates is s.candidates and sum(c.chosen for c in s.candidates) == 1 and
               s.candidates[[c.chosen for c in s.candidates].index(True)].token_id == s.token_id
               for e, s in zip(run.events, run.path))
    last = run.events[-1]
    assert any(b.tokens is last.tokens for b in last.beams)  # one node for the event and its hypothesis
    assert pickle.loads(pickle.dumps(last.beams)) == last.beams
    expected = playground.generate_all(lm, PROMPT, playground.GenerationConfig(max_new_tokens=60, num_beams=4,
                                                                               top_candidates=5))
    assert run.generated_ids == expected.token_ids
    assert [s.prob for s in run.path] == [s.prob for s in expected.path]
    assert [list(s.candidates) for s in run.path] == [list(s.candidates) for s in expected.path]


@pytest.mark.slow
def test_smollm2_beams_keep_at_most_2_kb_a_token(smollm2_dir):
    """Issue 42: a 4-beam search on the real SmolLM2 keeps at most 2 KB a token (it kept 3.0 KB: every step's
    hypotheses as objects, every running beam's candidates and kept continuations to the end), counted and traced."""
    smol = playground.load_model(smollm2_dir)
    prompt = smol.tokenize("Write a long story about a dragon who learns to cook.", chat=True)
    cfg = playground.GenerationConfig(max_new_tokens=100, top_candidates=5, num_beams=4)

    def build() -> Run:
        run = Run(token="t" * 24, number=1, owner="test", settings=UISettings(), cfg=cfg, kind="decoder",
                  prompt_ids=prompt, prompt_texts=smol.token_texts(prompt), prefix_ids=prompt, live_layer=0)
        for event in playground.generate(smol, prompt, cfg):
            run.add_event(event, smol)
        run.finish(smol)
        return run

    run, grown = kept(build)
    assert run.finish_reason == "length" and len(run.path) == 100
    assert run.record_bytes() / 100 <= 2048 and grown / 100 <= 2048, (run.record_bytes() / 100, grown / 100)
    assert 0.9 * grown <= run.record_bytes() <= 1.1 * grown
