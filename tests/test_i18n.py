"""Every string exists in English and 中文, with the same placeholders; the live screen has its own."""

from __future__ import annotations

import re

import pytest

from playground.app.words import LIVE_KEYS, STRINGS, language, live_strings, t


def test_every_string_has_both_languages_with_the_same_placeholders():
    for key, (en, zh) in STRINGS.items():
        assert en.strip() and zh.strip(), key
        assert set(re.findall(r"\{(\w+)\}", en)) == set(re.findall(r"\{(\w+)\}", zh)), key


def test_chinese_uses_the_seeds_terms():
    for key, term in (("kind_cross", "交叉注意力"), ("tab_positional", "位置编码"), ("mode_beam", "束搜索"),
                      ("mode_greedy", "贪心"), ("temperature", "温度"), ("kv_title", "KV Cache")):
        assert term in t(key, "zh"), key


def test_the_live_screen_gets_every_key_it_uses():
    strings = live_strings()
    assert set(strings) == {"en", "zh"} and set(strings["en"]) == set(LIVE_KEYS) == set(strings["zh"])
    script = (__import__("pathlib").Path(__file__).resolve().parents[1] / "playground/ui/assets/live.js").read_text()
    used = set(re.findall(r'tr\("(\w+)"', script)) | {f"stage_{s}" for s in ("raw", "top_k", "top_p")} | {
        f"reason_{r}" for r in ("eos", "length", "stop_string")}
    used = {k for k in used if not k.startswith(("stage_", "reason_", "att_")) or k in STRINGS}
    assert used <= set(LIVE_KEYS), sorted(used - set(LIVE_KEYS))


@pytest.mark.parametrize("code, lang", [("zh", "zh"), ("zh-CN", "zh"), ("en", "en"), ("fr", "en"), (None, "en")])
def test_language_codes(code, lang):
    assert language(code) == lang


def test_formatting():
    assert t("status_running", "en", n=3) == "Generating… 3 tokens so far"
    assert t("status_running", "zh", n=3) == "正在生成……已生成 3 个 token"
