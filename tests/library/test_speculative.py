"""Speculative decoding (`GenerationConfig.draft`): the drafter changes how many tokens a pass of the model
yields, never which tokens. Greedy: the same ids as plain greedy on every decoder family, with every drafter
(prompt lookup, the model's own early layers, a second model). Sampling: the same distribution, shown by
next-token histograms over many seeds against the sampling error expected for that many seeds, and a rule
that accepted every draft would fail the same test. Also through the shared batch the server runs.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch

import playground
from playground.generation import GenerationConfig, generate_all, speculative
from playground.generation.batch import Scheduler, run_alone
from playground.generation.config import SettingsError
from playground.generation.drafters import NgramDrafter
from playground.generation.plan import plan
from playground.generation.processors import build_pipeline
from playground.interventions import Ablate
from tests.hf_tiny import gpt2_like, llama_like, save_decoder, save_seq2seq, t5_like
from tests.library.test_decoder_families import CASES

FAMILIES = {
    **CASES,
    "gpt2": ("gpt2", gpt2_like()),
    "llama": ("llama", llama_like()),
    "mistral-window5": ("mistral", llama_like(sliding_window=5, num_key_value_heads=2)),
    "qwen2": ("qwen2", llama_like(num_key_value_heads=2)),
}
# A repeated stretch, so prompt lookup finds something to propose.
PROMPT = [5, 9, 23, 40, 7, 11, 5, 9, 23, 40, 7, 12, 30]
GREEDY = GenerationConfig(max_new_tokens=22, top_candidates=3)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def drafter_model(tmp_path_factory):
    """A second model with the same 97-token vocabulary and other weights: it disagrees often."""
    directory = tmp_path_factory.mktemp("drafter")
    save_decoder(directory, "llama", llama_like(), seed=7, init_std=0.1)
    return playground.load_model(directory)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    kind, kwargs = FAMILIES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    save_decoder(directory, kind, kwargs, init_std=0.1)
    return playground.load_model(directory)


def _drafts(lm, drafter_model):
    n = lm.config.n_layers
    return {"ngram": "ngram", "layer:1": "layer:1", f"layer:{n}": f"layer:{n}", "model": drafter_model}


def test_greedy_tokens_equal_plain_greedy_with_every_drafter(family, drafter_model, one_thread):
    plain = generate_all(family, PROMPT, GREEDY)
    assert plain.speculation is None
    for name, draft in _drafts(family, drafter_model).items():
        for k in (1, 3, 5):
            result = generate_all(family, PROMPT, GREEDY.replace(draft=draft, draft_tokens=k))
            assert result.token_ids == plain.token_ids, (name, k)
            assert [e.step for e in result.steps] == list(range(len(plain.token_ids)))  # one event per token
            assert [e.token_ids for e in result.steps] == [e.token_ids for e in plain.steps]
            s = result.speculation
            assert s["target_passes"] <= len(plain.token_ids) and 0 <= s["accepted"] <= s["proposed"]
            assert s["tokens_per_pass"] == pytest.approx(len(plain.token_ids) / s["target_passes"])
            if name == f"layer:{family.config.n_layers}":  # the whole model drafting itself: every draft kept
                assert s["accepted"] == s["proposed"] > 0
            if name in ("layer:1", "model"):
                assert s["proposed"] > 0


def test_greedy_with_repetition_penalty_and_without_cache(family, drafter_model, one_thread):
    """The penalty depends on each position's own prefix (drafts included); without a cache a pass recomputes."""
    cfg = GREEDY.replace(repetition_penalty=1.4, max_new_tokens=16)
    plain = generate_all(family, PROMPT, cfg)
    for draft in ("ngram", "layer:1", drafter_model):
        for use_cache in (True, False):
            result = generate_all(family, PROMPT, cfg.replace(draft=draft, draft_tokens=3, use_cache=use_cache))
            assert result.token_ids == plain.token_ids
            assert [e.prob for e in result.steps] == pytest.approx([e.prob for e in plain.steps], abs=1e-5)


def test_prompt_lookup_proposes_what_followed_the_suffix():
    drafter, pipeline = NgramDrafter(), build_pipeline(GenerationConfig())
    seq = torch.tensor([[1, 2, 3, 4, 5, 9, 2, 3]])
    assert drafter.propose(seq, 3, pipeline, None).tokens == [4, 5, 9]  # "2 3" was followed by 4 5 9
    assert drafter.propose(seq, 9, pipeline, None).tokens == [4, 5, 9, 2, 3]  # up to the end of the sequence
    assert drafter.propose(torch.tensor([[1, 2, 3, 7]]), 3, pipeline, None).tokens == []  # nothing matched


