"""The captured decode step (`generation.captured`) decodes as the eager loop on every decoder family.

Here the step runs uncompiled (`CapturedDecoder(compile=False)`): the same module `torch.compile` and
`torch.export` trace (tests/library/test_captured_compile.py, test_captured_export.py), seconds instead
of minutes. A run through it gives the eager run's tokens (greedy and seeded sampling: the same draws),
probabilities within 1e-5 (float32), the same candidates, cache statistics and, with the page's live
capture, its attention rows and residual stream; edits (ablate a head or an MLP, steer, patch) are
buffers it reads. Every host read of a step is counted: one transfer per token. The sampler on the device
is the eager pipeline, bitwise, row by row.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os

import numpy as np
import pytest
import torch
import transformers
from torch.overrides import TorchFunctionMode

import playground
from playground.generation import GenerationConfig, generate_all, sampler, sampling
from playground.generation.captured import CapturedDecoder
from playground.generation.processors import build_pipeline
from playground.interventions import Ablate, Patch, Steer
from tests.hf_tiny import llama_like, save_decoder, save_seq2seq, t5_like
from tests.library.test_batch_families import DECODERS

transformers.logging.set_verbosity_error()

FAMILIES = {
    **DECODERS,
    "phi3-longrope": ("phi3", llama_like(
        num_attention_heads=4, num_key_value_heads=4, sliding_window=7, max_position_embeddings=64,
        original_max_position_embeddings=16, tie_word_embeddings=True,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.4],
                      "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0]})),
}
PROMPT = [(7 * i) % 90 + 3 for i in range(9)]  # longer than every sliding window here (rings wrap)


def load(tmp_path_factory, name: str):
    family, kwargs = FAMILIES[name]
    directory = tmp_path_factory.mktemp(name)
    save_decoder(directory, family, kwargs, init_std=0.1)
    return playground.load_model(directory)


def captured(lm):
    """`lm` with uncompiled captured steps (what compile=True gives, without the compiler)."""
    return dataclasses.replace(lm, captured=CapturedDecoder(lm.model, compile=False))


def runs(lm) -> dict[str, GenerationConfig]:
    c = lm.config
    edits = (Ablate(min(1, c.n_layers - 1), head=c.n_heads - 1), Ablate(0, component="mlp"),
             Steer(0, vector=[0.1] * c.d_model, scale=2.0), Patch(c.n_layers - 1, position=len(PROMPT) + 1,
                                                                   value=[0.05] * c.d_model))
    return {
        "greedy": GenerationConfig(max_new_tokens=10),
        "sampled": GenerationConfig(max_new_tokens=10, temperature=0.8, top_k=20, top_p=0.9, min_p=0.01,
                                    repetition_penalty=1.2, seed=5),
        "live": GenerationConfig(max_new_tokens=10, capture_attention=True, capture_residual=True,
                                 capture_prompt_attention=True, repetition_penalty=1.3, top_candidates=8),
        "edited": GenerationConfig(max_new_tokens=10, interventions=edits),
    }


def assert_same_run(eager, got) -> None:
    """Tokens, candidates and cache statistics equal; probabilities and captures to float32 rounding."""
    assert got.token_ids == eager.token_ids and got.text == eager.text
    assert np.allclose([e.prob for e in got.steps], [e.prob for e in eager.steps], rtol=0, atol=1e-5)
    for a, b in zip(eager.steps, got.steps):
        assert a.cache == b.cache and a.finish_reason == b.finish_reason
        assert [(c.token_id, c.removed_by, c.chosen, list(c.stages)) for c in a.candidates] == \
            [(c.token_id, c.removed_by, c.chosen, list(c.stages)) for c in b.candidates]
        assert np.allclose([c.prob_final for c in a.candidates], [c.prob_final for c in b.candidates], atol=1e-5)
        assert np.allclose([c.logit for c in a.candidates], [c.logit for c in b.candidates], atol=1e-4)
        assert (a.attention is None) == (b.attention is None) and (a.residual is None) == (b.residual is None)
        if a.attention is not None:
            for x, y in zip(a.attention["self"], b.attention["self"]):
                assert x.shape == y.shape and np.allclose(x, y, rtol=0, atol=1e-5)
        if a.residual is not None:
            assert a.residual.shape == b.residual.shape
            assert np.allclose(a.residual, b.residual, rtol=1e-5, atol=1e-4)
    assert [e.prompt_attention is None for e in got.steps] == [e.prompt_attention is None for e in eager.steps]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_captured_step_decodes_as_the_eager_loop(tmp_path_factory, one_thread, name):
    lm = load(tmp_path_factory, name)
    fast = captured(lm)
    prompt = PROMPT[:4] if name == "phi3-longrope" else PROMPT  # 4 + 10 tokens: before longrope's switch at 16
    for kind, cfg in runs(lm).items():
        eager, got = generate_all(lm, prompt, cfg), generate_all(fast, prompt, cfg)
        assert got.decoding["captured"], (kind, got.decoding)
        assert_same_run(eager, got)
    if name == "phi3-longrope":  # a prompt past the switch reads the long table from its first token on
        long_prompt = [(5 * i) % 90 + 3 for i in range(20)]
        cfg = runs(lm)["greedy"]
        eager, got = generate_all(lm, long_prompt, cfg), generate_all(fast, long_prompt, cfg)
        assert got.decoding["captured"]
        assert_same_run(eager, got)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return load(tmp_path_factory, "llama-gqa")


def test_runs_the_step_cannot_take_decode_eagerly_and_say_why(llama, tmp_path_factory, one_thread):
    fast = captured(llama)
    cases = {
        "beam search": GenerationConfig(max_new_tokens=6, num_beams=2),
        "speculative": GenerationConfig(max_new_tokens=6, draft="ngram"),
        "without a KV cache": GenerationConfig(max_new_tokens=6, use_cache=False),
        "KV-cache policy": GenerationConfig(max_new_tokens=6, kv_window=4),
        "weight precision": GenerationConfig(max_new_tokens=6, weight_precision="int8"),
    }
    for words, cfg in cases.items():
        eager, got = generate_all(llama, PROMPT, cfg), generate_all(fast, PROMPT, cfg)
        assert got.decoding["captured"] is False and got.decoding["reason"], words
        assert got.token_ids == eager.token_ids and [e.prob for e in got.steps] == [e.prob for e in eager.steps]
    assert generate_all(llama, PROMPT, GenerationConfig(max_new_tokens=3)).decoding == {  # compile never asked
        "captured": False, "rows": 1, "backend": "eager", "reason": "the model was loaded without compile=True"}
    # longrope crossing its switch mid-run re-encodes the cache: eager
    phi3 = captured(load(tmp_path_factory, "phi3-longrope"))
    crossing = generate_all(phi3, PROMPT, GenerationConfig(max_new_tokens=12))  # 9 -> 21 positions, switch at 16
    assert not crossing.decoding["captured"] and "longrope" in crossing.decoding["reason"]
    # an encoder-decoder decodes eagerly
    directory = tmp_path_factory.mktemp("t5")
    save_seq2seq(directory, "t5", t5_like(), init_std=0.1)
    t5 = playground.load_model(directory, compile=True)
    result = generate_all(t5, [5, 6, 7, 1], GenerationConfig(max_new_tokens=4))
    assert not result.decoding["captured"] and "encoder-decoder" in result.decoding["reason"]
    assert t5.captured.shapes == []  # nothing was built, nothing compiled


def test_a_busy_step_leaves_the_next_run_to_the_eager_loop(llama, one_thread):
    fast = captured(llama)
    cfg = GenerationConfig(max_new_tokens=5)
    first = playground.generate(fast, PROMPT, cfg)
    next(first)  # holds the step of its shape
    second = generate_all(fast, PROMPT, cfg)
    assert not second.decoding["captured"] and "another run" in second.decoding["reason"]
    rest = list(first)
    assert [e.token_ids for e in rest][-1] == second.token_ids
    assert generate_all(fast, PROMPT, cfg).decoding["captured"]  # free again once the first run ended


class HostReads(TorchFunctionMode):
    """Counts every call that brings a tensor's value to the host (a sync on a GPU): copies to the CPU,
    item, tolist and the implicit ones (bool, float, int, index)."""

    READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.__bool__, torch.Tensor.__float__,
             torch.Tensor.__int__, torch.Tensor.__index__}

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        to_cpu = func is torch.Tensor.to and any(torch.device(a).type == "cpu" for a in (*args[1:], kwargs.get("device"))
                                                  if isinstance(a, (str, torch.device)))
        if func in self.READS or to_cpu:
            self.reads.append(func.__name__)
        return func(*args, **kwargs)


def test_each_token_costs_one_host_transfer(llama, one_thread):
    fast = captured(llama)
    for cfg in (GenerationConfig(max_new_tokens=8, temperature=0.9, top_k=10, top_p=0.9, repetition_penalty=1.2,
                                 seed=1),
                GenerationConfig(max_new_tokens=8, capture_attention=True, capture_residual=True,
                                 interventions=(Ablate(0, head=1),))):
        per_step = []
        with HostReads() as mode:
            for _ in playground.generate(fast, PROMPT, cfg):
                per_step.append(len(mode.reads))
                mode.reads.clear()
        assert len(per_step) == 8
        # the prefill's captures come from the eager pass (a few reads); every decoding step reads once
        assert per_step[1:] == [1] * 7, per_step
        if not cfg.records:
            assert per_step[0] == 1
    eager = []
    with HostReads() as mode:  # the eager loop, for scale: several reads per token
        for _ in playground.generate(llama, PROMPT, GenerationConfig(max_new_tokens=4, temperature=0.9, seed=1)):
            eager.append(len(mode.reads))
            mode.reads.clear()
    assert min(eager) > 1


KNOBS = list(itertools.product([0.0, 0.7, 1.0, 1.3], [0, 1, 20], [1.0, 0.9, 0.3], [1.0, 1.2, 0.8], [0.0, 0.05]))


def test_the_sampler_is_the_pipeline_row_by_row():
    """Every combination of knobs, each row its own, in one call: each row's stages, token and probability
    are bitwise those of its own eager pipeline, `sampling.choose` and `sampling.candidates`."""
    V, gen = 300, torch.Generator().manual_seed(0)
    rows = []
    for temperature, top_k, top_p, penalty, min_p in KNOBS:
        cfg = GenerationConfig(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=penalty,
                               min_p=min_p)
        if temperature == 0.0 and (top_k or top_p < 1.0 or min_p):
            continue  # sampling knobs without sampling: the same greedy pipeline
        rows.append(build_pipeline(cfg.validate()))
    R = len(rows)
    logits = torch.randn(R, V, generator=gen) * 4
    sequences = torch.randint(0, V, (R, 30), generator=gen)
    seen = torch.zeros(R, V, dtype=torch.bool).scatter_(1, sequences, True)
    knobs = [sampler.RowKnobs.of(p) for p in rows]
    values = [k.values(V) for k in knobs]
    tensors = {name: torch.tensor([v[name] for v in values], dtype=dtype) for name, dtype in sampler.KNOB_DTYPES.items()}
    stages = sampler.process(logits, seen, tensors, sampling=True)
    noise = torch.ones(R, V)
    generators = [torch.Generator().manual_seed(100 + r) for r in range(R)]
    for r, p in enumerate(rows):
        if p.sampling:
            sampler.draw_noise(noise[r], generators[r])
    token, numerator, denominator = sampler.choose(stages[-1], tensors["sample"], noise)
    ids, raw, probs, finite = sampler.candidates(stages, token, 6)
    for r, p in enumerate(rows):
        expected = p.run_stages(sequences[r : r + 1], logits[r : r + 1])
        assert knobs[r].stages() == tuple(name for name, _ in expected)
        for name, scores in expected:
            assert torch.equal(stages[sampler.STAGES.index(name)][r], scores[0]), (r, name)
        want, prob = sampling.choose(expected[-1][1], sample=p.sampling,
                                     generator=torch.Generator().manual_seed(100 + r))
        assert int(token[r]) == int(want) and float(numerator[r]) / float(denominator[r]) == prob
        cands = sampling.candidates([(n, s[0]) for n, s in expected], int(want), 6, str)
        picked = [sampler.STAGES.index(n) for n, _ in expected]
        mine = sampling.describe([n for n, _ in expected], ids[r].tolist(), raw[r].tolist(),
                                 probs[r][picked].tolist(), finite[r][picked].tolist(), int(want), str)
        assert mine == cands


def test_the_command_line_and_the_app_ask_for_the_captured_step(llama, monkeypatch, capsys, one_thread):
    import app as entry
    from playground.cli import main

    args = ["generate", "--model", str(llama.path), "--input-ids", "5,9,23,40", "--max-new-tokens", "6", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--compile", "eager"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decoding"] == {"captured": True, "rows": 1, "backend": "eager", "reason": "", "length": 64}
    assert plain["decoding"]["captured"] is False
    assert out["token_ids"] == plain["token_ids"] and out["cache"] == plain["cache"]
    assert main([*args, "--num-beams", "2", "--compile", "eager"]) == 0
    assert json.loads(capsys.readouterr().out)["decoding"] == {"captured": False, "rows": 2, "backend": "eager",
                                                                "reason": "beam search decodes eagerly"}
    # the app asks every load for it through the environment (its loaders live in the app's core)
    monkeypatch.setenv("PLAYGROUND_COMPILE", "0")  # (recorded, so the test leaves the environment as it found it)
    assert not entry.parse_args([]).compile and os.environ["PLAYGROUND_COMPILE"] == "0"
    assert entry.parse_args(["--compile"]).compile
    assert os.environ["PLAYGROUND_COMPILE"] == "1"  # the device's own way: torch.compile on the CPU
    assert playground.load_model(llama.path).captured.backend == "inductor"
    assert playground.load_model(llama.path, compile="auto").captured.backend == "inductor"  # the CPU's own way
    monkeypatch.setenv("PLAYGROUND_COMPILE", "cudagraph")  # ZeroGPU's: a model on the CPU decodes as usual
    assert playground.load_model(llama.path).captured is None
    monkeypatch.setenv("PLAYGROUND_COMPILE", "0")
    assert playground.load_model(llama.path).captured is None
    with pytest.raises(playground.CheckpointError, match="backend"):
        playground.load_model(llama.path, compile="jit")


def test_a_row_of_a_bucket_decodes_bitwise_alike_whoever_its_neighbours(llama, one_thread):
    """Rows of one graph (a bucket of 4 here): a row's output is bitwise the same beside three other runs as
    beside idle rows, and an idle row stays at position 0 however long the others decode."""
    from playground.generation.captured import DecodeStep, StepShape
    from playground.models.static import Capture

    shape = StepShape(rows=4, length=64, sampling=True, candidates=3, capture=Capture((1,), True))
    prompts = [PROMPT, [11, 3, 17], [8, 8, 30, 2, 51], [5, 6]]
    knobs = [sampler.RowKnobs(), sampler.RowKnobs(sample=True, temperature=0.7, top_k=12),
             sampler.RowKnobs(penalty=1.3), sampler.RowKnobs(sample=True, top_p=0.8)]

    def decode(which: list[int], steps: int = 20) -> dict[int, list[torch.Tensor]]:
        step = DecodeStep(llama.model, shape)
        gens = {i: torch.Generator().manual_seed(i) for i in which}
        noise = torch.ones(4, llama.config.vocab_size)
        told: dict[int, list[torch.Tensor]] = {}
        rows = {}
        with torch.inference_mode():
            for i in which:
                row, cache = step.start(prompts[i], 60, knobs[i])
                rows[i] = row
                logits = llama.model(torch.tensor([prompts[i]]), cache, last_only=True)[:, -1].float()
                sampler.draw_noise(noise[row], gens[i])
                told[i] = [step.first(row, logits, noise[row : row + 1])[0]]
            for _ in range(steps):
                for i in which:
                    sampler.draw_noise(noise[rows[i]], gens[i])
                out = step(noise)
                for i in which:
                    told[i].append(out[rows[i]].clone())
            idle = [r for r in range(4) if r not in rows.values()]
            assert all(int(step.positions[r]) == 0 for r in idle)
        return told

    together = decode([0, 1, 2, 3])
    for i in range(4):
        alone = decode([i])
        assert all(torch.equal(a, b) for a, b in zip(alone[i], together[i])), i


def test_a_model_keeps_max_steps_step_shapes_and_decodes_one_more_eagerly(llama, one_thread):
    """The shapes a model keeps are bounded: beyond `MAX_STEPS` a new shape decodes eagerly and says why, and
    nothing kept is evicted (an evicted shape that came back would compile again)."""
    from playground.generation.captured import MAX_STEPS

    fast = captured(llama)
    configs = [GenerationConfig(max_new_tokens=2, top_candidates=n) for n in range(MAX_STEPS + 2)]
    for cfg in configs[:MAX_STEPS]:
        assert generate_all(fast, PROMPT, cfg).decoding["captured"]
    kept = fast.captured.shapes
    for cfg in configs[MAX_STEPS:]:
        beyond = generate_all(fast, PROMPT, cfg)
        assert beyond.decoding == {"captured": False, "rows": 1, "backend": "eager", "reason": f"this model keeps {MAX_STEPS} captured step "
                                   "shapes already (the most it keeps): eager"}
        assert beyond.token_ids == generate_all(llama, PROMPT, cfg).token_ids
    assert fast.captured.shapes == kept and [s.candidates for s in kept] == list(range(MAX_STEPS))
    assert generate_all(fast, PROMPT, configs[0]).decoding["captured"]  # a kept shape still decodes captured


def test_the_step_keeps_every_tensor_on_the_models_device(tmp_path_factory, one_thread):
    """On a (fake) CUDA device, which refuses CPU tensors beside CUDA ones as a GPU does: a sampled, edited
    run with the live capture through the step builds nothing on the wrong device, and decodes as eager."""
    from tests.fake_cuda import CudaTensor, fake_cuda

    cpu = load(tmp_path_factory, "gemma3-sliding-local-rope")  # rings, local RoPE, sandwich norms
    c = cpu.config
    cfg = GenerationConfig(max_new_tokens=8, temperature=0.8, top_k=10, top_p=0.9, repetition_penalty=1.2, seed=3,
                           capture_attention=True, capture_residual=True,
                           interventions=(Ablate(0, head=1), Steer(0, vector=[0.1] * c.d_model, scale=1.0),
                                          Patch(1, position=len(PROMPT) + 1, value=[0.0] * c.d_model)))
    with fake_cuda() as device:
        model = playground.load_model(cpu.path).model.to(torch.device("cuda", 0))
        assert isinstance(model.embed.weight, CudaTensor)
        lm = dataclasses.replace(cpu, model=model, device=torch.device("cuda", 0))
        eager, got = generate_all(lm, PROMPT, cfg), generate_all(captured(lm), PROMPT, cfg)
    assert got.decoding["captured"] and got.token_ids == eager.token_ids
    # on CUDA the device runs a call ahead: each call's output copied to pinned host memory, its event waited for
    # once per token after the first (the prefill's token is chosen eagerly)
    assert device.events_waited == cfg.max_new_tokens - 1
    assert np.allclose([e.prob for e in got.steps], [e.prob for e in eager.steps], rtol=0, atol=1e-5)
