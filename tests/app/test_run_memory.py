"""Everything a run allocates is in its estimate and its admission (reliability round 5, rows 4-6): a drafter's
cache and passes, a precision copy, a heavy-hitter policy's attention. One estimate per run (`Plan.memory_request`)
is what the plan checks and what the shared batch admits; each is compared here with what the run really holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import playground
from playground.checkpoints.limits import Limits, human_bytes
from playground.config import ModelConfig
from playground.generation.batch import Scheduler
from playground.generation.budget import BudgetError, Request, estimate_request, peak_bytes
from playground.generation.plan import plan
from tests.library.test_hostile import _random_checkpoint

ROOT = Path(__file__).resolve().parents[2]
MIB, GIB = 2**20, 2**30
VOCAB = 300


def decoder(path: Path, **shape) -> Path:
    config = ModelConfig(family="llama", vocab_size=VOCAB, max_positions=4096, **shape)
    return _random_checkpoint(path, config)


@pytest.fixture(scope="module")
def target_and_wide_drafter(tmp_path_factory):
    """A small target and a drafter of the same vocabulary with wide KV heads (the issue's upload, scaled down)."""
    folder = tmp_path_factory.mktemp("draft")
    target = playground.load_model(decoder(folder / "target.safetensors", d_model=64, n_layers=2, n_heads=4, d_ff=128))
    wide = playground.load_model(decoder(folder / "wide.safetensors", d_model=64, n_layers=4, n_heads=16,
                                         head_dim=64, d_ff=128))
    return target, wide


# --- row 4: a model drafter's cache and passes -----------------------------------------------------------


def test_a_model_drafters_cache_is_counted_by_the_plan_and_the_admission(target_and_wide_drafter):
    """Round 5: two tabs drafting with an upload of wide KV heads over a 2,000-token prompt took +1.8-1.9 GiB
    against a 0.95-1.4 GiB budget, refused by nobody: neither the request check nor the batch's admission
    knew the drafter keeps a cache of its own."""
    target, wide = target_and_wide_drafter
    prompt = [1 + i % (VOCAB - 1) for i in range(2000)]
    cfg = playground.GenerationConfig(max_new_tokens=8, draft=wide, draft_tokens=4)
    p = plan(target, prompt, cfg)
    held = p.draft.drafter(p.max_length + cfg.draft_tokens).cache.stats().allocated_bytes
    assert held == 2 * 4 * 16 * (2008 + 4) * 64 * 4  # 66 MB of the drafter's own K/V
    plain = plan(target, prompt, cfg.replace(draft=None))
    assert Scheduler(target).submit(p).memory >= Scheduler(target).submit(plain).memory + held  # the batch admits both

    parts = estimate_request(target.config, 4, p.memory_request())
    assert parts["draft_cache"] == held  # exactly its own cache
    assert parts["draft_activations"] >= 2000 * 64 * 4  # its first pass reads the whole prompt
    plain_peak = peak_bytes(estimate_request(target.config, 4, plain.memory_request()))[0]

    # A budget the plain run fits in but the drafted one does not: refused before anything is allocated, the
    # drafter's cache named with the knob that helps.
    budget = target.resident_bytes + plain_peak + held // 2
    tight = target.__class__(**{**target.__dict__, "limits": Limits(GIB, budget)})
    plan(tight, prompt, cfg.replace(draft=None))
    with pytest.raises(BudgetError, match="draft cache .*: draft with a smaller model"):
        plan(tight, prompt, cfg)


_PEAK_OF_A_DRAFTED_RUN = """
import sys
import playground
target, wide = (playground.load_model(p) for p in sys.argv[1:3])
cfg = playground.GenerationConfig(max_new_tokens=8, draft=wide, draft_tokens=4)
playground.generate_all(target, [1 + i % 299 for i in range(40)], cfg)  # warm: first-call allocations are not the run's
before = _status = None
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
playground.generate_all(target, [1 + i % 299 for i in range(2000)], cfg)
print(status("VmHWM") - before)
"""


def test_the_estimate_of_a_drafted_run_bounds_its_real_peak(target_and_wide_drafter):
    """Measured in a fresh process (a long-lived one reuses heap freed by earlier tests)."""
    target, wide = target_and_wide_drafter
    out = subprocess.run([sys.executable, "-c", _PEAK_OF_A_DRAFTED_RUN, str(target.path), str(wide.path)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    grown = int(out.stdout.split()[-1])
    cfg = playground.GenerationConfig(max_new_tokens=8, draft=wide, draft_tokens=4)
    p = plan(target, [1 + i % 299 for i in range(2000)], cfg)
    estimate = peak_bytes(estimate_request(target.config, 4, p.memory_request()))[0]
    assert grown <= estimate, (grown / MIB, estimate / MIB)
    assert estimate < 3 * grown, (grown / MIB, estimate / MIB)  # an upper bound, not a wild one


# --- row 6: a heavy-hitter policy's attention ------------------------------------------------------------

_PEAK_OF_A_HEAVY_HITTER_RUN = """
import sys
import playground
lm = playground.load_model(sys.argv[1])
cfg = playground.GenerationConfig(max_new_tokens=4, kv_window=64, kv_heavy=8, top_candidates=0)
playground.generate_all(lm, [1 + i % 299 for i in range(80)], cfg)  # warm: first-call allocations are not the run's
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
playground.generate_all(lm, [1 + i % 299 for i in range(1500)], cfg)
print(status("VmHWM") - before)
"""


def test_a_heavy_hitter_runs_prompt_pass_stays_within_its_estimate(tmp_path):
    """Round 5: kv_window=64&kv_heavy=8 on a 1.3 MB upload of 64 heads over a 2,000-token prompt computed the
    explicit (h, P, P) softmax, which the estimate counted only when attention was recorded: +1.98 GiB against
    0.95 GiB (256 heads: about 8 GiB from a 7 MB file). Scaled down: 16 heads, 1,500 tokens, 430 MiB of scores."""
    path = decoder(tmp_path / "heads.safetensors", d_model=64, n_layers=2, n_heads=16, d_ff=128)
    out = subprocess.run([sys.executable, "-c", _PEAK_OF_A_HEAVY_HITTER_RUN, str(path)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    grown = int(out.stdout.split()[-1])
    cfg = playground.GenerationConfig(max_new_tokens=4, kv_window=64, kv_heavy=8, top_candidates=0)
    parts = estimate_request(playground.load_model(path).config, 4, Request.of(cfg, 1500, 1500))
    scores = 16 * 1500 * 1500 * 4  # one (h, P, P) float32 block: 137 MiB
    assert grown <= peak_bytes(parts)[0] < scores, (grown / MIB, peak_bytes(parts)[0] / MIB)
    assert parts["policy_scratch"] >= 8 * 1500 * 1500  # the prompt pass's masks, and the chunks' scores


def test_chunked_heavy_hitters_keep_the_unchunked_numbers(tmp_path, monkeypatch):
    """Each query's softmax is its own row: in chunks, the same tokens, the same kept positions, probabilities
    within float32 (the weights' sum runs in another order). Grouped-query heads, sinks and a window."""
    from playground.models import kv_policy

    path = decoder(tmp_path / "gqa.safetensors", d_model=64, n_layers=2, n_heads=8, n_kv_heads=2, d_ff=128)
    lm = playground.load_model(path)
    prompt = [1 + (7 * i) % 299 for i in range(400)]
    cfg = playground.GenerationConfig(max_new_tokens=12, kv_window=48, kv_sink=4, kv_heavy=16, top_candidates=5)
    whole = playground.generate_all(lm, prompt, cfg)
    monkeypatch.setattr(kv_policy, "POLICY_SCRATCH_BYTES", 8 * 400 * 4 * 37)  # chunks of 37 queries
    assert kv_policy.policy_chunk(8, 400) == 37
    chunked = playground.generate_all(lm, prompt, cfg)
    assert chunked.token_ids == whole.token_ids
    assert chunked.cache["policy"] == whole.cache["policy"]
    assert [layer.get("positions") for layer in chunked.cache["per_layer"]] == [
        layer.get("positions") for layer in whole.cache["per_layer"]]
    for a, b in zip(chunked.steps, whole.steps, strict=True):
        assert a.prob == pytest.approx(b.prob, abs=1e-5)
        assert [c.token_id for c in a.candidates] == [c.token_id for c in b.candidates]
        assert [c.logit for c in a.candidates] == pytest.approx([c.logit for c in b.candidates], abs=1e-4)


# --- row 5: a precision copy -----------------------------------------------------------------------------


def _storages(model) -> dict[int, int]:
    """Every tensor storage a model holds (parameters, buffers, a tied head's copy, low-precision weights): ptr ->
    bytes."""
    from playground.models.layers import Linear, TiedHead
    from playground.models.low_precision import LowPrecisionHead, LowPrecisionLinear

    held = {}
    tensors = list(model.parameters()) + list(model.buffers())
    for module in model.modules():
        if isinstance(module, LowPrecisionLinear):
            tensors.append(module.matmul.packed if module.matmul.packed is not None else module.matmul.weight)
        if isinstance(module, Linear) and module.packed is not None:
            tensors.append(module.packed)
        for value in vars(module).values():
            if isinstance(value, LowPrecisionHead):
                tensors.append(value.matmul.packed if value.matmul.packed is not None else value.matmul.weight)
            elif isinstance(value, TiedHead):  # its (d, V) copy and a prepacked one, where laid out
                tensors += [t for t in (getattr(value, "weight_t", None), getattr(value, "packed", None)) if t is not None]
    for t in tensors:
        if t.is_mkldnn:  # oneDNN's packed weight: an opaque tensor, no storage to read
            held[id(t)] = t.numel() * t.element_size()
        else:
            held[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return held


def _copy_held(lm, precision: str) -> int:
    """The bytes a built copy holds beyond `lm` after a pass (a tied head makes its copy on the first pass)."""
    import torch

    from playground.variants import variant

    built = variant(lm, precision)
    with torch.inference_mode():
        built.lm.model(torch.tensor([[1, 2, 3]]), None, None)
    base = _storages(lm.model)
    return sum(n for ptr, n in _storages(built.lm.model).items() if ptr not in base)


@pytest.fixture
def llama(tmp_path):
    from playground import variants

    variants.VARIANTS.clear()
    yield playground.load_model(decoder(tmp_path / "m.safetensors", d_model=64, n_layers=2, n_heads=4, d_ff=128))
    variants.VARIANTS.clear()


@pytest.mark.parametrize("precision", ["int8", "int4", "float16", "bfloat16"])
def test_a_precision_copy_is_known_before_it_is_built(llama, precision):
    """`copy_bytes` from the shapes alone, against what the built copy really holds after a pass."""
    from playground.variants import copy_bytes, variant

    expected = copy_bytes(llama, precision)
    own = _copy_held(llama, precision)
    if variant(llama, precision).compute == precision:  # native products: oneDNN's packed layout may pad a little
        assert expected <= own <= 1.1 * expected, (own, expected)
    else:
        assert own == expected


def test_a_precision_copy_that_does_not_fit_is_refused_before_it_is_built(llama):
    """Round 5: forking int8 and int4 of a 545-680 MB upload under a 954 MiB budget built each float32 copy on a
    Gradio worker before the budget check, refused it and kept it (+1.3-1.5 GiB after two refusals), and the
    refusal said "the model alone takes 1.0 GiB"."""
    from playground import variants

    copy = _copy_held(llama, "int8")  # what a built copy holds (copy_bytes says it before building: above)
    variants.VARIANTS.clear()
    cfg = playground.GenerationConfig(max_new_tokens=4, weight_precision="int8")
    run = peak_bytes(estimate_request(llama.config, 4, plan(llama, [1, 2, 3], cfg.replace(weight_precision=None))
                                      .memory_request()))[0]

    def within(budget: int):
        return llama.__class__(**{**llama.__dict__, "limits": Limits(GIB, budget)})

    tight = within(llama.resident_bytes + run + copy // 2)
    plan(tight, [1, 2, 3], cfg.replace(weight_precision=None))  # the model and the run fit
    with pytest.raises(BudgetError) as refused:
        plan(tight, [1, 2, 3], cfg)
    assert not variants.VARIANTS._items  # nothing was built, nothing is kept
    message = str(refused.value)
    assert f"the model {human_bytes(llama.resident_bytes)}, its int8 copy {human_bytes(copy)}" in message, message
    small = within(llama.resident_bytes + copy // 2)
    with pytest.raises(BudgetError, match=f"the model \\({human_bytes(llama.resident_bytes)}\\) and its int8 copy"):
        plan(small, [1, 2, 3], cfg)
    assert not variants.VARIANTS._items
    # Room for the model and one copy: a second precision takes the first one's place.
    roomy = within(llama.resident_bytes + run + copy + copy // 2)
    plan(roomy, [1, 2, 3], cfg)
    assert [k[1] for k in variants.VARIANTS._items] == ["int8"]
    plan(roomy, [1, 2, 3], cfg.replace(weight_precision="int4"))
    assert [k[1] for k in variants.VARIANTS._items] == ["int4"]  # evicted under the budget (the count allows 2)


def test_the_app_builds_a_precision_copy_on_the_torch_thread_as_a_job(lm, monkeypatch):
    """The page's run never builds a copy on its Gradio worker: each matrix is one slice of a job of the shared
    server, on the torch thread, between the batch's steps."""
    import threading

    from playground import variants
    from playground.app import play as play_module
    from playground.app.session import Session
    from playground.app.settings import UISettings

    variants.VARIANTS.clear()
    threads = []
    original = variants.rounded_copy

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(variants, "rounded_copy", recorded)
    settings = UISettings(model="tiny-lm", prompt="ab", max_new_tokens=3, weight_precision="int8")
    frames = list(play_module.play(Session(key="tab"), lambda name, dtype, owner: lm, settings))
    assert frames[-1].run is not None and frames[-1].run.finish_reason in ("length", "eos"), frames[-1].error
    assert threads and all(name.startswith("playground-torch") for name in threads), threads
    variants.VARIANTS.clear()