def test_ngram_run_keeps_its_drafts_on_a_repeating_model(family, one_thread):
    """Tiny random models fall into loops; prompt lookup then drafts the loop and passes yield several tokens."""
    result = generate_all(family, PROMPT, GREEDY.replace(draft="ngram", max_new_tokens=40))
    events = result.steps
    kinds = Counter(e.speculation["kind"] for e in events)
    assert kinds["prefill"] == 1 and events[0].speculation["kind"] == "prefill"
    for e in events:
        sp = e.speculation
        if sp["kind"] in ("accepted", "rejected"):
            assert sp["draft_token"] == sp["drafted"][sp["position"]] and sp["q"] == 1.0  # one-hot q
            assert (sp["kind"] == "accepted") == (sp["draft_token"] == e.token_id)
        if sp["kind"] == "rejected":
            assert sp["resampled_token"] == e.token_id != sp["draft_token"]
    json.dumps([e.to_dict() for e in events])
    json.dumps(result.to_dict(steps=True))
    assert result.speculation["accepted"] == kinds["accepted"]


def test_a_run_without_draft_is_todays_run(drafter_model, one_thread):
    cfg = GenerationConfig(max_new_tokens=12, temperature=0.9, top_k=20, seed=3)
    assert cfg.to_dict()["draft"] is None and cfg.to_dict()["draft_tokens"] == 4
    a = generate_all(drafter_model, PROMPT, cfg)
    b = generate_all(drafter_model, PROMPT, cfg.replace(draft=None, draft_tokens=9))  # without a draft it does nothing
    assert a.token_ids == b.token_ids and [e.prob for e in a.steps] == [e.prob for e in b.steps]
    assert a.speculation is None and "speculation" not in a.to_dict()
    assert all(e.speculation is None and "speculation" not in e.to_dict() for e in a.steps)


def test_settings_are_checked_with_one_line_saying_what_to_do(drafter_model, tmp_path):
    for bad, words in (("bogus", "draft is 'bogus'"), ("layer:0", "layer:K"), ("layer:x", "layer:K"), (3, "draft is 3")):
        with pytest.raises(SettingsError, match=words):
            GenerationConfig(draft=bad).validate()
    for bad in (0, 17, "4", 2.5, True):
        with pytest.raises(SettingsError, match="draft_tokens"):
            GenerationConfig(draft="ngram", draft_tokens=bad).validate()
    with pytest.raises(SettingsError, match="this model has 2 layers; use layer:1 to layer:2"):
        generate_all(drafter_model, PROMPT, GenerationConfig(draft="layer:3"))
    save_decoder(tmp_path / "wide", "llama", llama_like(vocab_size=101))
    wide = playground.load_model(tmp_path / "wide")
    with pytest.raises(SettingsError, match=r"vocabulary \(101 tokens\) differs from this model's \(97\)"):
        generate_all(drafter_model, PROMPT, GenerationConfig(draft=wide))
    with pytest.raises(SettingsError, match="turn capture_attention off"):
        generate_all(drafter_model, PROMPT, GenerationConfig(draft="ngram", capture_attention=True))
    save_seq2seq(tmp_path / "t5", "t5", t5_like())
    t5 = playground.load_model(tmp_path / "t5")
    with pytest.raises(SettingsError, match="decoder-only models"):
        generate_all(t5, PROMPT, GenerationConfig(draft="ngram"))
    with pytest.raises(SettingsError, match="encoder-decoder"):
        generate_all(drafter_model, PROMPT, GenerationConfig(draft=t5))
    data = GenerationConfig(draft=drafter_model).to_dict()
    assert data["draft"] == f"model:{drafter_model.path.name}" and json.loads(json.dumps(data)) == data


def test_beam_search_ignores_the_draft_and_says_so(family, one_thread):
    cfg = GenerationConfig(max_new_tokens=8, num_beams=3, top_candidates=0)
    plain = generate_all(family, PROMPT, cfg)
    result = generate_all(family, PROMPT, cfg.replace(draft="layer:1"))
    assert result.token_ids == plain.token_ids
    assert [s.to_dict() for s in result.sequences] == [s.to_dict() for s in plain.sequences]
    assert result.speculation["proposed"] == 0 and result.speculation["used"] is False
    assert any("not used with beam search" in n for n in result.notes)


