"""Steppers and planning: what differs between decoder-only and seq2seq models, in one place."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import playground
from playground.config import ModelConfig
from playground.generation import GenerationConfig, SettingsError, fit_to_context, plan, stepper_class
from playground.generation.stepper import DecoderStepper, Seq2SeqStepper
from tests.hf_tiny import llama_like, save_decoder, save_seq2seq, t5_like


def config(kind: str = "decoder", **overrides) -> ModelConfig:
    base = dict(family="llama", vocab_size=50, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_positions=64, kind=kind,
                n_encoder_layers=1 if kind == "seq2seq" else 0, positional="rope" if kind == "decoder" else "learned",
                bos_token_id=1, eos_token_id=2)
    base.update(overrides)
    return ModelConfig(**base)


def test_the_kinds_start_their_decoder_streams_differently():
    assert stepper_class("decoder") is DecoderStepper and stepper_class("seq2seq") is Seq2SeqStepper
    assert DecoderStepper.decoder_prefix(config(), [5, 6]) == [5, 6]
    assert Seq2SeqStepper.decoder_prefix(config("seq2seq", decoder_start_token_id=3), [5, 6]) == [3]
    assert Seq2SeqStepper.decoder_prefix(config("seq2seq"), [5, 6]) == [1]  # bos when there is no start token
    with pytest.raises(playground.PlaygroundError, match="decoder_start_token_id"):
        Seq2SeqStepper.decoder_prefix(config("seq2seq", bos_token_id=None), [5])
    assert DecoderStepper.empty_prompt(config()) == [1] and Seq2SeqStepper.empty_prompt(config("seq2seq")) == [2]
    assert DecoderStepper.context_limit(config()) == 64
    assert Seq2SeqStepper.context_limit(config("seq2seq")) == 64
    assert Seq2SeqStepper.context_limit(config("seq2seq", positional="relative")) is None


@pytest.mark.parametrize("case, args, shrink, expected", [
    ("fits", (DecoderStepper, 64, 10, 20), True, (10, 20, 0)),
    ("engine truncates the prompt", (DecoderStepper, 64, 60, 20), False, (44, 20, 1)),
    ("app shrinks the new tokens", (DecoderStepper, 64, 60, 20), True, (60, 4, 1)),
    ("app shrinks a long request", (DecoderStepper, 64, 10, 100), True, (10, 54, 1)),
    ("no room at all", (DecoderStepper, 64, 100, 8), True, (56, 8, 1)),
    ("long source", (Seq2SeqStepper, 32, 50, 10), True, (32, 10, 1)),
    ("long target", (Seq2SeqStepper, 32, 5, 100), True, (5, 31, 1)),
    ("unbounded", (Seq2SeqStepper, None, 500, 500), True, (500, 500, 0)),
])
def test_one_rule_fits_prompt_and_new_tokens_into_the_context(case, args, shrink, expected):
    fit = fit_to_context(*args, truncate=True, shrink=shrink)
    assert (fit.keep, fit.max_new_tokens, len(fit.notes)) == expected, case


def test_the_engine_refuses_what_does_not_fit_unless_asked_to_truncate():
    with pytest.raises(SettingsError, match="lower max_new_tokens to 4"):
        fit_to_context(DecoderStepper, 64, 60, 20, truncate=False)
    assert fit_to_context(DecoderStepper, 64, 60, 20, truncate=True).keep == 44
    with pytest.raises(SettingsError, match="use at most 31"):
        fit_to_context(Seq2SeqStepper, 32, 5, 100, truncate=True)
    assert fit_to_context(DecoderStepper, 64, 10, 50, truncate=False, forced=4).max_new_tokens == 50
    with pytest.raises(SettingsError):
        fit_to_context(DecoderStepper, 64, 10, 51, truncate=False, forced=4)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d, s = tmp_path_factory.mktemp("llama"), tmp_path_factory.mktemp("t5")
    save_decoder(d, "llama", llama_like(num_key_value_heads=2))
    save_seq2seq(s, "t5", t5_like())
    return {"decoder": playground.load_model(d), "seq2seq": playground.load_model(s)}


@pytest.mark.parametrize("kind", ["decoder", "seq2seq"])
def test_cached_and_recomputed_steps_give_the_same_logits(models, kind):
    lm = models[kind]
    prompt = [4, 9, 11, 7, 3]
    p = plan(lm, prompt, GenerationConfig(max_new_tokens=5))
    logits = {}
    for use_cache in (True, False):
        stepper = p.stepper(lm.model, batch=1, max_tokens=p.max_length, use_cache=use_cache)
        with torch.inference_mode():
            out = [stepper.start(torch.tensor(p.prompt_ids), torch.tensor(p.prefix_ids))]
            out += [stepper.step(torch.tensor([t])) for t in (5, 6, 7)]
        logits[use_cache] = torch.stack(out)
        stats = stepper.stats().to_dict()
        assert stats["enabled"] is use_cache
        assert (stats["tokens"], stats["recomputed_tokens"]) == ((len(p.prefix_ids) + 3, 0) if use_cache
                                                                  else (0, len(p.prefix_ids) + 3))
        if kind == "seq2seq":
            assert stats["cross_attention"]["tokens"] == len(prompt)
            assert (stats["cross_attention"]["bytes"] > 0) is use_cache
    torch.testing.assert_close(logits[True], logits[False], atol=1e-5, rtol=0)


def test_plan_validates_against_the_model(models):
    lm = models["decoder"]
    with pytest.raises(SettingsError, match="outside the vocabulary"):
        plan(lm, [lm.config.vocab_size], GenerationConfig())
    p = plan(lm, [], GenerationConfig(max_new_tokens=3))
    assert p.prompt_ids == [lm.config.bos_token_id] and "empty" in p.notes[0]
    forced = plan(lm, [4, 5], GenerationConfig(max_new_tokens=3), forced_prefix=[6, 7])
    assert forced.prefix_ids == [4, 5, 6, 7] and forced.forced_ids == [6, 7] and forced.max_length == 7
    s2s = plan(models["seq2seq"], [4, 5], GenerationConfig(max_new_tokens=3), forced_prefix=[6])
    assert s2s.prompt_ids == [4, 5] and s2s.prefix_ids == [0, 6]  # T5 starts from its decoder_start_token_id 0
    fake = SimpleNamespace(kind="decoder", config=config())
    assert stepper_class(fake.kind).attention_layer_count(fake.config) == 1
