"""Everything a run allocates is in its estimate and its admission (reliability round 5, rows 4-6): a drafter's
cache and passes, a precision copy, a heavy-hitter policy's attention. One estimate per run (`Plan.memory_request`)
is what the plan checks and what the shared batch admits; each is compared here with what the run really holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import playground
from playground.checkpoints.limits import Limits
from playground.config import ModelConfig
from playground.generation.batch import Scheduler
from playground.generation.budget import BudgetError, estimate_request, peak_bytes
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
