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
                      ("mode_greedy", "贪心"), ("temperature", "温度"), ("kv_title", "KV 缓存")):
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


CJK = re.compile(r"[\u4e00-\u9fff]")


def test_every_note_the_app_can_show_reads_in_chinese(tmp_path):
    """Clamp, plan, link and model-card texts made in English below the app are shown in 中文 too."""
    from playground.app import describe
    from playground.app.limits import Caps, clamp_settings
    from playground.app.settings import from_query
    from playground.app.words import note
    from playground.checkpoints.loader import load_model
    from playground.generation import GenerationConfig, plan
    from tests.ui_fixtures import save_tiny_decoder, save_tiny_seq2seq

    lm = load_model(save_tiny_decoder(tmp_path / "d"))
    s2s = load_model(save_tiny_seq2seq(tmp_path / "s.safetensors"))
    notes = []
    for cfg in (GenerationConfig(top_k=10**6, max_new_tokens=5000, num_beams=3, temperature=0.7),
                GenerationConfig(max_new_tokens=250), GenerationConfig(max_new_tokens=4)):
        notes += clamp_settings(cfg, lm, 3 if cfg.max_new_tokens != 4 else 0, Caps(max_new_tokens=300))[1]
    notes += clamp_settings(GenerationConfig(max_new_tokens=100), s2s, 200)[1]
    notes += list(plan(lm, [5] * 300, GenerationConfig(max_new_tokens=8, truncate_prompt=True)).notes)
    notes += from_query({"evil": "1", "top_p": "7", "mode": "telepathy", "seed": "1.5", "temperature": "inf",
                         "chat": "maybe", "prompt": "x" * 5000})[1]
    from playground.app.settings import MAX_EDITS
    from playground.interventions import Ablate, pack
    from playground.ui.catalog import EVICTED
    from tests.test_hostile_links import NESTED

    for edits in (NESTED, pack([Ablate(0, head=0)] * (MAX_EDITS + 1)), "not-a-pack"):
        notes += from_query({"edits": edits})[1]
    notes.append(EVICTED)
    assert len(notes) >= 16
    for text in notes:
        zh = note(text, "zh")
        assert CJK.search(zh) and zh != text, text
        assert note(text, "en") == text
    for info in (lm.info(), s2s.info()):
        for key, value in describe.model_card_rows(info, "m", "zh"):
            assert not re.search(r"\b(full|sliding|rotary|sinusoidal|gated|plain|pre-norm|post-norm|base)\b", value), \
                (key, value)


@pytest.mark.parametrize("header, lang", [
    ("zh-CN,zh;q=0.9,en;q=0.8", "zh"), ("zh-TW", "zh"), ("en-US,en;q=0.9,zh-CN;q=0.8", "en"),
    ("fr-FR,fr;q=0.9,zh;q=0.5,en;q=0.4", "zh"), ("fr-FR,de;q=0.5", "en"), ("en;q=0.2,zh;q=0.7", "zh"),
    ("zh;q=0", "en"), ("zh;q=abc,en", "en"), ("", "en"), (None, "en"),
])
def test_the_browser_s_language_picks_the_page_s_when_the_link_names_none(header, lang):
    from playground.app.words import browser_language

    assert browser_language(header) == lang
