"""The shipped default checkpoints: they load, and they do what weights/README.md says they do."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import playground
from playground.checkpoints.safetensors_io import read_header
from playground.train import dates, lm, text_data
from playground.train.tokenizer_build import END_OF_TEXT

WEIGHTS = Path(__file__).resolve().parents[2] / "weights"
TINY_LM, TINY_SEQ2SEQ = WEIGHTS / "tiny-lm", WEIGHTS / "tiny-seq2seq"
MAX_BYTES = 15 * 1024 * 1024
TEST_SEED = 5_550_123  # never used by training, validation or the README's report


pytestmark = pytest.mark.usefixtures("one_thread")


def _provenance(directory: Path) -> dict:
    return json.loads(read_header(directory / "model.safetensors").metadata["provenance"])


@pytest.mark.parametrize("directory", [TINY_LM, TINY_SEQ2SEQ], ids=["tiny-lm", "tiny-seq2seq"])
def test_default_checkpoint_is_small_documented_and_loads(directory):
    file = directory / "model.safetensors"
    assert file.stat().st_size <= MAX_BYTES
    record = _provenance(directory)
    for key in ("data_source", "command", "seed", "steps", "final_metrics"):
        assert key in record, key
    assert record["command"].startswith("python -m playground.train ")
    loaded = playground.load_model(directory)
    assert loaded.tokenizer is not None and loaded.tokenizer_error is None
    assert loaded.parameter_count > 0


def test_tiny_lm_is_llama_style():
    c = playground.load_model(TINY_LM).config
    assert (c.kind, c.family, c.positional, c.norm, c.mlp, c.activation) == (
        "decoder", "llama", "rope", "rmsnorm", "gated", "silu")
    assert c.n_kv_heads < c.n_heads and c.tie_word_embeddings


def test_tiny_seq2seq_is_the_original_transformer():
    c = playground.load_model(TINY_SEQ2SEQ).config
    assert (c.kind, c.family, c.positional, c.norm, c.norm_position, c.mlp, c.activation) == (
        "seq2seq", "transformer", "sinusoidal", "layernorm", "post", "plain", "relu")


def test_tiny_lm_held_out_perplexity_is_far_below_unigram():
    loaded = playground.load_model(TINY_LM)
    split = text_data.load_split()
    held = lm.token_stream(loaded.tokenizer, split.held_out)
    windows = lm.eval_windows(held, loaded.config.max_positions, 3000)
    ppl = math.exp(lm.held_out_nll(loaded.model, windows))
    train_ids = lm.token_stream(loaded.tokenizer, split.train)
    unigram = math.exp(lm.unigram_nll(train_ids, windows[:, 1:], loaded.config.vocab_size))
    assert ppl < 0.4 * unigram, (ppl, unigram)


def test_tiny_lm_generates_text():
    loaded = playground.load_model(TINY_LM)
    text = lm.sample(loaded.model, loaded.tokenizer, "The import statement", max_new_tokens=20, temperature=0)
    assert len(text.strip()) > 10 and END_OF_TEXT not in text


def _greedy_outputs(loaded, sources: list[str]) -> list[str]:
    """Greedy outputs through the generation engine, checked against the training module's own loop."""
    from playground import generation
    from playground.train import seq2seq

    cfg = generation.GenerationConfig(max_new_tokens=16, temperature=0.0)
    engine = [loaded.detokenize(generation.generate_all(loaded, s, cfg).token_ids, skip_special_tokens=True)
              for s in sources]
    assert engine[:8] == seq2seq.greedy(loaded.model, loaded.tokenizer, sources[:8])  # two loops, one model
    return engine


def test_tiny_seq2seq_normalises_fresh_dates():
    loaded = playground.load_model(TINY_SEQ2SEQ)
    pairs = dates.examples(200, TEST_SEED)
    outputs = _greedy_outputs(loaded, [s for s, _ in pairs])
    wrong = [(s, want, got) for (s, want), got in zip(pairs, outputs) if got != want]
    assert len(wrong) <= 4, wrong  # >= 98% exact match
    assert _greedy_outputs(loaded, ["3rd of March 2021", "Mar 3, '21", "2021年3月3日"]) == ["2021-03-03"] * 3