def test_interventions_apply_to_the_checked_tokens(drafter_model, one_thread):
    cfg = GREEDY.replace(interventions=(Ablate(layer=0, head=1),))
    plain = generate_all(drafter_model, PROMPT, cfg)
    assert plain.token_ids != generate_all(drafter_model, PROMPT, GREEDY).token_ids  # the edit matters here
    for draft in ("ngram", "layer:1"):
        assert generate_all(drafter_model, PROMPT, cfg.replace(draft=draft)).token_ids == plain.token_ids


def test_seeded_sampling_repeats_and_records_every_check(drafter_model, tmp_path, one_thread):
    save_decoder(tmp_path / "target", "llama", llama_like(), seed=3, init_std=0.1)
    target = playground.load_model(tmp_path / "target")
    cfg = GenerationConfig(max_new_tokens=30, temperature=1.0, top_p=0.95, repetition_penalty=1.1, seed=11,
                           draft=drafter_model, draft_tokens=3)
    a, b = generate_all(target, PROMPT, cfg), generate_all(target, PROMPT, cfg)
    assert a.token_ids == b.token_ids and a.speculation == b.speculation
    checked = [e.speculation for e in a.steps if e.speculation["kind"] in ("accepted", "rejected")]
    assert {s["kind"] for s in checked} == {"accepted", "rejected"}  # this pair disagrees often enough for both
    for s in checked:
        assert s["accept_prob"] == pytest.approx(min(1.0, s["p"] / s["q"]))
        assert 0.0 <= s["coin"] < 1.0 and s["accepted"] == (s["coin"] < s["accept_prob"])
        if not s["accepted"]:
            top = s["residual_top"]
            assert top and all(r["residual"] > 0 and r["p"] > r["q"] for r in top)
            assert s["resampled_token"] in [r["token_id"] for r in top] or len(top) == speculative.RESIDUAL_TOP
    assert sum(s["accepted"] for s in checked) == a.speculation["accepted"]


def test_the_rule_keeps_the_target_distribution_exactly():
    """P(x) = q(x)·min(1, p(x)/q(x)) + P(reject)·residual(x) = p(x), for any q: random ones, and the one-hot q
    of prompt lookup."""
    g = torch.Generator().manual_seed(0)
    for i in range(20):
        p = torch.softmax(torch.randn(30, generator=g, dtype=torch.float64) * 2, 0)
        q = torch.softmax(torch.randn(30, generator=g, dtype=torch.float64) * 2, 0)
        if i % 4 == 0:
            q = torch.nn.functional.one_hot(torch.tensor(i), 30).double()
        kept = torch.tensor([q[x] * speculative.accept_probability(float(p[x]), float(q[x])) for x in range(30)],
                            dtype=torch.float64)
        total = kept + (1 - kept.sum()) * speculative.residual(p, q)
        torch.testing.assert_close(total, p)


def _histograms(target, cfg, seeds, positions=(1, 2)) -> list[Counter]:
    """Per position, how often each token came there over `seeds` (-1: the run had ended before it)."""
    counts = [Counter() for _ in positions]
    for seed in seeds:
        ids = generate_all(target, [5, 9, 23, 40], cfg.replace(seed=seed)).token_ids
        for c, position in zip(counts, positions):
            c[ids[position] if position < len(ids) else -1] += 1
    return counts


def _tv(a: Counter, b: Counter, n: int) -> float:
    return 0.5 * sum(abs(a[t] - b[t]) for t in set(a) | set(b)) / n


def _expected_tv(a: Counter, b: Counter, n: int) -> float:
    """The total-variation distance two histograms of n draws each from the same distribution π have on
    average: ½ Σ E|π̂ᵢ − π̂'ᵢ| ≈ ½ Σ √(2/π_c)·√(2πᵢ(1 − πᵢ)/n) = Σ √(πᵢ(1 − πᵢ)) / √(π_c·n) (π_c = 3.14…),
    at most √((V_eff − 1)/(π_c·n)); π estimated from both histograms pooled."""
    pooled = {t: (a[t] + b[t]) / (2 * n) for t in set(a) | set(b)}
    return sum(math.sqrt(p * (1 - p)) for p in pooled.values()) / math.sqrt(math.pi * n)


def _bound(a: Counter, b: Counter, n: int) -> float:
    """Expected distance plus a deviation that same-distribution histograms exceed with probability < 1e-4:
    one draw moves the distance by at most 1/n, so by McDiarmid P(TV − E[TV] ≥ t) ≤ exp(−n·t²)."""
    return _expected_tv(a, b, n) + math.sqrt(math.log(1e4) / n)


