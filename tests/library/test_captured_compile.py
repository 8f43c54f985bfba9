"""The contract of `playground.load_model(path, compile=True)`: decode steps run through
`torch.compile(fullgraph=True)` (Inductor's C++ on this CPU), with no graph break and one graph per step
shape, never one per step or per length reached; the tokens are the eager run's, the probabilities
within 1e-5 (float32).

Two shapes are compiled (compiling is slow on 2 cores: about half a minute each): a greedy run with the
page's candidates, and a run sampled with top-k, top-p, temperature and repetition penalty that also
records the page's live capture (every layer's attention row, the residual stream) under an ablated
head and a steered block. Other prompts, knob values and lengths of the same shape reuse the graphs.
"""

from __future__ import annotations

import numpy as np
import pytest
from torch._dynamo.utils import counters

import playground
from playground.generation import GenerationConfig, generate_all
from playground.interventions import Ablate, Steer
from tests.hf_tiny import save_decoder
from tests.library.test_captured import FAMILIES, PROMPT, assert_same_run


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    family, kwargs = FAMILIES["llama-gqa"]
    directory = tmp_path_factory.mktemp("llama-gqa")
    save_decoder(directory, family, kwargs, init_std=0.1)
    return playground.load_model(directory), playground.load_model(directory, compile=True)


def _graphs() -> int:
    return counters["stats"].get("unique_graphs", 0)


def test_compiled_runs_break_no_graph_and_compile_once_per_shape(pair, one_thread):
    eager, compiled = pair
    d = eager.config.d_model
    greedy = GenerationConfig(max_new_tokens=32, top_candidates=5)
    sampled = GenerationConfig(max_new_tokens=32, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.2, seed=7,
                               capture_attention=True, capture_residual=True, top_candidates=5,
                               interventions=(Ablate(1, head=3), Steer(0, vector=[0.05] * d, scale=1.0)))
    for cfg in (greedy, sampled):
        counters.clear()
        got = generate_all(compiled, PROMPT, cfg)
        assert dict(counters["graph_break"]) == {}
        assert _graphs() == 1  # one graph for all 31 decode steps
        assert got.decoding == {"captured": True, "rows": 1, "backend": "inductor", "reason": "", "length": 64}
        assert len(got.token_ids) == 32
        assert_same_run(generate_all(eager, PROMPT, cfg), got)
    counters.clear()  # the same shapes again: other prompts, knob values and lengths reuse both graphs
    again = [
        ([11, 3, 17], greedy.replace(max_new_tokens=40)),
        ([8, 8, 30, 2, 51], sampled.replace(temperature=1.3, top_k=5, top_p=0.7, repetition_penalty=1.5, seed=3)),
    ]
    for prompt, cfg in again:
        got = generate_all(compiled, prompt, cfg)
        assert got.decoding["captured"]
        assert_same_run(generate_all(eager, prompt, cfg), got)
    assert _graphs() == 0 and dict(counters["graph_break"]) == {}
    assert len(compiled.captured.shapes) == 2
    assert np.isfinite([e.prob for e in got.steps]).all()


def test_without_a_cxx_compiler_runs_decode_eagerly_and_say_why(tmp_path, one_thread):
    """Inductor on the CPU compiles C++ (a slim server image may have no compiler): the step's capture fails
    once, on an idle step before the run's rows are in it; that run and every later run of the shape decode
    eagerly with the eager tokens and say why, without trying again."""
    import torch._inductor.config as inductor

    family, kwargs = FAMILIES["gpt2"]
    save_decoder(tmp_path / "gpt2", family, kwargs, init_std=0.1)
    eager, compiled = playground.load_model(tmp_path / "gpt2"), playground.load_model(tmp_path / "gpt2", compile=True)
    cfg = GenerationConfig(max_new_tokens=6, top_candidates=3)
    # (torch's own patch: monkeypatch's undo deletes a config entry, which breaks every later compile here)
    with inductor.patch({"cpp.cxx": (None, str(tmp_path / "no-such-g++")), "fx_graph_cache": False}):
        got = generate_all(compiled, PROMPT, cfg)  # (a cached graph would need no compiler)
        assert got.decoding == {"captured": False, "rows": 1, "backend": "eager",
                                "reason": "capturing this step failed (InductorError): eager"}
        assert_same_run(generate_all(eager, PROMPT, cfg), got)
        counters.clear()
        assert generate_all(compiled, [5, 6, 7], cfg).decoding == got.decoding
        assert _graphs() == 0 and compiled.captured.shapes == []  # not traced again


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_compiled_decodes_as_eager(tmp_path_factory, one_thread, name):
    """Every decoder family through torch.compile (half a minute or more each on 2 cores): greedy tokens
    equal, probabilities within 1e-5, no graph break, one graph."""
    family, kwargs = FAMILIES[name]
    directory = tmp_path_factory.mktemp(name)
    save_decoder(directory, family, kwargs, init_std=0.1)
    eager, compiled = playground.load_model(directory), playground.load_model(directory, compile=True)
    prompt = PROMPT[:4] if name == "phi3-longrope" else PROMPT  # before longrope's switch
    cfg = GenerationConfig(max_new_tokens=10, top_candidates=3)
    counters.clear()
    got = generate_all(compiled, prompt, cfg)
    assert got.decoding["captured"] and dict(counters["graph_break"]) == {} and _graphs() == 1
    assert_same_run(generate_all(eager, prompt, cfg), got)
