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
    script = (__import__("pathlib").Path(__file__).resolve().parents[2] / "playground/ui/assets/live.js").read_text()
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
# Latin words a 中文 note may keep: knob and config names, their values, units, names of formats and products.
KEPT_LATIN = {"min-p", "top-k", "top-p", "Min-p", "Top-k", "Top-p", "KV", "forced_bos_token_id", "true", "false",
              "never", "BOS", "token", "NaN", "float32", "MiB", "safetensors", "Hub", "owner/name", "fr", "fr_XX",
              "fra_Latn", "CPU", "GPU", "ZeroGPU", "Space", "Hugging", "Face", "int8", "int4", "bfloat16", "float16",
              "ngram", "layer", "K", "model", "name", "linear", "ntk", "yarn", "RoPE", "CacheBlend"}
# The notes whose words are the page's (in words.STRINGS): walked too.
OLDER_NOTE_KEYS = ("empty_prompt", "seed_drawn", "pace_capped", "chat_unavailable", "prompt_cut", "prompt_tokens_cut",
                   "numbers_nonfinite", "numbers_overflow", "numbers_uniform", "zerogpu_quota", "zerogpu_busy",
                   "zerogpu_failed")


def test_every_note_key_reads_in_chinese_with_the_same_values():
    """Each note's 中文 words (the placeholders taken out) hold Chinese and no English but names and units."""
    from playground.app.notes import NOTE_WORDS

    for key, (en, zh) in {**NOTE_WORDS, **{k: STRINGS[k] for k in OLDER_NOTE_KEYS}}.items():
        assert set(re.findall(r"\{(\w+)", en)) == set(re.findall(r"\{(\w+)", zh)), key
        words = re.sub(r"\{\w+(:[^}]*)?\}", " ", zh)
        assert CJK.search(words) or key.startswith("bounds_"), key
        latin = set(re.findall(r"[A-Za-z][A-Za-z0-9_/\-]*", words.replace(".safetensors", " safetensors")))
        assert latin <= KEPT_LATIN, (key, sorted(latin - KEPT_LATIN))


# The library's identifiers of the knobs and flags ("temperature" and "seed" are English words as well): a page
# note names the control instead ("Top-k", "束宽").
KNOB_ID = re.compile(r"\b(max_new_tokens|top_k|top_p|min_p|num_beams|repetition_penalty|length_penalty|"
                     r"top_candidates|early_stopping|use_cache|capture_\w+|attention_layers|truncate_prompt)\b")
LINK_PAIR = re.compile(r"\b\w+=\S*")  # a link's own `name=value`, quoted as the visitor's link has it


def test_a_page_note_names_each_knob_as_its_control_does():
    """Every note that can name a knob, with every knob, in both languages: the control's name (as the page's
    label says it), never the identifier; and the page's other words (figures, messages) never use one either."""
    from playground.app.notes import KNOB_NOTES, NOTE_WORDS, note, render
    from playground.locales import LANGUAGES, load, section

    knobs = section("knobs")
    KNOB_WORDS = {name: (en, knobs["zh"][name]) for name, en in knobs["en"].items()}  # noqa: N806 - a table
    for name, (en, zh) in KNOB_WORDS.items():
        if name in STRINGS:  # the knob has a control on the page: its note word is the label's beginning
            assert t(name, "en").startswith(en.split(" α")[0]) and t(name, "zh").startswith(zh.split(" α")[0]), name
        for key in KNOB_NOTES:
            values = {v: 1 for v in re.findall(r"\{(\w+)", NOTE_WORDS[key][0])} | {"name": name}
            for lang in ("en", "zh"):
                shown = render(note(key, **values), lang)
                assert (en if lang == "en" else zh) in shown and not KNOB_ID.search(shown), (key, name, shown)
    for key, (en, zh) in NOTE_WORDS.items():
        assert not KNOB_ID.search(en) and not KNOB_ID.search(zh), key

    def texts(value):
        if isinstance(value, dict):
            for k, v in value.items():
                if k not in KNOB_WORDS and not k.startswith("stage_"):  # a control's own label, keyed by its knob
                    yield from texts(v)
        elif isinstance(value, str):
            yield value

    for lang in LANGUAGES:
        found = [s for s in texts(load(lang)) if KNOB_ID.search(LINK_PAIR.sub(" ", s))]
        assert not found, (lang, found)


