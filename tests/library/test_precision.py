"""Weight precision what-ifs (`weight_precision`): every family runs each precision, the quantised weights
stay within their stated bounds, "float32" is the plain run bitwise, and the loaded model never changes.

The checkpoints are tiny random models saved by transformers (real safetensors), as in test_batch_families.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import transformers

import playground
from playground import variants
from playground.app.serving import Server
from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import Scheduler, run_alone
from playground.generation.config import SettingsError
from playground.generation.plan import plan
from playground.models import low_precision
from playground.models.low_precision import LowPrecisionLinear
from playground.models.quantize import (
    INT4_GROUP,
    PRECISIONS,
    error_bound,
    int4_groupwise,
    int8_per_channel,
    matrices,
    out_in,
    rounded,
)
from playground.variants import variant
from tests.hf_tiny import save_decoder, save_seq2seq, save_small_llama
from tests.library.test_batch import _assert_equal_runs
from tests.library.test_batch_families import DECODERS, SEQ2SEQ

transformers.logging.set_verbosity_error()


def _held(module, transposed: bool) -> torch.Tensor:
    return out_in(module, transposed).float()


def _check_bounds(original, changed, precision: str) -> None:
    """Every matrix the precision changes is within its stated bound of the original, and it did change."""
    before, after = matrices(original), matrices(changed)
    assert before.keys() == after.keys() and before
    moved = False
    for name, (module, transposed) in before.items():
        w = _held(module, transposed)
        v = _held(*after[name])
        bound = error_bound(w, precision, module.weight.dtype)
        err = (v - w).abs()
        assert bool((err <= bound * (1 + 1e-6) + 1e-12).all()), (name, precision, float((err - bound).max()))
        moved = moved or bool((err > 0).any())
    assert moved, f"{precision}: no weight changed"


def _state(lm) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in lm.model.state_dict().items()}


def _prompt(lm) -> list[int]:
    top = lm.config.vocab_size - 4
    ids = [(7 * i) % top + 3 for i in range(7)]
    if lm.kind == "seq2seq":
        ids[-1] = lm.config.eos_token_id if isinstance(lm.config.eos_token_id, int) else 1
    return ids


def _family(tmp_path_factory, name: str):
    cases, save = (DECODERS, save_decoder) if name in DECODERS else (SEQ2SEQ, save_seq2seq)
    family, kwargs = cases[name]
    directory = tmp_path_factory.mktemp(name)
    save(directory, family, kwargs, init_std=0.1)
    return playground.load_model(directory)


@pytest.mark.parametrize("name", sorted(DECODERS) + sorted(SEQ2SEQ))
def test_every_family_runs_each_precision_within_its_bounds(tmp_path_factory, one_thread, name):
    lm = _family(tmp_path_factory, name)
    before = _state(lm)
    lang = {"forced_bos_token_id": 57} if lm.config.family in ("mbart", "m2m_100") else {}
    cfg = GenerationConfig(max_new_tokens=5, capture_residual=True, **lang)
    plain = generate_all(lm, _prompt(lm), cfg)
    for precision in PRECISIONS:
        run = generate_all(lm, _prompt(lm), cfg.replace(weight_precision=precision))
        assert run.steps and len(run.token_ids) >= 1 and run.precision["precision"] == precision
        if precision == "float32":  # the model as loaded: bitwise the plain run, captures included
            assert run.token_ids == plain.token_ids
            assert [e.prob for e in run.steps] == [e.prob for e in plain.steps]
            assert all(np.array_equal(a.residual, b.residual) for a, b in zip(run.steps, plain.steps))
            assert variant(lm, "float32").lm is lm
            continue
        assert [e.prob for e in run.steps] != [e.prob for e in plain.steps]  # the weights really changed
        _check_bounds(lm.model, variant(lm, precision).lm.model, precision)
    after = lm.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the loaded model never changed


def test_quantisers_hold_their_stated_bounds_and_levels():
    torch.manual_seed(0)
    w = torch.randn(40, 100) * torch.linspace(0.01, 3.0, 40)[:, None]  # channels of very different ranges
    w[3] = 0.0  # an all-zero channel quantises to zeros
    q, scale = int8_per_channel(w)
    assert q.dtype == torch.int8 and scale.shape == (40, 1) and int(q.abs().max()) == 127
    assert torch.allclose(scale[:, 0], w.abs().amax(dim=1) / 127)
    err = (rounded(w, "int8") - w).abs()
    assert bool((err <= scale / 2 * (1 + 1e-6)).all()) and float((err / (scale / 2 + 1e-30)).max()) > 0.9
    assert bool((rounded(w, "int8")[3] == 0).all())
    q4, s4 = int4_groupwise(w)
    assert s4.shape == (40, -(-100 // INT4_GROUP))  # 100 inputs: 3 groups of 32 and one of 4
    assert int(q4.max()) == 7 and int(q4.min()) == -7  # 15 symmetric levels
    assert torch.allclose(s4[:, 0], w[:, :32].abs().amax(dim=1) / 7) and torch.allclose(s4[:, 3], w[:, 96:].abs().amax(dim=1) / 7)
    err4 = (rounded(w, "int4") - w).abs()
    bound4 = error_bound(w, "int4")
    assert bool((err4 <= bound4 * (1 + 1e-6)).all()) and float((err4 / (bound4 + 1e-30)).max()) > 0.9
    for precision, rel in (("bfloat16", 2.0**-8), ("float16", 2.0**-11)):
        big = w[w.abs() > 2.0**-14]
        assert float(((rounded(big, precision) - big).abs() / big.abs()).max()) <= rel
    with pytest.raises(ValueError, match="use one of"):
        rounded(w, "int3")


def test_settings_refuse_other_precisions_in_one_line_and_links_keep_the_string():
    for bad in ("fp8", "INT4", 8, "float64"):
        with pytest.raises(SettingsError) as info:
            GenerationConfig(weight_precision=bad).validate()
        assert "\n" not in str(info.value) and "weight_precision" in str(info.value) and "int4" in str(info.value)
    cfg = GenerationConfig(weight_precision="int4", max_new_tokens=3)
    data = cfg.to_dict()
    assert data["weight_precision"] == "int4" and GenerationConfig(**data).validate().weight_precision == "int4"
    assert GenerationConfig().to_dict()["weight_precision"] is None


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_small_llama(directory)
    return playground.load_model(directory)


def test_variants_are_built_once_and_kept_in_a_small_lru(llama):
    variants.VARIANTS.clear()
    a = variant(llama, "int8")
    assert variant(llama, "int8") is a and a.lm.model is not llama.model
    variant(llama, "int4")
    variant(llama, "float16")  # a third precision evicts the least recently used (int8)
    assert variant(llama, "int8") is not a
    shared = {id(p) for p in llama.model.parameters()}
    mine = [p for p in a.lm.model.parameters() if id(p) not in shared]
    assert {id(p) for p in mine} == {id(m.weight) for m, _ in matrices(a.lm.model).values()}  # only the changed
    assert a.added_bytes == sum(p.numel() * p.element_size() for p in mine)


def test_native_bf16_products_where_this_cpu_has_them(llama):
    if not low_precision.native("bfloat16", torch.device("cpu")):
        pytest.skip("no oneDNN bf16 kernels on this CPU: bfloat16 is simulated")
    real, simulated = variant(llama, "bfloat16"), variant(llama, "bfloat16", real=False)
    assert not real.simulated and real.compute == "bfloat16" and simulated.simulated
    layer = real.lm.model.blocks[0].mlp.gate_up
    assert isinstance(layer, LowPrecisionLinear) and layer.weight.dtype == torch.bfloat16
    x = torch.randn(3, 64)
    with torch.inference_mode():
        expected = x.bfloat16().float() @ layer.weight.float()  # bf16 inputs and weights, float32 sums
        assert torch.allclose(layer(x), expected, rtol=1e-2, atol=1e-3)  # the output is rounded to bf16
    cfg = GenerationConfig(max_new_tokens=6)
    runs = [generate_all(llama, [5, 9, 23], cfg.replace(weight_precision="bfloat16")), generate_all(real.lm, [5, 9, 23], cfg)]
    assert runs[0].token_ids == runs[1].token_ids and runs[0].precision["simulated"] is False


def test_precision_requests_get_their_own_passes_in_the_shared_batch(llama, one_thread):
    """A plain request, two int4 requests and a bf16 one in one scheduler: each model's requests share a
    pass, no pass mixes models, and each request is bitwise its own run alone."""
    ids = [[5, 9, 23, 40], [7, 3, 11], [8, 8, 30, 2], [9, 14, 2]]
    precisions = [None, "int4", "int4", "bfloat16"]
    plans = [plan(llama, i, GenerationConfig(max_new_tokens=6, weight_precision=p, capture_residual=True))
             for i, p in zip(ids, precisions)]
    assert plans[1].lm.model is plans[2].lm.model is not llama.model
    alone = [run_alone(p, invariant=True) for p in plans]
    scheduler = Scheduler(llama, max_prefills=4, invariant_alone=True)
    tickets = [scheduler.submit(p) for p in plans]
    rows: dict[str, list[int]] = {"plain": [], "int4": [], "bfloat16": []}
    hooks = [m.blocks[0].register_forward_hook(lambda mod, args, out, k=k: rows[k].append(out.shape[0]))
             for k, m in (("plain", llama.model), ("int4", plans[1].lm.model), ("bfloat16", plans[3].lm.model))]
    try:
        while scheduler.busy():
            scheduler.step()
    finally:
        for h in hooks:
            h.remove()
    # token rows of each pass through each model: the prompts, then one row per request and step
    assert rows == {"plain": [4] + [1] * 5, "int4": [3 + 4] + [2] * 5, "bfloat16": [3] + [1] * 5}
    for ticket, solo, p, i in zip(tickets, alone, plans, ids):
        got = ticket.drain()
        _assert_equal_runs(got, solo)
        assert got[-1].token_ids == generate_all(llama, i, p.cfg).token_ids


def test_served_precision_request_runs_on_its_variant(llama, one_thread):
    plans = [plan(llama, [5, 9, 23], GenerationConfig(max_new_tokens=6)),
             plan(llama, [5, 9, 23], GenerationConfig(max_new_tokens=6, weight_precision="int4"))]
    alone = [[e.prob for e in run_alone(p)] for p in plans]
    server = Server(call=lambda fn: fn())
    got: dict[int, list[float]] = {}

    def visit(i: int) -> None:
        got[i] = [e.prob for e in server.events(plans[i], threading.Event())]

    threads = [threading.Thread(target=visit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert np.allclose(got[0], alone[0], rtol=0, atol=1e-5) and np.allclose(got[1], alone[1], rtol=0, atol=1e-5)
    assert got[0] != got[1]  # the int4 request did not run on the plain model


def test_sampling_and_beams_run_on_the_variant(llama, one_thread):
    """Sampled (same seed) and beam runs: "float32" is the plain run bitwise; "int8" is the int8 model's own run."""
    for cfg in (GenerationConfig(max_new_tokens=6, temperature=0.9, top_k=20, seed=3),
                GenerationConfig(max_new_tokens=5, num_beams=3)):
        plain = generate_all(llama, [5, 9, 23], cfg)
        exact = generate_all(llama, [5, 9, 23], cfg.replace(weight_precision="float32"))
        assert exact.token_ids == plain.token_ids and [e.prob for e in exact.steps] == [e.prob for e in plain.steps]
        assert [s.score for s in exact.sequences] == [s.score for s in plain.sequences]
        int8 = generate_all(llama, [5, 9, 23], cfg.replace(weight_precision="int8"))
        own = generate_all(variant(llama, "int8").lm, [5, 9, 23], cfg)
        assert int8.token_ids == own.token_ids and [e.prob for e in int8.steps] == [e.prob for e in own.steps]
        assert [e.prob for e in int8.steps] != [e.prob for e in plain.steps]


