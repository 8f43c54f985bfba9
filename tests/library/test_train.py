"""The training recipe and its two tasks, on tiny configs (a few dozen steps each)."""

from __future__ import annotations

import datetime as dt
import json
import math
import random

import pytest
import torch
import torch.nn.functional as F

from playground.checkpoints.loader import load_model
from playground.checkpoints.own_format import save_checkpoint
from playground.checkpoints.safetensors_io import read_header
from playground.train import dates, lm, text_data
from playground.train.recipe import IGNORE, Recipe, label_smoothed_loss, lr_factor, train
from playground.train.tokenizer_build import char_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def _falls(losses: list[float], by: float = 0.5) -> bool:
    """The mean of the last five losses is at least `by` nats below the mean of the first five."""
    return sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - by


# --- recipe pieces

def test_warm_up_then_decay():
    r = Recipe(steps=100, warmup=10, schedule="inverse_sqrt")
    factors = [lr_factor(s, r) for s in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(factors[:9], factors[1:10]))  # linear rise
    assert factors[39] == pytest.approx(math.sqrt(10 / 40))  # then 1/sqrt(step)
    c = Recipe(steps=100, warmup=10, schedule="cosine", min_lr_ratio=0.1)
    cos = [lr_factor(s, c) for s in range(100)]
    assert cos[9] == pytest.approx(1.0) and cos[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(cos[9:], cos[10:]))


def test_label_smoothed_loss_is_torchs_definition_and_ignores_padding():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    targets[1, 3:] = IGNORE
    loss, nll, n = label_smoothed_loss(logits, targets, 0.1)
    want = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, label_smoothing=0.1)
    plain = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(nll, plain)
    assert n == 8


# --- data

def test_text_split_is_deterministic_and_disjoint():
    a, b = text_data.load_split(), text_data.load_split()
    assert a == b
    assert a.train_chars > 300_000 and 0.05 < a.held_out_chars / (a.train_chars + a.held_out_chars) < 0.2
    held = {p for doc in a.held_out for p in doc.split("\n\n")}
    assert all(text_data.is_held_out(p) for p in held)


def test_dates_are_seeded_correct_and_varied():
    assert dates.examples(50, 7) == dates.examples(50, 7) != dates.examples(50, 8)
    pairs = dates.examples(3000, 11)
    for _, iso in pairs:
        assert dates.FIRST <= dt.date.fromisoformat(iso) <= dates.LAST
    assert len({text[:3] for text, _ in pairs}) > 100  # many surface forms
    d, r = dt.date(2021, 3, 3), random.Random(0)
    assert dates.FORMATS["ordinal of month"](d, r) == "3rd of March 2021"
    assert dates.FORMATS["chinese"](d, r) == "2021年3月3日"
    assert dates.FORMATS["mm/dd/yyyy"](d, r) == "03/03/2021"
    assert dates.FORMATS["weekday, d month yyyy"](d, r) == "Wednesday, 3 March 2021"
    assert dates.FORMATS["mon d, 'yy"](d, random.Random(1)).endswith(" 3, '21")
    assert dates.FORMATS["m/d/yy"](dt.date(1987, 7, 4), r) == "7/4/87"  # 87 -> 1987 by the pivot
    assert [dates.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"]


def test_char_tokenizer_round_trips_every_generated_source():
    tok = char_tokenizer(dates.ALPHABET)
    for text, _iso in dates.examples(300, 3):
        ids = tok.encode(text)
        assert ids[-1] == tok.eos_token_id and tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.encode("2021-03-03")[:-1] == [tok.convert_tokens_to_ids(c) for c in "2021-03-03"]


# --- the LM recipe

def _tiny_lm(seed: int = 0, steps: int = 40):
    data = lm.prepare_data(320, max_docs=6)
    config = lm.lm_config(len(data.tokenizer), d_model=48, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, context=32)
    model = lm.new_model(config, seed)
    recipe = Recipe(steps=steps, lr=1e-2, warmup=5, seed=seed, eval_every=steps)
    windows = lm.eval_windows(data.held_out_ids, 32, 512)
    result = train(
        model, recipe, lm.batch_fn(data.train_ids, 8, 32, seed), lambda m, x: m(*x),
        evaluate=lambda m: {"held_out_nll": lm.held_out_nll(m, windows)},
    )
    return model, config, data, result


def test_lm_recipe_loss_falls_and_is_reproducible(tmp_path):
    model, config, data, result = _tiny_lm()
    assert _falls(result.losses), result.losses
    assert all(row["grad_norm"] == row["grad_norm"] for row in result.history)  # finite
    _, _, _, again = _tiny_lm()
    assert again.losses == result.losses  # same seed, same run
    # The checkpoint round-trips through load_model with its tokenizer and provenance.
    path = save_checkpoint(tmp_path / "lm.safetensors", model, config, tokenizer=data.tokenizer,
                           provenance={"seed": 0, "steps": 40})
    loaded = load_model(path)
    assert loaded.kind == "decoder" and json.loads(read_header(path).metadata["provenance"])["steps"] == 40
    ids = loaded.tokenize("The assert statement")
    assert loaded.detokenize(ids) == "The assert statement"
    torch.testing.assert_close(loaded.logits(torch.tensor([ids])), model(torch.tensor([ids])))


# --- the seq2seq recipe

def _tiny_seq2seq(seed: int = 0, steps: int = 40):
    from playground.train import seq2seq

    tok = seq2seq.make_tokenizer()
    config = seq2seq.seq2seq_config(len(tok), d_model=32, layers=1, encoder_layers=1, heads=2, d_ff=64)
    model = seq2seq.new_model(config, seed)
    recipe = Recipe(steps=steps, lr=3e-3, warmup=10, schedule="inverse_sqrt", seed=seed, eval_every=steps)
    result = train(
        model, recipe, seq2seq.batch_fn(tok, 16, seed), lambda m, x: m(x[0], x[1], attention_mask=x[2]),
    )
    return model, config, tok, result


def test_seq2seq_recipe_loss_falls_and_is_reproducible(tmp_path):
    from playground.train import seq2seq

    model, config, tok, result = _tiny_seq2seq()
    assert _falls(result.losses), result.losses
    _, _, _, again = _tiny_seq2seq()
    assert again.losses == result.losses
    path = save_checkpoint(tmp_path / "s2s.safetensors", model, config, tokenizer=tok, provenance={"seed": 0})
    loaded = load_model(path)
    assert loaded.kind == "seq2seq"
    src = loaded.tokenize("3rd of March 2021")
    assert src[-1] == config.eos_token_id
    dec = torch.tensor([[config.decoder_start_token_id, *tok.encode("2021")[:-1]]])
    with torch.no_grad():
        torch.testing.assert_close(loaded.logits(torch.tensor([src]), dec), model(torch.tensor([src]), dec))
    # The training-side greedy loop and cross-attention capture run on the trained model.
    outputs = seq2seq.greedy(model, tok, ["3rd of March 2021", "03/03/2021"])
    assert len(outputs) == 2 and all(isinstance(o, str) for o in outputs)
    weights = seq2seq.cross_attention(model, tok, "3rd of March 2021", "2021-03-03")
    assert weights.shape[:3] == (1, 2, 11)