def test_sampled_speculation_keeps_the_distribution(tmp_path, one_thread, monkeypatch):
    """2000 seeds per side: the 2nd and 3rd generated tokens (both decided by the acceptance rule, under
    temperature, top-k and a repetition penalty that depends on each position's prefix) have the plain run's
    histograms within the sampling error, with a second model (the target's weights plus noise: it keeps about
    half of its drafts) and with the model's own first layer drafting; accepting every draft instead is caught."""
    save_decoder(tmp_path / "target", "llama", llama_like(), seed=3, init_std=0.1)
    target, near = playground.load_model(tmp_path / "target"), playground.load_model(tmp_path / "target")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in near.model.parameters():
            weight.add_(torch.randn(weight.shape, generator=g) * 0.015)
    n = 2000
    cfg = GenerationConfig(max_new_tokens=4, temperature=1.0, top_k=6, repetition_penalty=1.3, top_candidates=0)
    plain = _histograms(target, cfg, range(n))
    for draft in (near, "layer:1"):
        spec = cfg.replace(draft=draft, draft_tokens=2)
        drafted = _histograms(target, spec, range(n, 2 * n))
        for position, a, b in zip((1, 2), plain, drafted):
            tv, bound = _tv(a, b, n), _bound(a, b, n)
            assert tv < bound < 0.2, (position, tv, bound)  # a bound that tells something
    spec = cfg.replace(draft=near, draft_tokens=2)
    assert 0.3 < generate_all(target, PROMPT, spec.replace(seed=1, max_new_tokens=60)).speculation["acceptance_rate"]
    with monkeypatch.context() as m:
        m.setattr(speculative, "accept_probability", lambda p_x, q_x: 1.0)  # a wrong rule: keep every draft
        wrong = _histograms(target, spec, range(n, 2 * n), positions=(1,))[0]
    assert _tv(plain[0], wrong, n) > 2 * _bound(plain[0], wrong, n)


def _scheduled(lm, requests):
    scheduler = Scheduler(lm)
    tickets = [scheduler.submit(plan(lm, prompt, cfg)) for prompt, cfg in requests]
    while scheduler.busy():
        scheduler.step()
    return [[e.token_id for e in t.drain()] for t in tickets]


@pytest.mark.parametrize("name", ["llama", "mistral-window5"])
def test_speculative_runs_in_the_shared_batch(name, drafter_model, tmp_path, one_thread):
    """As the server runs it: alone in its scheduler, and beside a plain run and a second speculative one,
    each gets the tokens generate_all gives it (a window model's cache is its own, the others' rows of the pool)."""
    kind, kwargs = FAMILIES[name]
    save_decoder(tmp_path / name, kind, kwargs, init_std=0.1)
    lm = playground.load_model(tmp_path / name)
    spec = GREEDY.replace(draft="layer:1", draft_tokens=3)
    other = GREEDY.replace(draft=drafter_model, draft_tokens=2)
    expected = [generate_all(lm, PROMPT, spec).token_ids, generate_all(lm, PROMPT[:7], GREEDY).token_ids,
                generate_all(lm, PROMPT[2:], other).token_ids]
    assert [e.token_id for e in run_alone(plan(lm, PROMPT, spec))] == expected[0]
    assert _scheduled(lm, [(PROMPT, spec), (PROMPT[:7], GREEDY), (PROMPT[2:], other)]) == expected
    sampled = GenerationConfig(max_new_tokens=10, temperature=0.8, seed=5, draft="ngram")
    uncached = GREEDY.replace(draft="layer:1", use_cache=False)
    assert _scheduled(lm, [(PROMPT, sampled), (PROMPT[1:], uncached)]) == [
        generate_all(lm, PROMPT, sampled).token_ids, generate_all(lm, PROMPT[1:], GREEDY).token_ids]


