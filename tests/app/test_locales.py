"""One source of words: the locale files (playground/locales/en.json, zh.json) hold every word of the page and
the figures, with the same keys and placeholders in both languages, and the figures drawn in 中文 keep no
English word.

The rule for Latin letters in 中文 figure text (title, axes, legend, hover, annotations, captions):
a Latin word may stay only if it is
  1. a name, unit, symbol or term the seeds' Chinese tutorials write in Latin letters too (the allow-list
     below: KV, RoPE, MLP, token, logit, softmax, ms, GB, …);
  2. an identifier: a formula symbol or tensor name with "_", "." or a digit in it (d_head, W_O, q.weight,
     float32);
  3. inside parentheses right after Chinese, as the English term beside its translation: "预填充 (Prefill)".
Anything else (e.g. "KV Cache", "Prefill", "Decode" standing alone) is a word left untranslated.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from playground import locales
from playground.app.words import STRINGS, t
from tests.viz_cases import CASES, readable_text, run_case

ROOT = Path(__file__).resolve().parents[2]
HANZI = "\u4e00-\u9fff"

# 1. Names, units, symbols and the seeds' Latin terms (as written in the 中文 tutorials).
ALLOWED = {
    # architecture names and abbreviations
    "KV", "MHA", "GQA", "MQA", "MLP", "RoPE", "ALiBi", "PE", "SDPA", "LLaMA", "Transformer", "Pre-LN", "Post-LN",
    "LayerNorm", "RMSNorm", "AdamW", "PyTorch", "CUDA", "cuda", "BOS", "EOS", "LM", "KL", "NLL", "FLOPs", "QK",
    # the seeds' terms kept in Latin letters
    "token", "logit", "Logit", "logits", "softmax", "Top-k", "Top-p", "Min-p", "id",
    # units and maths
    "ms", "nats", "rad", "kB", "KiB", "MiB", "GiB", "GB", "sin", "cos", "log",
    # the block's equations name the model's own modules (analysis.anatomy.wiring)
    "SelfAttention", "CrossAttention", "Norm",
    # tensor names in the anatomy hover ("weight 8×8") and the inputs' own names (families, recipes, presets)
    "weight", "llama", "bart", "lm", "preset",
}
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*[A-Za-z0-9]|[A-Za-z]{2,}")
IDENTIFIER = re.compile(r"[_.0-9]")
BESIDE_CHINESE = re.compile(rf"(?<=[{HANZI}]) ?[(（][^()（）]*[)）]")
MARKUP = re.compile(r"%\{[^}]*\}|<[^>]+>|`[^`]*`|\*\*")


def leaves(table: Mapping[str, Any], path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    for key, value in table.items():
        if isinstance(value, Mapping):
            yield from leaves(value, path + (key,))
        else:
            yield path + (key,), value


def placeholders(template: str) -> set[str]:
    return {f"{name}:{spec}" for _, name, spec, _ in string.Formatter().parse(template) if name is not None}


def untranslated(text: str) -> list[str]:
    """The Latin words of one 中文 string that the rule above does not allow."""
    text = BESIDE_CHINESE.sub(" ", MARKUP.sub(" ", text))
    return [w for w in WORD.findall(text) if w not in ALLOWED and not IDENTIFIER.search(w)]


def test_both_languages_have_every_key_with_the_same_placeholders():
    raw = {lang: json.loads((ROOT / "playground" / "locales" / f"{lang}.json").read_text(encoding="utf-8"))
           for lang in locales.LANGUAGES}
    en, zh = dict(leaves(raw["en"])), dict(leaves(raw["zh"]))
    assert en.keys() == zh.keys(), sorted(en.keys() ^ zh.keys())
    assert {path[0] for path in en} == {"page", "figures", "notes", "knobs"}
    for path, english in en.items():
        where = "/".join(path)
        assert isinstance(english, str) and isinstance(zh[path], str), where
        assert bool(english.strip()) == bool(zh[path].strip()), where  # empty only where both say nothing
        assert placeholders(english) == placeholders(zh[path]), where
        assert sorted(re.findall(r"%\{[^}]*\}", english)) == sorted(re.findall(r"%\{[^}]*\}", zh[path])), where


def test_the_page_words_and_the_figure_words_come_from_the_files():
    raw = locales.load("zh")
    assert STRINGS["kv_title"] == (locales.load("en")["page"]["kv_title"], raw["page"]["kv_title"])
    assert t("kv_title", "zh") == "KV 缓存" and t("step_of", "zh", step=3, n=8) == "第 3 步 / 共 8 步"
    from playground.viz import cache

    assert cache._T("zh") == raw["figures"]["cache"]
    assert cache._T("zh")["growth_title"] == raw["figures"]["cache"]["growth_title"]
    with pytest.raises(ValueError, match="en, zh"):
        locales.load("fr")


def test_the_locale_files_are_package_data():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "*.json" in project["tool"]["setuptools"]["package-data"]["playground.locales"]
    assert not list((ROOT / "playground").rglob("lab_words.py"))  # no second home for words


def test_the_rule_catches_words_left_in_english():
    assert untranslated("KV Cache 显存") == ["Cache"]
    assert untranslated("Prefill(第 1 步)") == ["Prefill"]
    assert untranslated("预填充 (Prefill) 与解码 (Decode)") == []
    assert untranslated("2 · N_layers · d_head · 字节数, q.weight 8×8, 12 ms") == []


@pytest.mark.parametrize("name", list(CASES))
def test_every_figure_and_caption_in_chinese_keeps_no_english_word(name):
    text = readable_text(run_case(name, "zh"))
    left = sorted({w for s in text for w in untranslated(s)})
    assert not left, f"{name}: English left in 中文: {left}"


@pytest.mark.parametrize("key", ["kv_title", "tab_cache", "lesson_kv", "rate", "kv_off", "tagline"])
def test_the_page_says_kv_cache_and_prefill_in_chinese(key):
    assert not re.search(r"\bCache\b|\bPrefill\b|\bDecode\b", t(key, "zh")), t(key, "zh")
