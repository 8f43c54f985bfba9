"""Settings fuzz: random, absurd and mistyped generation settings never crash the engine.

Each random config either runs or raises one SettingsError (a PlaygroundError) whose message names a
knob; after `clamp_settings` (what the UI does) every config runs, and every change is a note.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

import playground
from playground.app.limits import clamp_settings
from playground.generation import GenerationConfig, SettingsError, generate_all
from playground.models.quantize import PRECISIONS
from tests.hf_tiny import llama_like, save_decoder

CASES = 400  # enough for 15 accepted runs with every field of GenerationConfig fuzzed
ABSURD = [0, -1, 1, 2, 7, 10**9, -(10**9), 0.5, -0.5, 1e-9, 1.5, 1e30, -1e30,
          math.nan, math.inf, -math.inf, None, "3", "", True, False, [1], {}]
KNOB_NAMES = [f.name for f in dataclasses.fields(GenerationConfig)]
# The KV-cache lab's settings: validated by the engine (fuzzed below), not yet offered nor clamped by the app.
KV_LAB = ("kv_window", "kv_sink", "kv_heavy", "kv_dtype", "rope_scaling")


def _absurd(rng: random.Random, name: str) -> object:
    if name == "stop_strings":
        return rng.choice([("\n",), ["x"], "not a tuple", None])
    if name == "early_stopping":
        return rng.choice(["never", "sometimes", 2, None, True])
    if name == "weight_precision":
        return rng.choice(["int4", "int8", "bfloat16", "float16", "float32", None, None, "fp8", "INT8", 8])
    if name == "draft":  # usable drafters too: on this 2-layer model "layer:9" is not one
        return rng.choice(["ngram", "layer:1", "layer:9", "bogus", None, 3])
    if name == "cache_blend":  # usable blends too; "tokens:0@5" names no chunk size
        return rng.choice(["paragraphs@15", "tokens:2@40", "tokens:3@0", "tokens:0@5", "halves@1", None, 3])
    if name == "draft_tokens":
        return rng.choice([1, 4, 16, 0, 17, "4", None])
    return rng.choice(ABSURD)


def _random_config(rng: random.Random, names: list[str] = KNOB_NAMES) -> GenerationConfig:
    """A sane config with one to three knobs set to something absurd or mistyped."""
    values = dataclasses.asdict(GenerationConfig(max_new_tokens=4, top_candidates=3))
    for name in rng.sample(names, rng.randint(1, 3)):
        values[name] = _absurd(rng, name)
    return GenerationConfig(**values)


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fuzz-llama")
    save_decoder(directory, "llama", llama_like(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32))
    return playground.load_model(directory)


def _cheap(cfg: GenerationConfig) -> GenerationConfig:
    """Keep each accepted run small: what is fuzzed is the validation, not the model's speed."""
    return cfg.replace(max_new_tokens=min(cfg.max_new_tokens, 4), num_beams=min(cfg.num_beams, 3))


def test_random_settings_run_or_raise_one_settings_error(lm):
    rng = random.Random("settings-fuzz")
    outcomes = {"ran": 0, "refused": 0}
    for _ in range(CASES):
        cfg = _random_config(rng)
        prompt = rng.choice([[3, 4, 5]] * 4 + [[], list(range(1, 40)), "text without a tokenizer"])
        try:
            cfg.validate()
        except SettingsError as error:
            assert str(error) and "\n" not in str(error)
            outcomes["refused"] += 1
            continue
        try:
            result = generate_all(lm, prompt, _cheap(cfg))
        except playground.PlaygroundError as error:  # e.g. a prompt longer than the context, text without a tokenizer
            assert str(error) and "\n" not in str(error)
            outcomes["refused"] += 1
            continue
        assert 1 <= len(result.token_ids) <= 4
        outcomes["ran"] += 1
    assert outcomes["ran"] >= 10 and outcomes["refused"] >= 100, outcomes  # both paths exercised (25 knobs now)


def _about(n: str, knob: str) -> bool:
    """Whether the note `n` speaks of `knob`: by its values (a keyed note names the knob there, its words name the
    page's control) or, for a note of the library, by the knob's identifier in its English."""
    from playground.app.notes import knob_word

    return (getattr(n, "values", {}).get("name") == knob or knob_word(knob, "en") in n or knob in n
            or knob.replace("_", " ") in n)


def test_clamped_random_settings_always_run_and_explain_themselves(lm):
    rng = random.Random("settings-clamp-fuzz")
    for _ in range(CASES // 3):
        cfg = _random_config(rng, [name for name in KNOB_NAMES if name not in KV_LAB])
        if cfg.weight_precision not in (None, *PRECISIONS):
            # clamp_settings (the app's) does not handle weight_precision yet: the page slice of issue 30 adds
            # it. The strict path is fuzzed above.
            cfg.weight_precision = None
        prompt = rng.choice([[3, 4, 5], list(range(1, 40))])
        clamped, notes = clamp_settings(cfg, lm, len(prompt))
        clamped.validate()
        assert all(isinstance(n, str) and n for n in notes)
        for knob in ("temperature", "top_p", "top_k", "num_beams", "max_new_tokens", "repetition_penalty"):
            before, after = getattr(cfg, knob), getattr(clamped, knob)
            if before != after and not (isinstance(before, float) and math.isnan(before)):
                assert any(_about(n, knob) for n in notes), (knob, before, after, notes)
        result = generate_all(lm, prompt, _cheap(clamped))
        assert 1 <= len(result.token_ids) <= 4
