"""Figures in the visitor's language: asked for `lang="zh"`, every builder and caption of `playground.viz` writes
its own words in 中文; asked for nothing, the English is exactly what it was.

Each case of tests/viz_cases.py is built three times (English, 中文, English again). The 中文 build
must show no English phrase of its module's string table and must show the 中文 of every string it
looked up; the English builds must match tests/viz_en_text.json, the text the builders drew before
the 中文 tables existed (regenerate it only when an English string is meant to change).
"""

from __future__ import annotations

import importlib
import json
import re
import string
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from playground import viz
from playground.viz._language import Texts, fields
from tests.viz_cases import CASES, readable_text, run_case

# Every viz module with words of its own (attention_stats computes numbers only).
MODULES = ("_common", "attention", "cache", "positional", "sampling", "attention_steps", "logit_lens", "kv_lesson",
           "positional_compare", "patterns", "sdpa", "anatomy", "training", "causal")
# Strings no builder draws today (kept as they were), and notes no analysis writes for that part.
UNUSED = {("attention_steps", ("key_axis",)), ("anatomy", ("positions_note", "relative")),
          ("anatomy", ("positions_note", "none"))}
# Terms the seeds write in Latin letters in Chinese text too, and units.
KEPT_AS_IS = {"KV", "RoPE", "LLaMA", "ALiBi", "PE", "SDPA", "FLOPs", "NLL", "logits", "token", "nats", "ms", "rad"}
GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "viz_en_text.json").read_text(encoding="utf-8"))

HANZI = re.compile(r"[\u4e00-\u9fff]")
WORD = re.compile(r"[A-Za-z]{2,}")
TAG = re.compile(r"</?[a-z]+>")
PLOTLY_FIELD = re.compile(r"%\{\{?([^{}]*)\}")


def module(name: str) -> Any:
    return importlib.import_module(f"playground.viz.{name}")


def leaves(table: Mapping[str, Any], path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    for key, value in table.items():
        if isinstance(value, Mapping):
            yield from leaves(value, path + (key,))
        else:
            yield path + (key,), value


def lookup(table: Mapping[str, Any], path: tuple) -> Any:
    for key in path:
        table = table[key]
    return table


def literal_parts(template: str) -> list[str]:
    """The text of a template between its {placeholders} and markup, stripped."""
    parts = []
    for literal, *_ in string.Formatter().parse(template):
        for piece in re.split(r"</?[a-z]+>|\*\*|`|<extra>.*?</extra>", literal):
            piece = piece.strip(" ,.;:()·—-+=×")
            if piece:
                parts.append(piece)
    return parts


def contains_phrase(text: str, phrase: str) -> bool:
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(phrase) + r"(?![A-Za-z0-9_])", text) is not None


# --- the tables ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODULES)
def test_every_string_has_both_languages_with_the_same_placeholders_and_markup(name):
    m = module(name)
    assert isinstance(m._T, Texts) and not hasattr(m, "TEXT_ZH")  # one table per language, read by the builders
    en, zh = dict(leaves(m._T("en"))), dict(leaves(m._T("zh")))
    assert en.keys() == zh.keys()
    md = MarkdownIt("commonmark")
    for path, english in en.items():
        chinese = zh[path]
        where = f"{name} {'/'.join(path)}"
        assert fields(english) == fields(chinese), where
        assert sorted(PLOTLY_FIELD.findall(english)) == sorted(PLOTLY_FIELD.findall(chinese)), where
        assert sorted(TAG.findall(english)) == sorted(TAG.findall(chinese)), where
        assert english.count("**") == chinese.count("**") and chinese.count("**") % 2 == 0, where
        assert english.count("`") == chinese.count("`"), where
        if "**" in chinese:  # bold must close next to CJK punctuation too (CommonMark's flanking rules)
            assert "**" not in md.render(chinese), where
        if chinese == english:  # only terms the 中文 tutorials keep as they are
            assert set(WORD.findall(" ".join(literal_parts(english)))) <= KEPT_AS_IS, f"{where} is not translated"


# --- every builder and caption, in both languages -----------------------------------------------------


class Recorded:
    """A module's `_T` that notes every string looked up, in whichever language (nested tables by their path)."""

    def __init__(self, texts: Texts, seen: set, owner: str) -> None:
        self.texts, self.seen, self.owner = texts, seen, owner

    def __call__(self, lang: str) -> Mapping:
        return Recording(self.texts(lang), self.seen, self.owner)


class Recording(Mapping):
    """One language's table that notes every string looked up."""

    def __init__(self, table: Mapping, seen: set, owner: str, path: tuple = ()) -> None:
        self.table, self.seen, self.owner, self.path = table, seen, owner, path

    def __getitem__(self, key: str) -> Any:
        value = self.table[key]
        if isinstance(value, Mapping):
            return Recording(value, self.seen, self.owner, self.path + (key,))
        self.seen.add((self.owner, self.path + (key,)))
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


