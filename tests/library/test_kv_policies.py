"""KV-cache policies of a run (kv_window, kv_sink, kv_heavy, kv_dtype) on real tiny safetensors checkpoints.

- Settings off are today's run; a window at least as long as the run is the plain run, bitwise, on every
  decoder family (and beside others in the served batch).
- A shorter window drops positions: the bytes held follow the kept positions, and the tokens and
  probabilities equal transformers' full-sequence pass with an explicit mask that lets each query see
  only the kept positions at their true positions (RoPE and learned absolute positions alike).
- Heavy hitters keep the positions with the largest attention accumulated from the recorded weights.
- int8 / int4 caches read back K and V within half a quantisation step of what was written.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import playground
from playground.analysis import kv_policies
from playground.generation import GenerationConfig, generate, generate_all
from playground.generation.batch import Scheduler
from playground.generation.config import SettingsError
from playground.generation.engine import _new_stepper
from playground.generation.plan import plan
from playground.models.kv_cache import KVCache
from playground.models.kv_policy import PolicyCache
from playground.models.kv_quant import GROUP, QMAX, dequantize, quantize
from tests.hf_tiny import gpt2_like, llama_like, save_decoder
from tests.library.test_decoder_families import CASES

FAMILIES = dict(CASES) | {
    "gpt2": ("gpt2", gpt2_like()),
    "llama-gqa": ("llama", llama_like(num_key_value_heads=2)),
    "mistral-sliding": ("mistral", llama_like(sliding_window=5, num_key_value_heads=2)),
    "qwen2": ("qwen2", llama_like(num_key_value_heads=2)),
}
PROMPT = [5, 9, 23, 40, 7, 11, 13, 17, 19, 3]


def _load(tmp_path_factory, name: str):
    family, kwargs = FAMILIES[name]
    directory = tmp_path_factory.mktemp(name)
    reference = save_decoder(directory, family, kwargs, init_std=0.1)
    return reference, playground.load_model(directory)


def _same_run(a, b) -> None:
    assert a.token_ids == b.token_ids
    assert [e.prob for e in a.steps] == [e.prob for e in b.steps]  # bitwise
    assert [[(c.token_id, c.logit) for c in e.candidates] for e in a.steps] == [[(c.token_id, c.logit) for c in e.candidates] for e in b.steps]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return _load(tmp_path_factory, "llama-gqa")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_window_as_long_as_the_run_is_the_plain_run(name, tmp_path_factory, one_thread):
    _, lm = _load(tmp_path_factory, name)
    n = 14
    run_length = len(PROMPT) + n
    for base in (GenerationConfig(max_new_tokens=n), GenerationConfig(max_new_tokens=n, temperature=0.9, seed=3),
                 GenerationConfig(max_new_tokens=6, num_beams=3)):
        plain = generate_all(lm, PROMPT, base)
        for kv in (dict(kv_window=run_length), dict(kv_window=run_length + 50, kv_sink=4, kv_heavy=2)):
            run = generate_all(lm, PROMPT, base.replace(**kv))
            _same_run(run, plain)
            assert run.cache["bytes"] == plain.cache["bytes"]
            assert run.cache["policy"]["window"] == kv["kv_window"]


def test_settings_off_are_the_plain_run(llama, one_thread):
    _, lm = llama
    cfg = GenerationConfig(max_new_tokens=8)
    assert plan(lm, PROMPT, cfg).policy is None
    stepper = _new_stepper(plan(lm, PROMPT, cfg), 1)
    stepper.start(torch.tensor(PROMPT), torch.tensor(PROMPT))
    assert type(stepper.cache) is KVCache
    run = generate_all(lm, PROMPT, cfg)
    assert "policy" not in run.cache
    # the same run through the stepper's own loop, by hand: greedy over lm.logits
    ids = list(PROMPT)
    for _ in range(8):
        ids.append(int(lm.logits(torch.tensor([ids]))[0, -1].argmax()))
    assert run.token_ids == ids[len(PROMPT):]
    data = cfg.to_dict()
    assert {k: data[k] for k in ("kv_window", "kv_sink", "kv_heavy", "kv_dtype", "rope_scaling")} == {
        "kv_window": None, "kv_sink": 0, "kv_heavy": 0, "kv_dtype": None, "rope_scaling": None}
    linked = GenerationConfig(kv_window=64, kv_sink=4, kv_heavy=8, rope_scaling={"type": "ntk", "factor": 2.0})
    again = GenerationConfig(**{k: v for k, v in linked.to_dict().items() if k != "interventions"}).validate()
    assert again.to_dict() == linked.to_dict()


def _masked_reference(reference, ids: list[int], visible) -> torch.Tensor:
    T = len(ids)
    q, k = torch.arange(T)[:, None], torch.arange(T)[None]
    mask = torch.zeros(T, T).masked_fill(~visible(q, k), torch.finfo(torch.float32).min)[None, None]
    with torch.no_grad():
        return reference(torch.tensor([ids]), attention_mask=mask).logits[0].float()


@pytest.mark.parametrize("name, window, sink, kept", [
    ("llama-gqa", 4, 2, 6),  # RoPE, GQA: sink + window
    ("llama-gqa", 5, 0, 5),  # window alone
    ("gpt2", 4, 3, 7),  # learned absolute positions keep their true rows
    ("qwen3-gqa3-head10", 6, 1, 7),
    ("mistral-sliding", 3, 2, 3),  # its own window is 5: the policy's 3 replaces it, sinks apply to full layers only
])
def test_eviction_matches_a_masked_full_pass(name, window, sink, kept, tmp_path_factory, one_thread):
    reference, lm = _load(tmp_path_factory, name)
    n = 16
    run = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=n, kv_window=window, kv_sink=sink))
    full_layers = name != "mistral-sliding"
    S = sink if full_layers else 0
    logits = _masked_reference(reference, PROMPT + run.token_ids, lambda q, k: (k <= q) & ((k > q - window) | (k < S)))
    steps = logits[len(PROMPT) - 1 : -1]
    assert steps.argmax(-1).tolist() == run.token_ids
    probs = F.softmax(steps, -1).gather(1, torch.tensor(run.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(probs, torch.tensor([e.prob for e in run.steps]), atol=2e-5, rtol=0)
    c = lm.config
    per_position = 2 * c.n_kv_heads * c.head_dim * 4  # float32, one row
    for e in run.steps:
        held = min(e.cache["tokens"], kept)
        assert e.cache["bytes"] == c.n_layers * per_position * held
        assert e.cache["kept_positions"] == held
        assert e.cache["tokens"] == len(PROMPT) + e.step
    last = run.steps[-1].cache
    assert last["saved_bytes"] == last["plain_bytes"] - last["bytes"] > 0
    if full_layers:
        total = len(PROMPT) + len(run.token_ids) - 1
        assert last["per_layer"][0]["positions"] == list(range(sink)) + list(range(total - window, total))


def test_eviction_in_beam_search_keeps_each_beams_positions(llama, one_thread):
    _, lm = llama
    run = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=10, num_beams=3, kv_window=4, kv_sink=2))
    c = lm.config
    assert run.cache["bytes"] == 3 * c.n_layers * 2 * c.n_kv_heads * c.head_dim * 4 * 6
    assert len(run.token_ids) == 10


def test_heavy_hitters_are_the_most_attended_positions(llama, one_thread):
    _, lm = llama
    W, S, H = 4, 1, 3
    cfg = GenerationConfig(max_new_tokens=14, kv_window=W, kv_sink=S, kv_heavy=H, capture_attention=True,
                           capture_prompt_attention=True)
    events = list(generate(lm, PROMPT, cfg))
    c = lm.config
    end = len(PROMPT) + len(events) - 1  # positions written: the last token is chosen, not yet fed
    for layer in range(c.n_layers):
        total = torch.zeros(end)
        prompt_map = torch.tensor(events[0].prompt_attention["self"][layer])  # (h, P, P)
        total[: prompt_map.shape[-1]] += prompt_map.sum(dim=(0, 1))
        for e in events[1:]:
            row = torch.tensor(e.attention["self"][layer])  # (h, S) over absolute positions
            total[: row.shape[-1]] += row.sum(0)
        candidates = [p for p in range(S, end - W)]
        heavy = sorted(sorted(candidates, key=lambda p: -float(total[p]))[:H])
        kept = events[-1].cache["per_layer"][layer]["positions"]
        assert kept == list(range(S)) + heavy + list(range(end - W, end))
    assert events[-1].cache["bytes"] == c.n_layers * 2 * c.n_kv_heads * c.head_dim * 4 * (S + W + H)
    plain = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=14, kv_window=W, kv_sink=S))
    assert plain.cache["kept_positions"] == S + W


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_quantised_cache_reads_back_within_half_a_step(bits, llama, one_thread):
    _, lm = llama
    n = 60  # 70 positions: two full K groups of 32 and a float remainder
    cfg = GenerationConfig(max_new_tokens=n, kv_dtype=bits)
    p = plan(lm, PROMPT, cfg)
    run = generate_all(lm, PROMPT, cfg)
    assert run.cache["policy"]["dtype"] == bits
    # the cache after feeding the same tokens, and the exact keys and values of layer 0 (they depend on tokens only)
    stepper = _new_stepper(p, 1)
    with torch.inference_mode():
        stepper.start(torch.tensor(PROMPT), torch.tensor(PROMPT))
        for t in run.token_ids[:-1]:
            stepper.step(torch.tensor([t]))
    cache = stepper.cache
    assert isinstance(cache, PolicyCache)
    exact = lm.model.new_cache(1, p.max_length)
    with torch.inference_mode():
        lm.model(torch.tensor([PROMPT + run.token_ids[:-1]]), exact)
    store = cache._quant[0]
    k_read, v_read = store.read()
    T = k_read.shape[2]
    k, v = exact.keys[0][:, :, :T], exact.values[0][:, :, :T]
    full = T // GROUP * GROUP
    k_groups = k[:, :, :full].reshape(1, k.shape[1], -1, GROUP, k.shape[3])
    k_step = (k_groups.abs().amax(dim=3, keepdim=True) / QMAX[bits]).expand_as(k_groups).reshape(k[:, :, :full].shape)
    assert ((k_read[:, :, :full] - k[:, :, :full]).abs() <= k_step / 2 + 1e-5).all()
    # the unfinished group stays float (one-token projections against the whole sequence's: float32 rounding)
    torch.testing.assert_close(k_read[:, :, full:], k[:, :, full:], atol=1e-5, rtol=0)
    v_step = v.abs().amax(dim=-1, keepdim=True) / QMAX[bits]
    assert ((v_read - v).abs() <= v_step / 2 + 1e-5).all()
    assert not torch.equal(v_read, v)
    # bytes: codes (int4: two per byte), one scale per K group and channel, one per V position, the float remainder
    c = lm.config
    h, d, code = c.n_kv_heads, c.head_dim, (c.head_dim + 1) // 2 if bits == "int4" else c.head_dim
    expected = h * (full * code + full // GROUP * d * 4 + (T - full) * d * 4 + T * code + T * 4)
    assert cache.layer_bytes(0) == expected
    assert run.cache["bytes"] == c.n_layers * expected < run.cache["plain_bytes"]


def test_quantise_round_trip_bound_with_an_odd_head():
    x = torch.randn(2, 3, 7, 9) * torch.linspace(0.1, 5, 9)
    for bits in ("int8", "int4"):
        codes, scale = quantize(x, -1, bits)
        back = dequantize(codes, scale, bits, 9, x.dtype)
        assert ((back - x).abs() <= scale / 2 + 1e-6).all()
        assert codes.shape[-1] == (5 if bits == "int4" else 9)


@pytest.mark.parametrize("settings, knob", [
    (dict(kv_window=0), "kv_window"),
    (dict(kv_window=2.5), "kv_window"),
    (dict(kv_sink=4), "kv_window"),
    (dict(kv_window=8, kv_heavy=-1), "kv_heavy"),
    (dict(kv_dtype="int2"), "kv_dtype"),
    (dict(kv_dtype="int8", kv_window=8), "kv_dtype"),
    (dict(kv_window=8, use_cache=False), "use_cache"),
])
def test_bad_settings_say_which_knob(settings, knob):
    with pytest.raises(SettingsError) as error:
        GenerationConfig(**settings).validate()
    message = str(error.value)
    assert knob in message and "\n" not in message


def test_seq2seq_refuses_kv_policies():
    lm = playground.load_model(playground.__path__[0] + "/../weights/tiny-seq2seq/model.safetensors")
    for settings in (dict(kv_window=8), dict(kv_dtype="int8")):
        with pytest.raises(SettingsError, match="decoder-only"):
            generate_all(lm, "March 5, 2021", GenerationConfig(max_new_tokens=4, **settings))


def test_served_runs_match_generate_all(llama, one_thread):
    """Policy runs take their own turn in the shared batch, beside plain ones: the same tokens as alone."""
    _, lm = llama
    configs = [GenerationConfig(max_new_tokens=12, kv_window=4, kv_sink=2),
               GenerationConfig(max_new_tokens=12),
               GenerationConfig(max_new_tokens=12, kv_window=5, kv_sink=1, kv_heavy=2),
               GenerationConfig(max_new_tokens=12, kv_dtype="int4", temperature=0.8, seed=5),
               GenerationConfig(max_new_tokens=6, kv_window=4, num_beams=2)]
    scheduler = Scheduler(lm, max_rows=16, per_owner=8, max_prefills=8)
    tickets = [scheduler.submit(plan(lm, PROMPT, cfg)) for cfg in configs]
    while scheduler.busy():
        scheduler.step()
    for cfg, ticket in zip(configs, tickets):
        served = ticket.drain()
        alone = generate_all(lm, PROMPT, cfg)
        assert served[-1].token_ids == alone.token_ids
        assert served[-1].cache["bytes"] == alone.cache["bytes"]
        torch.testing.assert_close(torch.tensor([e.prob for e in served]), torch.tensor([e.prob for e in alone.steps]),
                                   atol=1e-5, rtol=0)


def test_analysis_sink_mass_bytes_and_divergence(llama, one_thread):
    _, lm = llama
    mass = kv_policies.sink_mass(lm, PROMPT, GenerationConfig(max_new_tokens=5))
    assert mass.shape == (lm.config.n_layers, lm.config.n_heads)
    assert ((mass > 0) & (mass < 1)).all()
    # by hand: over one step, the weight the prompt's last query puts on position 0, recomputed from q and k
    one = kv_policies.sink_mass(lm, PROMPT, GenerationConfig(max_new_tokens=1))
    first = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=1, capture_attention=True))
    by_hand = [first.attention["self"][layer][:, len(PROMPT) - 1, 0] for layer in range(lm.config.n_layers)]
    torch.testing.assert_close(torch.tensor(one), torch.tensor(np.array(by_hand)), atol=1e-6, rtol=0)
    cfg = GenerationConfig(max_new_tokens=16, kv_window=4, kv_sink=1)
    div = kv_policies.policy_divergence(lm, PROMPT, cfg)
    policy_run, plain_run = generate_all(lm, PROMPT, cfg), generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=16))
    diff = next((i for i, (a, b) in enumerate(zip(plain_run.token_ids, policy_run.token_ids)) if a != b), None)
    assert div.first_difference == diff
    assert div.kl[0] > 0  # the prompt (10 tokens) is already longer than sink + window
    same = kv_policies.policy_divergence(lm, PROMPT, GenerationConfig(max_new_tokens=16, kv_window=64))
    assert same.first_difference is None and same.kl.max() == 0
    rows = kv_policies.bytes_saved({"plain": plain_run, "window": policy_run})
    assert rows[0]["saved_bytes"] == 0 and rows[1]["saved_bytes"] == plain_run.cache["bytes"] - policy_run.cache["bytes"]


def test_final_attention_maps_show_what_each_query_saw(llama, one_thread):
    _, lm = llama
    W, S = 4, 2
    run = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=8, kv_window=W, kv_sink=S, capture_attention=True))
    maps = run.attention["self"]  # (L, h, T, T)
    T = maps.shape[-1]
    q, k = torch.arange(T)[:, None], torch.arange(T)[None]
    hidden = ~((k <= q) & ((k > q - W) | (k < S)))
    assert (torch.tensor(maps)[:, :, hidden] == 0).all()
    torch.testing.assert_close(torch.tensor(maps).sum(-1), torch.ones(maps.shape[:-1]), atol=1e-5, rtol=0)
    # the last step's row, recorded while decoding, is the map's last row
    last = run.steps[-1].attention["self"][0]
    torch.testing.assert_close(torch.tensor(last), torch.tensor(maps[0, :, T - 2, : T - 1]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["gemma3-sliding-local-rope", "mistral-sliding"])
def test_quantised_cache_on_sliding_layers_drops_whole_groups(name, tmp_path_factory, one_thread):
    _, lm = _load(tmp_path_factory, name)
    n = 70
    run = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=n, kv_dtype="int8"))
    written = run.cache["tokens"]
    assert written > 2 * GROUP
    for layer, kind in zip(run.cache["per_layer"], lm.model.layer_kinds):
        if kind.window is None:
            assert layer["tokens"] == written
        else:  # whole groups of 32 that left the window are gone; the rest is still held (masked)
            assert layer["tokens"] == written - (written - kind.window) // GROUP * GROUP


def test_kv_bench_table_reports_each_policy():
    from playground.tools.kv_bench import POLICIES, table

    rows = [{"policy": name, "kept_positions": 64, "positions": 175, "bytes": 2_949_120, "saved": 0.634,
             "first_difference": None if name == "plain" else 24, "tokens_per_s": 8.3} for name in POLICIES]
    report = {"model": "m", "prompt_tokens": 48, "new_tokens": 128, "threads": 1, "rows": rows,
              "sink_mass": [[0.1, 0.9], [0.6, 0.7]], "total_seconds": 109.6}
    text = table(report)
    assert "| plain | 64 / 175 | 2.81 MiB | 63.4% | same tokens | 8.3 |" in text
    assert "| int4 cache | 64 / 175 | 2.81 MiB | 63.4% | 24 | 8.3 |" in text
    assert "3 of 4 heads above 0.5" in text and "0.50 0.65" in text and "109.6 s" in text
    assert [p for p in POLICIES] == ["plain", "window 64", "sink 4 + window 60", "sink 4 + heavy 16 + window 44",
                                     "int8 cache", "int4 cache"]
