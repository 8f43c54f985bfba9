"""A run whose prompt cache is blended (`GenerationConfig.cache_blend`, the cache-reuse lab's fork) on tiny
checkpoints of several RoPE families: its tokens are the model's own decode from the blended cache (r = 0: naive
reuse's cache; 0 < r < 100: the blend's cache), r = 100 is the plain run bitwise, the shared batch gives the
same run beside others, and what cannot blend says so."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import playground
from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import Scheduler, run_alone
from playground.generation.config import SettingsError
from playground.generation.plan import plan
from playground.models import cache_blend as blending
from tests.hf_tiny import gpt2_like, llama_like, neox_like, save_decoder

FAMILIES = {
    "llama": llama_like(num_hidden_layers=3),
    "qwen2": llama_like(num_key_value_heads=2, num_hidden_layers=3),
    "gpt_neox": neox_like(num_hidden_layers=3, rotary_pct=0.25),
}
IDS = [5, 9, 14, 3, 77, 40, 21, 8, 8, 60, 33, 12, 90, 4, 15, 16, 50, 51, 7, 30, 31, 44, 45, 46, 11]
NEW = 6


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def lm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> object:
    directory = tmp_path_factory.mktemp(request.param)
    save_decoder(directory, request.param, FAMILIES[request.param], init_std=0.1)
    return playground.load_model(directory, device="cpu", dtype="float32")


def decode_from(model: torch.nn.Module, cache: object, logits: torch.Tensor, n: int) -> tuple[list[int], list[float]]:
    """Greedy tokens from a prompt cache and its last logits, one step of the model each: (tokens, their probs)."""
    tokens, probs = [], []
    for _ in range(n):
        p = torch.softmax(logits.float(), -1)
        tokens.append(int(torch.argmax(p)))
        probs.append(float(p[tokens[-1]]))
        logits, cache = blending.prefill(model, tokens[-1:], cache)
    return tokens, probs


def reference(model: torch.nn.Module, starts: list[int], r: int) -> tuple[list[int], list[float]]:
    """The definition: positions 0 … T−2 from CacheBlend at r %, then the model's pass over the last token."""
    keys, values = blending.blended_prompt(model, IDS, starts, r)
    cache = blending.new_cache(model, len(IDS) + NEW + 1)
    cache.write_span(0, len(IDS) - 1, keys, values)
    logits, cache = blending.prefill(model, IDS[-1:], cache)
    return decode_from(model, cache, logits, NEW)


@pytest.mark.parametrize("r", [0, 40])
def test_a_blended_run_decodes_from_the_blended_prompt_cache(lm, r):
    cfg = GenerationConfig(max_new_tokens=NEW, cache_blend=f"tokens:7@{r}")
    result = generate_all(lm, IDS, cfg)
    starts = list(range(0, len(IDS) - 1, 7))
    tokens, probs = reference(lm.model, starts, r)
    assert result.token_ids == tokens
    assert [e.prob for e in result.steps] == pytest.approx(probs, abs=1e-6)  # one row's passes: the same calls
    assert plan(lm, IDS, cfg).blend == (tuple(starts), r)
    assert result.decoding["captured"] is False


def test_naive_reuse_is_the_lab_s_naive_reuse(lm):
    """r = 0: the cache the lab measures as naive reuse, and its first answer token's distribution (the same logits;
    the engine's softmax rounds on its own, within float32's ulp of the probability)."""
    starts = list(range(0, len(IDS) - 1, 7))
    logits, _ = blending.naive_reuse(lm.model, IDS, blending.chunked_kv(lm.model, IDS, starts))
    result = generate_all(lm, IDS, GenerationConfig(max_new_tokens=1, cache_blend="tokens:7@0", top_candidates=5))
    first = result.steps[0]
    p = torch.softmax(logits.float(), -1)
    assert first.token_ids == [int(torch.argmax(p))]
    assert first.prob == pytest.approx(float(p[first.token_ids[0]]), rel=2**-22)


def test_a_blend_differs_from_the_plain_run_and_r_100_is_the_plain_run_bitwise(lm):
    plain = generate_all(lm, IDS, GenerationConfig(max_new_tokens=NEW))
    full = generate_all(lm, IDS, GenerationConfig(max_new_tokens=NEW, cache_blend="tokens:7@100"))
    assert full.token_ids == plain.token_ids and [e.prob for e in full.steps] == [e.prob for e in plain.steps]
    naive = generate_all(lm, IDS, GenerationConfig(max_new_tokens=NEW, cache_blend="tokens:7@0"))
    assert [e.prob for e in naive.steps] != [e.prob for e in plain.steps]  # the reused cache is not the full one


def test_the_shared_batch_gives_a_blended_run_beside_others(lm):
    """Through the scheduler, alone and beside two plain requests: the blend's passes run in the request's turn and
    its decode steps in the batch; the tokens are the eager run's, the probabilities to float32 rounding."""
    cfg = GenerationConfig(max_new_tokens=NEW, cache_blend="tokens:7@40")
    eager = generate_all(lm, IDS, cfg)
    alone = run_alone(plan(lm, IDS, cfg))
    scheduler = Scheduler(lm, max_rows=8, max_prefills=4)
    others = [scheduler.submit(plan(lm, ids, GenerationConfig(max_new_tokens=NEW))) for ids in ([3, 4, 5], IDS[:9])]
    blended = scheduler.submit(plan(lm, IDS, cfg))
    while scheduler.busy():
        scheduler.step()
    for events in (alone, blended.drain()):
        assert events[-1].token_ids == eager.token_ids
        assert np.allclose([e.prob for e in events], [e.prob for e in eager.steps], rtol=0, atol=1e-5)
    for ticket, ids in zip(others, ([3, 4, 5], IDS[:9])):
        assert ticket.drain()[-1].token_ids == generate_all(lm, ids, GenerationConfig(max_new_tokens=NEW)).token_ids


def test_what_cannot_blend_says_so(lm, tmp_path):
    with pytest.raises(SettingsError, match="cache_blend is 'halves@5'"):
        GenerationConfig(cache_blend="halves@5").validate()
    with pytest.raises(SettingsError, match="R from 0 to 100"):
        GenerationConfig(cache_blend="paragraphs@101").validate()
    with pytest.raises(SettingsError, match="do not combine"):
        GenerationConfig(cache_blend="paragraphs@15", kv_window=8).validate()
    with pytest.raises(SettingsError, match="without edits"):
        GenerationConfig(cache_blend="paragraphs@15", interventions=[{"type": "ablate", "layer": 0, "head": 0}]).validate()
    save_decoder(tmp_path / "gpt2", "gpt2", gpt2_like(n_layer=2))
    learned = playground.load_model(tmp_path / "gpt2", device="cpu", dtype="float32")
    with pytest.raises(SettingsError, match="learned positions"):
        plan(learned, IDS, GenerationConfig(cache_blend="paragraphs@15"))
    short = plan(lm, [5], GenerationConfig(cache_blend="paragraphs@15"))
    assert short.blend is None and [n.key for n in short.notes] == ["plan_blend_short"]