@pytest.fixture(scope="module")
def chinese() -> dict[str, tuple[list[str], set]]:
    """Every case built in 中文: its text and the strings it looked up, by (module, path)."""
    out = {}
    texts = {owner: module(owner)._T for owner in MODULES}
    with pytest.MonkeyPatch.context() as patch:
        for name in CASES:
            seen: set = set()
            for owner in MODULES:
                patch.setattr(module(owner), "_T", Recorded(texts[owner], seen, owner))
            out[name] = readable_text(run_case(name, "zh")), seen
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_builder_draws_chinese_when_asked_and_unchanged_english_otherwise(name, chinese):
    english = readable_text(run_case(name))
    text, seen = chinese[name]
    again = readable_text(run_case(name))
    assert sorted(set(english)) == GOLDEN[name], "the English text changed"
    assert again == english, "building in 中文 changed the English built afterwards"
    owners = {CASES[name][0]} | {owner for owner, _ in seen}
    blob = "\n".join(text)
    flat = blob.replace("<br>", "").replace(" ", "")
    for owner in owners:
        m = module(owner)
        kept = "\n".join(s for _, s in leaves(m._T("zh")))  # terms the 中文 keeps (RoPE, KV, token, FLOPs …)
        for path, english_template in leaves(m._T("en")):
            if english_template != lookup(m._T("zh"), path) and WORD.search(english_template):
                assert english_template not in text, f"English {english_template!r} ({owner} {'/'.join(path)})"
            for phrase in literal_parts(english_template):
                if WORD.search(phrase) and phrase not in kept:
                    assert not contains_phrase(blob, phrase), f"English {phrase!r} ({owner} {'/'.join(path)})"
    shown_in_english = "\n".join(english)
    for owner, path in seen:
        words = [p for p in literal_parts(lookup(module(owner)._T("en"), path)) if WORD.search(p)]
        if words and not any(contains_phrase(shown_in_english, p) for p in words):
            continue  # looked up but not drawn for this input (e.g. "hidden by the mask" when nothing is hidden)
        for phrase in literal_parts(lookup(module(owner)._T("zh"), path)):
            if HANZI.search(phrase):  # a long title may be broken once (wrap_title): the phrase reads across it
                assert phrase in blob or phrase.replace(" ", "") in flat, \
                    f"中文 {phrase!r} ({owner} {'/'.join(path)}) is missing"
    assert seen, "the case looked up no string"
    if len(text) == 1 and "**" in text[0]:  # a caption: every bold phrase closes
        assert "**" not in MarkdownIt("commonmark").render(text[0]), "a bold phrase does not close"


def test_every_string_is_drawn_by_some_case(chinese):
    every = {(name, path) for name in MODULES for path, _ in leaves(module(name)._T("en"))}
    seen = set().union(*(s for _, s in chinese.values()))
    assert every - seen - UNUSED == set()


# --- the language argument ----------------------------------------------------------------------------


def test_a_builder_draws_english_by_default_the_language_it_is_asked_and_refuses_others():
    assert viz.attention_heatmap([[1.0]]).layout.title.text == "Attention"
    assert viz.attention_heatmap([[1.0]], lang="zh").layout.title.text == "注意力"
    assert viz.attention_heatmap([[1.0]], lang="en").layout.title.text == "Attention"
    with pytest.raises(ValueError, match="en, zh"):
        viz.attention_heatmap([[1.0]], lang="fr")
    assert viz.LANGUAGES == ("en", "zh") and not hasattr(viz, "language")  # no language outside the call


def test_titles_passed_in_are_drawn_as_given():
    fig = viz.attention_heatmap([[1.0]], title="head 3 of layer 2", lang="zh")
    steps = viz.cache_growth([1], [1], [1], [1], title="KV", lang="zh")
    assert fig.layout.title.text == "head 3 of layer 2" and fig.layout.xaxis.title.text == "键 (key)"
    assert steps.layout.title.text == "KV"


def test_mismatched_tables_are_refused():
    with pytest.raises(ValueError, match="missing"):
        Texts({"a": "x", "b": "y"}, {"a": "甲"})
    with pytest.raises(ValueError, match="placeholders"):
        Texts({"a": "{n} heads"}, {"a": "{m} 个头"})


def test_two_threads_drawing_in_different_languages_at_once_each_get_their_own():
    rounds = 20
    barrier = threading.Barrier(2)
    titles: dict[str, list[str]] = {"en": [], "zh": []}
    errors: list[BaseException] = []

    def draw(lang: str) -> None:
        try:
            for _ in range(rounds):
                barrier.wait(timeout=10)  # both threads draw at the same moment
                fig = viz.head_summary([[0.5, 0.2]], [[1.0, 2.0]], lang=lang)
                formula = viz.kv_formula(dict.fromkeys(("layers", "batch", "kv_heads", "tokens", "head_dim",
                                                        "element_size"), 1), lang=lang)
                titles[lang].append(f"{fig.layout.title.text}|{fig.layout.xaxis.title.text}|{formula}")
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=draw, args=(lang,)) for lang in ("zh", "en")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert titles["en"] == ["Heads at a glance|head|**2 · N_layers · B · h_kv · T · d_head · bytes**  \n"
                            "= 2 · 1 · 1 · 1 · 1 · 1 · 1 = **2 bytes** (2 B)"] * rounds
    assert titles["zh"] == ["各注意力头一览|头|**2 · N_layers · B · h_kv · T · d_head · 字节数**  \n"
                            "= 2 · 1 · 1 · 1 · 1 · 1 · 1 = **2 字节**(2 B)"] * rounds