def _notes_of_every_kind(tmp_path) -> list:
    from playground.app.fields import MAX_EDITS
    from playground.app.limits import Caps, clamp_settings
    from playground.app.settings import from_query
    from playground.app.uploads import EVICTED
    from playground.checkpoints.loader import load_model
    from playground.generation import GenerationConfig, plan
    from playground.interventions import Ablate, pack
    from tests.ui.test_hostile_links import NESTED
    from tests.ui_fixtures import save_tiny_decoder, save_tiny_seq2seq

    lm = load_model(save_tiny_decoder(tmp_path / "d"))
    s2s = load_model(save_tiny_seq2seq(tmp_path / "s.safetensors"))
    notes = []
    for cfg in (GenerationConfig(top_k=10**6, max_new_tokens=5000, num_beams=3, temperature=0.7),
                GenerationConfig(max_new_tokens=250), GenerationConfig(max_new_tokens=4),
                GenerationConfig(temperature=-1.0, top_p=7.0, repetition_penalty=0.0, top_candidates=-3, seed=-4,
                                 early_stopping="maybe", chat="yes", max_new_tokens=2.5)):
        notes += clamp_settings(cfg, lm, 3 if cfg.max_new_tokens != 4 else 0, Caps(max_new_tokens=300))[1]
    notes += clamp_settings(GenerationConfig(max_new_tokens=100), s2s, 200)[1]
    notes += list(plan(lm, [5] * 300, GenerationConfig(max_new_tokens=8, truncate_prompt=True)).notes)
    notes += from_query({"evil": "1", "top_p": "7", "mode": "telepathy", "seed": "1.5", "temperature": "inf",
                         "top_k": "abc", "chat": "maybe", "branches": "x:y", "target_lang": "!!",
                         "prompt": "x" * 5000})[1]
    for edits in (NESTED, pack([Ablate(0, head=0)] * (MAX_EDITS + 1)), "not-a-pack"):
        notes += from_query({"edits": edits})[1]
    return notes + [EVICTED]


def test_every_note_the_app_can_show_is_keyed_and_reads_in_chinese(tmp_path):
    """Clamp, plan, link and storage notes are keyed notes: rendered in 中文 from their key and values (never by
    matching the English afterwards), and in English exactly as the library and the app write them."""
    from playground.app.notes import known, render
    from playground.notes import Note

    notes = _notes_of_every_kind(tmp_path)

    def keys(n: Note) -> set[str]:  # a note's key and the keys of the notes inside it (a reason, a range)
        return {n.key}.union(*(keys(v) for v in n.values.values() if isinstance(v, Note)))

    assert len(notes) >= 25 and len(set().union(*map(keys, notes))) >= 28
    for text in notes:
        assert isinstance(text, Note) and known(text.key), text
        zh = render(text, "zh")
        assert CJK.search(zh) and zh != text, text
        en = render(text, "en")
        # the app's English is the note's own text; a library note that names a knob by its identifier (for
        # scripts) reads on the page with the control's name
        assert en == text or KNOB_ID.search(text), text
        for shown in (en, zh):
            assert not KNOB_ID.search(LINK_PAIR.sub(" ", shown)), shown
        assert "could not convert" not in text and "invalid literal" not in text


def test_the_model_card_structure_reads_in_chinese(tmp_path):
    from playground.app import describe
    from playground.checkpoints.loader import load_model
    from tests.ui_fixtures import save_tiny_decoder, save_tiny_seq2seq

    lm = load_model(save_tiny_decoder(tmp_path / "d"))
    s2s = load_model(save_tiny_seq2seq(tmp_path / "s.safetensors"))
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
