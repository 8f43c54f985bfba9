"""Cache reuse (CacheBlend and prefix reuse) on tiny checkpoints of several RoPE families: r = 100 is the full prefill
bitwise, r = 0 is naive reuse, a rotation moves a chunk's keys exactly where a recomputation puts them, and models
without RoPE say why their keys cannot move."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import playground
from playground.analysis import cache_blend as cb
from tests.hf_tiny import gpt2_like, llama_like, neox_like, save_decoder

FAMILIES = {
    "llama": llama_like(num_hidden_layers=3),
    "qwen2": llama_like(num_key_value_heads=2, num_hidden_layers=3),  # GQA 2:1
    "gpt_neox": neox_like(num_hidden_layers=3, rotary_pct=0.25),  # partial rotary, parallel residual
    "qwen3": llama_like(num_key_value_heads=2, head_dim=16, num_hidden_layers=3),  # q/k norms before RoPE
}
IDS = [5, 9, 14, 3, 77, 40, 21, 8, 8, 60, 33, 12, 90, 4, 15, 16, 50, 51, 7, 30, 31, 44, 45, 46, 11]
STARTS = [0, 7, 15]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def lm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> object:
    directory = tmp_path_factory.mktemp(request.param)
    save_decoder(directory, request.param, FAMILIES[request.param], init_std=0.1)
    return playground.load_model(directory, device="cpu", dtype="float32")


def _parts(model: torch.nn.Module) -> tuple[cb.KV, cb.KV]:
    return cb.chunked_kv(model, IDS, STARTS), cb.kv_of(model, IDS)


def test_movable(lm: object) -> None:
    assert cb.why_not_movable(lm) is None


def test_r100_is_the_full_prefill_bitwise(lm: object) -> None:
    model = lm.model
    reused, full = _parts(model)
    logits, cache, picked = cb.blend(model, IDS, reused, full, 100)
    plain, plain_cache = cb.prefill(model, IDS)
    assert picked.tolist() == list(range(len(IDS) - 1))
    assert torch.equal(logits, plain)
    ours, theirs = cache.read_span(0, len(IDS)), plain_cache.read_span(0, len(IDS))
    for a, b in zip(ours[0] + ours[1], theirs[0] + theirs[1]):  # every layer's keys and values
        assert torch.equal(a, b)


def test_r0_is_naive_reuse(lm: object) -> None:
    model = lm.model
    reused, full = _parts(model)
    logits, _, picked = cb.blend(model, IDS, reused, full, 0)
    naive, _ = cb.naive_reuse(model, IDS, reused)
    assert picked.numel() == 0 and torch.equal(logits, naive)
    # the blend's own pass with nothing but the last token fresh computes the same numbers (another kernel order)
    cache = cb.new_cache(model, len(IDS) + 4, cb.BlendCache, reused=reused, fresh=torch.tensor([len(IDS) - 1]))
    masked, _ = cb.prefill(model, IDS, cache)
    torch.testing.assert_close(masked, naive, rtol=1e-5, atol=1e-5)
    # and naive reuse loses something: the chunks never saw each other
    plain, _ = cb.prefill(model, IDS)
    assert cb.kl(plain, naive) > 0


def test_more_recompute_comes_closer(lm: object) -> None:
    model = lm.model
    reused, full = _parts(model)
    plain, _ = cb.prefill(model, IDS)
    kls = [cb.kl(plain, cb.blend(model, IDS, reused, full, r)[0]) for r in (0, 50, 100)]
    assert kls[2] == 0.0 and kls[1] < kls[0]


def test_rotation_moves_keys_where_a_recomputation_puts_them(lm: object) -> None:
    """⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩: a chunk's keys computed at 0 … L−1 and rotated by s are its keys computed at
    s … s+L−1 (layer 0, where a key depends only on its token and its position)."""
    model = lm.model
    chunk, s = IDS[15:24], 15
    alone = cb.kv_of(model, chunk)[0][0]
    moved = cb.rotate_keys(model, cb.kv_of(model, chunk)[0], s)[0]
    there = cb.kv_of(model, IDS[: s + len(chunk)])[0][0][:, s:]
    assert not torch.allclose(alone, there)
    torch.testing.assert_close(moved, there, rtol=1.3e-6, atol=1e-5)
    # the first chunk needs no move: its reused K/V are its full-prefill ones at layer 0
    reused, full = _parts(model)
    torch.testing.assert_close(reused[0][0], full[0][0][:, :-1], rtol=1.3e-6, atol=1e-5)
    assert cb.relative_deviation(reused, full)[0] < 1e-5 < cb.relative_deviation(reused, full)[-1]


def test_sweep_and_prefix_reuse(lm: object) -> None:
    model = lm.model
    work = cb.blend_sweep(model, IDS, STARTS, [0, 50, 100], steps=4)
    rows = []
    try:
        while True:
            rows.append(next(work))
    except StopIteration as end:
        found = end.value
    assert [r["r"] for r in found["rows"]] == [0.0, 50.0, 100.0] and rows == found["rows"]
    last = found["rows"][-1]
    assert last["kl_mean"] == 0.0 and last["top1"] == 1.0 and last["share"] == 1.0
    assert found["rows"][0]["share"] < found["rows"][1]["share"] < 1.0
    second = IDS[:18] + [70, 71, 72]
    out = cb.prefix_reuse(model, IDS, second, steps=4)
    assert out["shared"] == 18 and out["same"] and out["max_logit_diff"] < 1e-4


def test_chunk_starts() -> None:
    texts = ["A", "b", ".\n\n", "C", "d\n", "E", "?"]
    assert cb.chunk_starts(texts, "paragraphs") == [0, 3, 5]
    assert cb.chunk_starts(texts, "tokens:2") == [0, 2, 4]
    with pytest.raises(ValueError):
        cb.chunk_starts(texts, "sentences")


def test_models_without_rope_say_why(tmp_path: Path) -> None:
    save_decoder(tmp_path / "gpt2", "gpt2", gpt2_like())
    lm = playground.load_model(tmp_path / "gpt2", device="cpu", dtype="float32")
    assert cb.why_not_movable(lm) == "learned"