def test_a_bfloat16_model_runs_each_precision(tmp_path, one_thread):
    save_small_llama(tmp_path)
    lm = playground.load_model(tmp_path, dtype="bfloat16")
    plain = generate_all(lm, [5, 9, 23], GenerationConfig(max_new_tokens=4))
    for precision in PRECISIONS:
        run = generate_all(lm, [5, 9, 23], GenerationConfig(max_new_tokens=4, weight_precision=precision))
        assert len(run.token_ids) == 4
        if precision == "bfloat16":  # the model's own dtype: the model as loaded
            assert [e.prob for e in run.steps] == [e.prob for e in plain.steps]
    upcast = variant(lm, "float32")
    assert upcast.lm.dtype == torch.float32 and next(upcast.lm.model.parameters()).dtype == torch.float32
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    _check_bounds(lm.model, variant(lm, "int4").lm.model, "int4")


def test_options_say_what_each_precision_would_be_without_building_it(llama):
    variants.VARIANTS.clear()
    listed = variants.options(llama)
    assert [o["precision"] for o in listed] == list(PRECISIONS) and not variants.VARIANTS._items
    for o in listed:
        built = variant(llama, o["precision"])
        assert o["simulated"] == built.simulated and o["description"] == built.to_dict()["description"]
        assert o["weight_bytes_per_token"] == built.weight_bytes
    assert "simulated" in listed[4]["description"] and "groups of 32" in listed[4]["description"]