def test_speculative_runs_through_the_server_beside_others(drafter_model, tmp_path):
    """The served app's path: the server's driver thread steps one shared batch for visitors on their own threads."""
    import threading

    from playground.app.serving import Server

    lm = drafter_model
    requests = [(PROMPT, GREEDY.replace(draft="ngram")), (PROMPT[3:], GREEDY),
                (PROMPT[1:], GREEDY.replace(draft="layer:1", draft_tokens=2)),
                (PROMPT, GenerationConfig(max_new_tokens=15, temperature=0.9, seed=2, draft="layer:1"))]
    server = Server(max_rows=4, call=lambda fn: fn())
    got: dict[int, list[int]] = {}

    def visit(i: int) -> None:
        prompt, cfg = requests[i]
        got[i] = [e.token_id for e in server.submit(plan(lm, prompt, cfg)).stream(timeout=60)]

    threads = [threading.Thread(target=visit, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert got == {i: generate_all(lm, prompt, cfg).token_ids for i, (prompt, cfg) in enumerate(requests)}


@pytest.mark.slow
def test_smollm2_greedy_equals_plain_with_each_drafter():
    path = REPO / "weights" / "SmolLM2-135M-Instruct"
    if not (path / "config.json").exists():
        pytest.skip("weights/SmolLM2-135M-Instruct is not here (python -m playground import-smollm2 makes it)")
    lm = playground.load_model(path)
    prompt = "List the days of the week, then list them again in the same order."
    cfg = GenerationConfig(max_new_tokens=40, chat=True, top_candidates=0)
    plain = generate_all(lm, prompt, cfg)
    for draft in ("ngram", "layer:20", lm):  # the model itself is a drafter with the same vocabulary
        result = generate_all(lm, prompt, cfg.replace(draft=draft))
        assert result.token_ids == plain.token_ids, draft if isinstance(draft, str) else "model"
        assert result.speculation["accepted"] > 0


def test_the_benchmark_compares_with_plain_decoding_in_the_same_run(capsys, tmp_path, one_thread):
    from playground.tools import bench, speculative_bench

    lm = playground.load_model(REPO / "weights" / "tiny-lm")
    rows = speculative_bench.run(lm, ["ngram", "layer:2"], new_tokens=12, draft_tokens=3, repeats=1)
    assert [(r["prompt"], r["drafter"]) for r in rows] == [
        (name, d) for name in speculative_bench.PROMPTS for d in ("plain", "ngram", "layer:2")
    ]
    assert all(r["same_tokens"] and r["tokens_per_s"] > 0 for r in rows)
    table = speculative_bench.markdown(rows, 3)
    assert table.count("\n") == len(rows) + 1 and "| copy | plain | 1.00 | – |" in table
    assert bench.main(["--speculative", "--model", str(tmp_path / "nope")]) == 2
    assert "no checkpoint folder" in capsys.readouterr().err


def test_the_command_line_drafts_and_reports_its_speculation(tmp_path, capsys, one_thread):
    from playground.cli import main

    save_decoder(tmp_path / "a", "llama", llama_like(), init_std=0.1)
    save_decoder(tmp_path / "b", "llama", llama_like(), seed=5, init_std=0.1)
    common = ["generate", "--model", str(tmp_path / "a"), "--input-ids", ",".join(map(str, PROMPT)),
              "--max-new-tokens", "12", "--json"]
    assert main(common) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "speculation" not in plain
    for draft in ("ngram", "layer:1", str(tmp_path / "b")):
        assert main(common + ["--draft", draft, "--draft-tokens", "3"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["token_ids"] == plain["token_ids"] and out["speculation"]["target_passes"] >= 1
    assert main(common + ["--draft", "layer:7"]) == 2
    assert capsys.readouterr().err.strip() == "error: draft 'layer:7': this model has 2 layers; use layer:1 to layer:2"
    assert main(common + ["--draft", "ngram", "--draft-tokens", "40"]) == 2
    assert "draft_tokens is 40" in capsys.readouterr().err


def test_a_draft_with_a_kv_cache_setting_is_refused_in_one_line(tmp_path):
    """Speculation rewinds a plain cache; with an evicting, quantised or rescaled one it says so instead of
    silently dropping the KV setting."""
    save_decoder(tmp_path, "llama", llama_like(), init_std=0.1)
    lm = playground.load_model(tmp_path)
    for kv in ({"kv_window": 8}, {"kv_dtype": "int8"}, {"rope_scaling": {"type": "linear", "factor": 2.0}}):
        cfg = GenerationConfig(max_new_tokens=4, draft="ngram", capture_attention=False, **kv)
        with pytest.raises(SettingsError, match="draft does not combine"):
            playground.generate_all(lm, [1, 2, 3], cfg)
    precise = GenerationConfig(max_new_tokens=6, draft="ngram", weight_precision="int8")
    plain = GenerationConfig(max_new_tokens=6, weight_precision="int8")
    assert playground.generate_all(lm, [1, 2, 3, 1, 2], precise).token_ids == \
        playground.generate_all(lm, [1, 2, 3, 1, 2], plain).token_ids
