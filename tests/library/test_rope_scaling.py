"""A run's own RoPE scaling (`rope_scaling={"type": "linear" | "ntk" | "yarn", "factor": f}`) on real tiny checkpoints.

- The inverse frequencies and the attention factor are transformers' rope init functions for the same config.
- Logits past the trained length equal transformers' model built with that scaling.
- The loaded model is shared: its table never changes, and a plain run beside a scaled one (in the served
  batch too) gives its own tokens.
- The context check grows to trained length × factor; non-RoPE models and checkpoints that scale RoPE
  themselves refuse clearly.
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import playground
from playground.analysis.kv_policies import continuation_nll
from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import Scheduler
from playground.generation.config import SettingsError
from playground.generation.plan import plan
from playground.models.rope_scaling import rotary_override
from tests.hf_tiny import gpt2_like, llama_like, save_decoder
from tests.library.test_decoder_families import CASES

TRAINED = 32
PROMPT = [5, 9, 23, 40, 7, 11, 13, 17, 19, 3]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama-rope")
    kwargs = llama_like(num_key_value_heads=2, max_position_embeddings=TRAINED, rope_theta=500.0)
    reference = save_decoder(directory, "llama", kwargs, init_std=0.1)
    return reference, playground.load_model(directory), kwargs


def _hf_config(kwargs: dict, params: dict) -> transformers.LlamaConfig:
    config = transformers.LlamaConfig(**{k: v for k, v in kwargs.items() if k != "rope_theta"},
                                      rope_parameters={"rope_theta": kwargs["rope_theta"], **params})
    config._attn_implementation = "eager"
    return config


@pytest.mark.parametrize("factor", [1.5, 2.0, 4.0, 8.0])
def test_tables_are_transformers_tables(llama, factor):
    _, lm, kwargs = llama
    linear, _ = ROPE_INIT_FUNCTIONS["linear"](_hf_config(kwargs, {"rope_type": "linear", "factor": factor}))
    ours = rotary_override(lm.config, {"type": "linear", "factor": factor})
    torch.testing.assert_close(ours.inv_freq, linear, atol=0, rtol=1e-6)
    assert ours.attention_factor == 1.0 and ours.max_positions == int(TRAINED * factor)
    yarn_config = _hf_config(kwargs, {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": TRAINED})
    yarn, attention = ROPE_INIT_FUNCTIONS["yarn"](yarn_config)
    ours = rotary_override(lm.config, {"type": "yarn", "factor": factor})
    torch.testing.assert_close(ours.inv_freq, yarn, atol=0, rtol=1e-6)
    assert ours.attention_factor == pytest.approx(attention) == pytest.approx(0.1 * torch.log(torch.tensor(factor)).item() + 1)
    # transformers' dynamic NTK reaches the static NTK-aware base at length L·(2f − 1)/f
    dynamic, _ = ROPE_INIT_FUNCTIONS["dynamic"](_hf_config(kwargs, {"rope_type": "dynamic", "factor": factor}),
                                                seq_len=TRAINED * (2 * factor - 1) / factor)
    ours = rotary_override(lm.config, {"type": "ntk", "factor": factor})
    torch.testing.assert_close(ours.inv_freq, dynamic, atol=0, rtol=1e-5)
    d = lm.config.rotary_dims
    base = 500.0 * factor ** (d / (d - 2))
    torch.testing.assert_close(ours.inv_freq, 1.0 / base ** (torch.arange(0, d, 2).float() / d), atol=0, rtol=1e-6)


def test_partial_rotary_table_uses_the_rotating_dims(tmp_path_factory):
    family, kwargs = CASES["phi3-partial-gqa3"]
    directory = tmp_path_factory.mktemp("phi3-partial")
    save_decoder(directory, family, kwargs)
    lm = playground.load_model(directory)
    config = transformers.Phi3Config(**kwargs, original_max_position_embeddings=lm.config.max_positions)
    config.rope_parameters = {**config.rope_parameters, "rope_type": "yarn", "factor": 3.0,
                              "original_max_position_embeddings": lm.config.max_positions}
    yarn, attention = ROPE_INIT_FUNCTIONS["yarn"](config)
    ours = rotary_override(lm.config, {"type": "yarn", "factor": 3.0})
    assert ours.inv_freq.shape == (lm.config.rotary_dims // 2,)
    torch.testing.assert_close(ours.inv_freq, yarn, atol=0, rtol=1e-6)
    assert ours.attention_factor == pytest.approx(attention)


@pytest.mark.parametrize("params", [
    {"type": "linear", "factor": 2.0},
    {"type": "yarn", "factor": 2.0},
])
def test_logits_past_the_trained_length_match_transformers(llama, params, one_thread):
    reference, lm, kwargs = llama
    hf_params = {"rope_type": params["type"], "factor": params["factor"]}
    if params["type"] == "yarn":
        hf_params["original_max_position_embeddings"] = TRAINED
    scaled = transformers.LlamaForCausalLM(_hf_config(kwargs, hf_params)).eval()
    scaled.load_state_dict(reference.state_dict())
    ids = torch.randint(3, 97, (1, 56), generator=torch.Generator().manual_seed(0)).tolist()[0]  # past 32 positions
    with torch.no_grad():
        expected = torch.log_softmax(scaled(torch.tensor([ids])).logits[0].double(), -1)
    nll = continuation_nll(lm, ids[:20], ids[20:], params)
    by_hand = -expected[19:-1].gather(1, torch.tensor(ids[20:])[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(nll["nll"], dtype=torch.float64), by_hand, atol=2e-5, rtol=0)
    assert nll["positions"] == 56
    # and generation: greedy tokens past the trained length are transformers' greedy tokens
    run = generate_all(lm, ids[:20], GenerationConfig(max_new_tokens=30, rope_scaling=params))
    with torch.no_grad():
        hf = scaled.generate(torch.tensor([ids[:20]]), max_new_tokens=30, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, 20:].tolist()
    assert run.token_ids == hf[: len(run.token_ids)]
    assert run.cache["policy"]["rope_scaling"]["type"] == params["type"]


def test_context_grows_with_the_factor(llama, one_thread):
    _, lm, _ = llama
    with pytest.raises(SettingsError, match="max_new_tokens"):
        plan(lm, PROMPT, GenerationConfig(max_new_tokens=40))
    p = plan(lm, PROMPT, GenerationConfig(max_new_tokens=40, rope_scaling={"type": "ntk", "factor": 2.0}))
    assert p.max_length == 50
    with pytest.raises(SettingsError, match="max_new_tokens"):
        plan(lm, PROMPT, GenerationConfig(max_new_tokens=60, rope_scaling={"type": "ntk", "factor": 2.0}))
    run = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=40, rope_scaling={"type": "ntk", "factor": 2.0}))
    assert run.cache["tokens"] == len(PROMPT) + len(run.token_ids) - 1
    with pytest.raises(SettingsError, match="rope_scaling"):
        continuation_nll(lm, PROMPT, list(range(3, 40)))


def test_the_shared_model_is_untouched(llama, one_thread):
    _, lm, _ = llama
    table = lm.model.rope.inv_freq.clone()
    cfg = GenerationConfig(max_new_tokens=20)
    before = generate_all(lm, PROMPT, cfg)
    scaled_cfg = GenerationConfig(max_new_tokens=20, rope_scaling={"type": "yarn", "factor": 4.0})
    scaled = generate_all(lm, PROMPT, scaled_cfg)
    assert scaled.token_ids != before.token_ids
    assert torch.equal(lm.model.rope.inv_freq, table)
    after = generate_all(lm, PROMPT, cfg)
    assert after.token_ids == before.token_ids and [e.prob for e in after.steps] == [e.prob for e in before.steps]
    # served at the same time, each gets its own table
    scheduler = Scheduler(lm, max_rows=8, per_owner=4, max_prefills=4)
    tickets = [scheduler.submit(plan(lm, PROMPT, c)) for c in (scaled_cfg, cfg, scaled_cfg.replace(kv_window=6))]
    while scheduler.busy():
        scheduler.step()
    assert tickets[0].drain()[-1].token_ids == scaled.token_ids
    assert tickets[1].drain()[-1].token_ids == before.token_ids
    assert tickets[2].drain()[-1].token_ids == generate_all(lm, PROMPT, scaled_cfg.replace(kv_window=6)).token_ids


def test_linear_factor_one_is_the_plain_table(llama, one_thread):
    _, lm, _ = llama
    plain = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=12))
    same = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=12, rope_scaling={"type": "linear", "factor": 1}))
    assert same.token_ids == plain.token_ids
    assert [e.prob for e in same.steps] == [e.prob for e in plain.steps]


def test_refusals_are_one_line(tmp_path_factory, llama):
    directory = tmp_path_factory.mktemp("gpt2-rope")
    save_decoder(directory, "gpt2", gpt2_like())
    gpt2 = playground.load_model(directory)
    with pytest.raises(SettingsError, match="rope_scaling needs a RoPE model"):
        plan(gpt2, PROMPT, GenerationConfig(rope_scaling={"type": "linear", "factor": 2.0}))
    family, kwargs = CASES["phi3-longrope-window"]
    directory = tmp_path_factory.mktemp("phi3-longrope")
    save_decoder(directory, family, copy.deepcopy(kwargs))
    longrope = playground.load_model(directory)
    with pytest.raises(SettingsError, match="already scales RoPE"):
        plan(longrope, PROMPT, GenerationConfig(rope_scaling={"type": "yarn", "factor": 2.0}))
    for bad in ({"type": "dynamic", "factor": 2.0}, {"type": "linear"}, {"type": "linear", "factor": 0.5},
                {"type": "yarn", "factor": float("nan")}, "linear"):
        with pytest.raises(SettingsError, match="rope_scaling") as error:
            GenerationConfig(rope_scaling=bad).validate()
        assert "\n" not in str(error.value)
