"""Text the panels show: the model card, notes, captions; nothing from a checkpoint is ever markup."""

from __future__ import annotations

import pytest

from playground.app import describe
from playground.generation import Candidate, StepCapture, TokenStep

HOSTILE = '<img src=x onerror=alert(1)><form action="https://evil"><input type=password></form>'
INFO = {
    "family": HOSTILE, "kind": "decoder", "parameters": 2016960, "positional_encoding_label": "RoPE (rotary, base 10000)",
    "dtype": "float32", "device": "cpu", "file_bytes": 8_100_000, "load_seconds": 0.12, "chat_template": False,
    "tokenizer_error": HOSTILE,
    "config": {"n_heads": 4, "n_kv_heads": 2, "n_layers": 4, "head_dim": 48, "d_model": 192, "d_ff": 512,
               "mlp": "gated", "activation": "silu", "norm": "rmsnorm", "norm_position": "pre", "vocab_size": 2048,
               "max_positions": 128, "tie_word_embeddings": True},
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_model_card_escapes_every_value_from_the_file(lang):
    card = describe.model_card_html(INFO, "upload/<script>", lang)
    assert "<img" not in card and "<form" not in card and "<input" not in card and "<script>" not in card
    assert "&lt;img src=x onerror=alert(1)&gt;" in card and "upload/&lt;script&gt;" in card
    assert "2,016,960" in card and "GQA" in card and card.startswith("<table")
    assert ("Parameters" if lang == "en" else "参数量") in card


def test_notes_are_escaped_and_labelled():
    md = describe.notes_markdown(["top_k 500 is more than <b>", "second"], "en")
    assert md.count("- **Note:**") == 2 and "&lt;b&gt;" in md
    assert describe.notes_markdown([], "en") == ""
    assert "注意" in describe.notes_markdown(["x"], "zh")


def _step(**kw) -> TokenStep:
    cands = [Candidate(5, "a", 1.0, 0.6, 0.6, 0.6, 0.7, None, True, {"raw": 0.6, "top_k": 0.7}),
             Candidate(9, "<b>", 0.5, 0.3, 0.3, 0.3, 0.0, "top_k", False, {"raw": 0.3, "top_k": 0.0})]
    return TokenStep(**{"step": 3, "token_id": 5, "token_text": "a", "prob": 0.7, "candidates": cands,
                        "source_beam": None, "capture": StepCapture(), **kw})


def test_captions_and_funnel_items_describe_the_step():
    caption = describe.step_caption(_step())
    assert caption.startswith("Step 4: chose 'a' (id 5) with probability 0.700")  # step index 3, counted from 1 and "1 of the top 2 removed" in caption
    assert "from beam 2" in describe.step_caption(_step(source_beam=2))
    items = describe.funnel_items(_step())
    assert items[0]["chosen"] and not items[1]["chosen"] and items[1]["removed_by"] == "top_k"
    assert items[1]["token"] == "<b>"  # plotly escapes it when drawing (viz.display_token)
    assert "&lt;b&gt;" in describe.step_caption(_step(token_text="<b>"))


def test_cache_markdown_fills_in_the_formula():
    cache = {"tokens": 10, "max_tokens": 40, "bytes": 30720, "allocated_bytes": 122880, "mha_equivalent_bytes": 61440,
             "layers": 4, "batch": 1, "kv_heads": 2, "head_dim": 48, "element_size": 4,
             "per_layer": [{"k_shape": [1, 2, 10, 48]}] * 4}
    md = describe.cache_markdown(cache, "en")
    assert "30.00 KiB" in md and "120.00 KiB" in md and "2 · N_layers" in md and "(1, 2, 10, 48) × 4 layers" in md
    assert "K 和 V" in describe.cache_markdown(cache, "zh")
