"""Cache reuse (CacheBlend and prefix reuse) on tiny checkpoints of several RoPE families: r = 100 is the full prefill
bitwise, r = 0 is naive reuse, the blend's pass (fewer rows after its check layer) computes what a pass over every
row with the unselected K/V replaced computes, a rotation moves a chunk's keys exactly where a recomputation puts
them, and models without RoPE say why their keys cannot move."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import playground
from playground.analysis import cache_blend as cb
from playground.models import cache_blend as blending
from playground.models.kv_cache import KVCache
from tests.float32_bounds import assert_within, float32_depth, sum_bound
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


def _parts(model: torch.nn.Module) -> tuple[blending.KV, blending.KV]:
    return blending.chunked_kv(model, IDS, STARTS), blending.kv_of(model, IDS)


def test_movable(lm: object) -> None:
    assert blending.why_not_movable(lm) is None


def test_r100_is_the_full_prefill_bitwise(lm: object) -> None:
    model = lm.model
    reused, full = _parts(model)
    logits, cache, picked = blending.blend(model, IDS, reused, 100)
    plain, plain_cache = blending.prefill(model, IDS)
    assert picked.tolist() == list(range(len(IDS) - 1))
    assert torch.equal(logits, plain)
    ours, theirs = cache.read_span(0, len(IDS)), plain_cache.read_span(0, len(IDS))
    for a, b in zip(ours[0] + ours[1], theirs[0] + theirs[1]):  # every layer's keys and values
        assert torch.equal(a, b)


def test_r0_is_naive_reuse(lm: object) -> None:
    model = lm.model
    reused, full = _parts(model)
    logits, _, picked = blending.blend(model, IDS, reused, 0)
    naive, _ = blending.naive_reuse(model, IDS, reused)
    assert picked.numel() == 0 and torch.equal(logits, naive)
    # the blend's own pass with nothing but the last token fresh computes the same numbers (other kernels, other
    # row counts: within float32 rounding)
    masked, _, picked = blending.blend_pass(model, IDS, reused, 0)
    assert picked.numel() == 0
    assert_within(masked.numpy(), naive.numpy(), _logits_bound(lm, reused), "the pass at r = 0 against naive reuse")
    # and naive reuse loses something: the chunks never saw each other
    plain, _ = blending.prefill(model, IDS)
    assert cb.kl(plain, naive) > 0


class DenseBlendCache(KVCache):
    """The blend as first defined, over every row: a pass of all T tokens whose every layer stores the reused K/V
    except at the `fresh` positions (the rows the blend's pass computes after its check layer)."""

    def __init__(self, *, reused: blending.KV, fresh: torch.Tensor, **kw: object) -> None:
        super().__init__(**kw)
        self.reused, self.fresh = reused, fresh

    def write_masked(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor, *, ordered: bool = False):
        if start == 0:
            rk, rv = self.reused
            n = rk[layer].shape[1]
            keep = torch.zeros(n, dtype=torch.bool)
            keep[self.fresh[self.fresh < n]] = True
            k, v = k.clone(), v.clone()
            k[0, :, :n] = torch.where(keep[None, :, None], k[0, :, :n], rk[layer])
            v[0, :, :n] = torch.where(keep[None, :, None], v[0, :, :n], rv[layer])
        return super().write_masked(layer, start, k, v, ordered=ordered)


def _logits_bound(lm: object, reused: blending.KV, cache: KVCache | None = None, token: int = 7) -> np.ndarray:
    """Two float32 computations of the last logits that differ in their kernels' order: every logit is a sum over
    d_model of the final hidden state times the head, whose inputs carry the rounding of every block before it.
    The magnitudes are naive reuse's, or those of one decode step of `token` after `cache`."""
    model, c = lm.model, lm.config
    hidden: list[torch.Tensor] = []
    handle = model.norm.register_forward_hook(lambda _m, _i, out: hidden.append(out[0, -1].detach()))
    try:
        blending.naive_reuse(model, IDS, reused) if cache is None else blending.prefill(model, [token], cache)
    finally:
        handle.remove()
    h = hidden[-1].abs().double().numpy()
    if model.lm_head is not None:
        magnitude = h @ model.lm_head.weight.detach().abs().double().numpy()  # stored (in, out)
    else:
        magnitude = model.embed.weight.detach().abs().double().numpy() @ h  # tied: the embedding (V, d)
    return sum_bound(magnitude, float32_depth(lm, "self", c.n_layers - 1))


@pytest.mark.parametrize("r", [15, 50, 100])
def test_the_blend_pass_computes_the_blend_over_every_row(lm: object, r: int) -> None:
    """Fewer rows after the check layer change no number but by rounding: the same positions selected (from the
    full prefill's K/V at the check layer) and the last logits of a pass over every row with the other positions'
    K/V replaced."""
    model = lm.model
    reused, full = _parts(model)
    logits, cache, picked = blending.blend_pass(model, IDS, reused, r)
    assert picked.tolist() == blending.selection(cb.deviation(reused, full)[blending.CHECK_LAYER], r).tolist()
    fresh = torch.cat([picked, torch.tensor([len(IDS) - 1])])
    dense = blending.new_cache(model, len(IDS) + 64, DenseBlendCache, reused=reused, fresh=fresh)
    expected, dense = blending.prefill(model, IDS, dense)
    assert_within(logits.numpy(), expected.numpy(), _logits_bound(lm, reused), f"the blend's pass at r = {r}")
    assert cache.length == len(IDS)  # then it decodes as a plain cache, on the blended K/V
    copy = blending.new_cache(model, len(IDS) + 64)
    copy.fill_from(cache)
    bound = _logits_bound(lm, reused, copy)  # its magnitudes, from a copy of the blended cache
    step, _ = blending.prefill(model, [7], cache)
    again, _ = blending.prefill(model, [7], dense)
    assert_within(step.numpy(), again.numpy(), bound, f"a decode step after the blend's pass at r = {r}")


def test_more_recompute_comes_closer(lm: object) -> None:
    model = lm.model
    reused, full = _parts(model)
    plain, _ = blending.prefill(model, IDS)
    kls = [cb.kl(plain, blending.blend(model, IDS, reused, r)[0]) for r in (0, 50, 100)]
    assert kls[2] == 0.0 and kls[1] < kls[0]


def test_rotation_moves_keys_where_a_recomputation_puts_them(lm: object) -> None:
    """⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩: a chunk's keys computed at 0 … L−1 and rotated by s are its keys computed at
    s … s+L−1 (layer 0, where a key depends only on its token and its position)."""
    model = lm.model
    chunk, s = IDS[15:24], 15
    alone = blending.kv_of(model, chunk)[0][0]
    moved = blending.rotate_keys(model, blending.kv_of(model, chunk)[0], s)[0]
    there = blending.kv_of(model, IDS[: s + len(chunk)])[0][0][:, s:]
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
    assert all(row["seconds"] > 0 for row in found["rows"])  # each measured: naive reuse, the pass, the prefill
    second = IDS[:18] + [70, 71, 72]
    out = cb.prefix_reuse(model, IDS, second, steps=4)
    assert out["shared"] == 18 and out["same"] and out["max_logit_diff"] < 1e-4


def test_chunk_starts() -> None:
    texts = ["A", "b", ".\n\n", "C", "d\n", "E", "?"]
    assert blending.chunk_starts(texts, "paragraphs") == [0, 3, 5]
    assert blending.chunk_starts(texts, "tokens:2") == [0, 2, 4]
    with pytest.raises(ValueError):
        blending.chunk_starts(texts, "sentences")


def test_models_without_rope_say_why(tmp_path: Path) -> None:
    save_decoder(tmp_path / "gpt2", "gpt2", gpt2_like())
    lm = playground.load_model(tmp_path / "gpt2", device="cpu", dtype="float32")
    assert blending.why_not_movable(lm) == "learned"
