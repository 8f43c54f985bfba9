"""What a config implies (state layout, load estimate) and what a request costs (budget), against the
real modules and real runs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import playground
from playground.checkpoints.expected import state_layout
from playground.checkpoints.families.transformer import transformer_config
from playground.checkpoints.limits import Limits, estimate_load
from playground.config import ModelConfig
from playground.generation.budget import BudgetError, Request, check_full_attention, estimate_request, peak_bytes
from playground.generation.plan import plan
from playground.models import build_model
from tests.hf_tiny import bart_like, gpt2_like, llama_like, marian_like, save_decoder, save_seq2seq, t5_like
from tests.library.test_hostile import _random_checkpoint, _status

ROOT = Path(__file__).resolve().parents[2]
MIB, GIB = 2**20, 2**30

DECODER = dict(family="x", vocab_size=11, d_model=8, n_heads=2, d_ff=12)
LAYOUT_CONFIGS = [
    *(ModelConfig(n_layers=n, **DECODER) for n in (1, 2, 3, 7)),
    ModelConfig(n_layers=4, tie_word_embeddings=False, attention_bias=True, mlp_bias=True, norm="layernorm", **DECODER),
    ModelConfig(n_layers=3, positional="learned", mlp="plain", activation="gelu", **DECODER),
    ModelConfig(n_layers=3, positional="sinusoidal", n_kv_heads=1, sliding_window=4, **DECODER),
    *(transformer_config(13, d_model=8, n_layers=d, n_encoder_layers=e, n_heads=2, d_ff=12) for d, e in
      ((1, 1), (1, 3), (2, 2), (3, 2), (2, 5), (6, 6))),
    transformer_config(13, d_model=8, n_layers=3, n_encoder_layers=4, n_heads=2, d_ff=12, positional="relative",
                       norm_position="pre", norm="rmsnorm", tie_word_embeddings=False),  # T5: bias in layer 0 only
    transformer_config(13, d_model=8, n_layers=2, n_encoder_layers=3, n_heads=2, d_ff=12, positional="learned",
                       learned_position_offset=2, final_logits_bias=True, embedding_norm=True),  # BART
]


@pytest.mark.parametrize("config", LAYOUT_CONFIGS, ids=lambda c: f"{c.kind}-{c.positional}-{c.n_layers}-{c.n_encoder_layers}")
def test_state_layout_is_exactly_the_modules_state_dict(config):
    with torch.device("meta"):
        model = build_model(config)
    state = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    layout = state_layout(config)
    assert layout.shapes() == state
    assert layout.tensor_count == len(state)
    assert layout.numel == sum(p.numel() for p in model.parameters())
    assert layout.layers == config.n_layers + config.n_encoder_layers
    buffers = sum(b.numel() * b.element_size() for name, b in model.named_buffers() if name not in state)
    assert layout.buffer_bytes == buffers


def test_state_layout_of_a_huge_config_is_arithmetic():
    config = ModelConfig(n_layers=1_000_000, **DECODER)
    layout = state_layout(config)  # no million-layer module exists at any point
    assert layout.tensor_count == 2 + 1_000_000 * 6 and layout.layers == 1_000_000
    per_layer = 8 + 8 * 24 + 8 * 8 + 8 + 8 * 24 + 12 * 8  # norms, qkv (3 x 8 out), out, MLP gate_up and down
    assert layout.numel == 11 * 8 + 8 + 1_000_000 * per_layer


def test_load_estimate_counts_position_tables_and_their_construction():
    config = transformer_config(100, d_model=64, n_layers=1, n_encoder_layers=1, n_heads=4, d_ff=64, max_positions=4096)
    estimate = estimate_load(state_layout(config), config, 4, 2048)
    table = 4096 * 64 * 4
    assert estimate.buffers == 2 * table  # the encoder's and the decoder's
    assert estimate.buffer_build == 3 * table  # float64 table, angles and one sin/cos temporary
    assert estimate.cache == 2 * 2 * 1 * 4 * 16 * 2048 * 4  # self + cross K/V of 2,048 tokens
    assert estimate.peak == estimate.resident + max(estimate.buffer_build, estimate.cache)


def test_the_load_peak_estimate_bounds_what_building_the_tables_takes(tmp_path):
    config = transformer_config(100, d_model=256, n_layers=1, n_encoder_layers=1, n_heads=4, d_ff=64,
                                max_positions=131_072)  # two 128 MiB tables
    path = _random_checkpoint(tmp_path / "tables.safetensors", config)
    estimate = estimate_load(state_layout(config), config, 4, 0)
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    lm = playground.load_model(path, tokenizer=False, limits=Limits(8 * GIB, 8 * GIB))
    grown = _status("VmHWM") - before
    assert lm.resident_bytes == estimate.resident
    assert 0.8 * estimate.peak < grown <= estimate.peak + 32 * MIB, (grown / MIB, estimate.peak / MIB)


def test_the_kv_cache_term_is_exactly_what_the_run_allocates():
    lm = playground.load_model(ROOT / "weights" / "tiny-lm")
    c = lm.config
    prompt = list(range(5, 25))
    for beams in (1, 3):
        cfg = playground.GenerationConfig(max_new_tokens=4, num_beams=beams, top_candidates=0)
        result = playground.generate_all(lm, prompt, cfg)
        parts = estimate_request(c, 4, Request.of(cfg, len(prompt), len(prompt)))
        allocated = result.cache["allocated_bytes"]
        assert allocated == 2 * c.n_layers * beams * c.n_kv_heads * (len(prompt) + 4) * c.head_dim * 4
        prefill_copy = 2 * c.n_layers * c.n_kv_heads * len(prompt) * c.head_dim * 4 if beams > 1 else 0
        assert parts["kv_cache"] == allocated + prefill_copy


def test_seq2seq_cross_cache_term_matches_the_cache_stats():
    lm = playground.load_model(ROOT / "weights" / "tiny-seq2seq")
    c = lm.config
    source = lm.tokenize("March 5, 2021")
    cfg = playground.GenerationConfig(max_new_tokens=3, num_beams=2, top_candidates=0)
    result = playground.generate_all(lm, source, cfg)
    parts = estimate_request(c, 4, Request.of(cfg, len(source), 1))
    cross = result.cache["cross_attention"]["bytes"]
    assert parts["cross_cache"] == cross + len(source) * c.d_model * 4  # + the encoder output it is projected from


_PEAK_OF_ONE_RUN = """
import sys
import playground
from playground.checkpoints.limits import Limits
from tests.library.test_hostile import _status
lm = playground.load_model(sys.argv[1], limits=Limits(2**30, 8 * 2**30))
cfg = playground.GenerationConfig(max_new_tokens=4, num_beams=2, top_candidates=3)
playground.generate_all(lm, [1 + i % 400 for i in range(50)], cfg)  # warm: first-call allocations are not the run's
before = _status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
playground.generate_all(lm, [1 + i % 400 for i in range(3000)], cfg)
print(_status("VmHWM") - before)
"""


def test_the_request_estimate_bounds_a_real_runs_peak(tmp_path):
    # Measured in a fresh process: a long-lived one reuses heap freed by earlier tests, and its RSS
    # growth then under-reports what the run takes.
    config = ModelConfig(family="llama", vocab_size=500, d_model=64, n_layers=6, n_heads=8, head_dim=32, d_ff=128,
                         max_positions=8192)
    path = _random_checkpoint(tmp_path / "m.safetensors", config)
    out = subprocess.run([sys.executable, "-c", _PEAK_OF_ONE_RUN, str(path)], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    grown = int(out.stdout.split()[-1])
    cfg = playground.GenerationConfig(max_new_tokens=4, num_beams=2, top_candidates=3)
    estimate, _ = peak_bytes(estimate_request(config, 4, Request.of(cfg, 3000, 3000)))
    assert grown <= estimate, (grown / MIB, estimate / MIB)
    assert estimate < 3 * max(grown, 32 * MIB), (grown / MIB, estimate / MIB)  # an upper bound, not a wild one


def test_each_knob_is_named_by_the_part_that_does_not_fit(tmp_path):
    config = ModelConfig(family="llama", vocab_size=500, d_model=64, n_layers=6, n_heads=8, head_dim=32, d_ff=128,
                         max_positions=65_536)
    path = _random_checkpoint(tmp_path / "m.safetensors", config)
    lm = playground.load_model(path, limits=Limits(GIB, 512 * MIB))
    prompt = [1] * 4000
    base = playground.GenerationConfig(max_new_tokens=8)
    plan(lm, prompt, base)  # fits: about 200 MiB
    cases = {
        "turn attention capture off or use a shorter prompt": base.replace(capture_attention=True),
        "turn prompt attention capture off": base.replace(capture_prompt_attention=True),
        "use fewer beams, a shorter prompt or fewer new tokens": base.replace(num_beams=8, max_new_tokens=4000),
        "use a shorter prompt or fewer new tokens": base.replace(max_new_tokens=40_000),
    }
    for knob, cfg in cases.items():
        with pytest.raises(BudgetError) as caught:
            playground.generate_all(lm, prompt, cfg)
        assert knob in str(caught.value) and "the budget is 512.0 MiB" in str(caught.value)
    with pytest.raises(BudgetError, match="turn attention capture off"):
        check_full_attention(lm, 1200, 8)  # 6 layers x 8 heads x 1,208² maps, in float32 twice: 560 MiB
    check_full_attention(lm, 1200, 8, layers=[2])  # one layer's maps fit
    tiny = dataclasses.replace(lm, limits=Limits(GIB, lm.resident_bytes // 2))
    with pytest.raises(BudgetError, match="the model alone takes"):
        plan(tiny, [1, 2], base)


FAMILY_CHECKPOINTS = {
    "gpt2": lambda d: save_decoder(d, "gpt2", gpt2_like()),
    "llama": lambda d: save_decoder(d, "llama", llama_like(num_key_value_heads=2, tie_word_embeddings=False)),
    "mistral": lambda d: save_decoder(d, "mistral", llama_like(sliding_window=8)),
    "qwen2": lambda d: save_decoder(d, "qwen2", llama_like()),
    "t5": lambda d: save_seq2seq(d, "t5", t5_like(num_layers=3, num_decoder_layers=2), untied_head=True),
    "bart": lambda d: save_seq2seq(d, "bart", bart_like(encoder_layers=3, decoder_layers=2)),
    "marian": lambda d: save_seq2seq(d, "marian", marian_like()),
}


@pytest.mark.parametrize("family", list(FAMILY_CHECKPOINTS))
def test_every_family_loads_through_its_arithmetic_layout(family, tmp_path, caplog):
    FAMILY_CHECKPOINTS[family](tmp_path)
    with caplog.at_level("WARNING", logger="playground.checkpoints"):
        lm = playground.load_model(tmp_path, tokenizer=False)
    assert not [r for r in caplog.records if "state layout" in r.getMessage()]  # no fallback to the module
    assert state_layout(lm.config).shapes() == {n: tuple(t.shape) for n, t in lm.model.state_dict().items()}


def test_a_layout_that_misses_part_of_a_model_is_caught_and_the_load_stays_right(tmp_path, caplog, monkeypatch):
    import playground.checkpoints.loader as loader

    save_decoder(tmp_path, "llama", llama_like())
    real = loader.state_layout

    def with_an_extra_entry(config):  # a layout bug: an entry the module does not have
        layout = real(config)
        return dataclasses.replace(layout, fixed={**layout.fixed, "phantom.weight": (3,)})

    monkeypatch.setattr(loader, "state_layout", with_an_extra_entry)
    with caplog.at_level("WARNING", logger="playground.checkpoints"):
        lm = playground.load_model(tmp_path, tokenizer=False)
    assert any("state layout of llama differs from its module (phantom.weight)" in r.getMessage() for r in caplog.records)
    assert lm.logits(torch.tensor([[1, 2, 3]])).shape == (1, 3, 97)


def test_per_layer_list_fields_follow_the_proxys_layer_count():
    from playground.checkpoints.expected import proxy_config

    @dataclasses.dataclass
    class PerLayer:  # the shape of per-layer config fields (layer types, layers without RoPE)
        n_layers: int
        n_encoder_layers: int
        layer_types: list
        nope_layers: list
        eos_token_id: list

    config = PerLayer(6, 0, ["sliding"] * 5 + ["full"], [3, 1, 5], [7, 8, 9, 10, 11, 12])
    proxy = proxy_config(config, 2, 0)
    assert proxy == PerLayer(2, 0, ["sliding", "sliding"], [1], [7, 8, 9, 10, 11, 12])
