"""The tokenizer view under the prompt box: the ids a run reads, byte tokens put back into their characters."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.app.limits import CAPS
from playground.app.tokens_view import PromptToken, explain, html, read_prompt, spell
from playground.checkpoints.loader import load_model
from tests.ui_fixtures import save_tiny_decoder

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "中国的首都是哪里?"  # each Chinese character is 3 UTF-8 bytes; the question mark is ASCII
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant: {% endif %}")


def byte_token(*raw: int) -> PromptToken:
    return PromptToken(0, "".join(f"<0x{b:02X}>" for b in raw), "byte", bytes(raw))


def spelled(*tokens: PromptToken) -> list[tuple[str, bytes, list[int]]]:
    return [(c.char, c.raw, c.tokens) for c in spell(list(tokens))]


def test_utf8_is_read_across_token_boundaries():
    guo, zhong = "国".encode(), "中".encode()  # E5 9B BD, E4 B8 AD
    # one byte a token (SentencePiece's byte fallback), two then one (SmolLM2's byte-level BPE)
    assert spelled(*(byte_token(b) for b in guo)) == [("国", guo, [0, 1, 2])]
    assert spelled(byte_token(*guo[:2]), byte_token(guo[2])) == [("国", guo, [0, 1])]
    # a token holding the end of one character and the start of the next
    assert spelled(byte_token(*guo[:2]), byte_token(guo[2], zhong[0]), byte_token(*zhong[1:])) == [
        ("国", guo, [0, 1]), ("中", zhong, [1, 2])]
    # ASCII inside a byte token needs no spelling out; a four-byte emoji over four tokens does
    emoji = "🙂".encode()
    assert spelled(byte_token(0x61, *guo[:1]), byte_token(*guo[1:])) == [("国", guo, [0, 1])]
    assert spelled(*(byte_token(b) for b in emoji)) == [("🙂", emoji, [0, 1, 2, 3])]
    # bytes that make no whole character: cut at the start, or interrupted by a text token
    assert spelled(byte_token(*guo[1:]), byte_token(*zhong)) == [("", guo[1:], [0]), ("中", zhong, [1])]
    assert spelled(byte_token(*guo[:2]), PromptToken(5, "x", "text"), byte_token(*zhong)) == [
        ("", guo[:2], [0]), ("中", zhong, [2])]
    tokens = [byte_token(*guo[:2]), byte_token(guo[2])]
    spell(tokens)
    assert [t.chars for t in tokens] == [[0], [0]]  # each token knows the character it holds bytes of


def test_the_shipped_byte_level_model_reads_chinese_in_bytes_and_the_view_spells_it():
    lm = load_model(ROOT / "weights" / "tiny-lm")
    view = read_prompt(lm, QUESTION, chat=False)
    assert [t.id for t in view.tokens] == lm.tokenize(QUESTION)  # exactly what a run reads
    assert [t.kind for t in view.tokens] == ["byte"] * 24 + ["text"]
    assert "".join(c.char for c in view.chars) == QUESTION[:-1]
    assert all(len(c.raw) == 3 for c in view.chars)
    assert explain(view.chars[1], "en") == "<0xE5> <0x9B> <0xBD> = 国, 3 UTF-8 bytes in 3 tokens"
    assert explain(view.chars[1], "zh") == "<0xE5> <0x9B> <0xBD> = 国,3 个 UTF-8 字节,分在 3 个 token 里"
    page = html(view, "en")
    assert page.count('class="pg-ptok byte') == 24 and "= 国, 3 UTF-8 bytes" in page
    assert "What the model reads: 25 tokens" in page and "模型读到的:25 个 token" in html(view, "zh")
    english = read_prompt(lm, "The Python interpreter", chat=False)
    assert {t.kind for t in english.tokens} == {"text"} and not english.chars
    assert "".join(t.text for t in english.tokens) == "The Python interpreter"


def test_the_view_respects_the_chat_switch_and_the_caps(tmp_path):
    from transformers import PreTrainedTokenizerFast

    folder = save_tiny_decoder(tmp_path / "chat")
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(folder)
    lm = load_model(folder)
    plain = read_prompt(lm, "hi there", chat=False)
    chat = read_prompt(lm, "hi there", chat=True)
    assert [t.id for t in chat.tokens] == lm.tokenize("hi there", chat=True) and chat.chat and not plain.chat
    user = [t.text for t in chat.tokens if t.kind == "text"]
    assert "".join(user) == "hi there"  # the visitor's own tokens; the template's are marked
    assert {t.kind for t in chat.tokens} == {"text", "template", "special"}  # <s> is the tokenizer's own
    page = html(chat, "en")  # the visitor's own tokens first, the template's folded after them, a legend for ␣ ↵
    lo, hi = chat.typed
    assert "".join(t.text for t in chat.tokens[lo:hi]) == "hi there" and "Yours first (8):" in page
    typed, fold = page.index('class="pg-ptok-typed"'), page.index('<details class="pg-ptok-template">')
    assert typed < fold and page.index('class="pg-ptok template') > fold and "⋯ your 8 tokens ⋯" in page
    assert "␣ = a space · ↵ = a new line" in page and "␣ = 空格 · ↵ = 换行" in html(chat, "zh")
    assert "pg-ptok-template" not in html(plain, "en") and "␣ = a space" in html(plain, "en")
    long = read_prompt(lm, "a" * (CAPS.prompt_chars + 10), chat=False)
    assert len(long.tokens) == CAPS.prompt_tokens  # cut as a run cuts it (characters, then tokens), and said
    assert [n.key for n in long.notes] == ["prompt_cut", "prompt_tokens_cut"]
    assert f"and {CAPS.prompt_tokens - 400} more tokens" in html(long, "en")
    assert read_prompt(lm, "   ", chat=False).tokens == [] and html(read_prompt(lm, "", chat=False)) == ""


def test_the_view_escapes_what_the_checkpoint_and_the_visitor_wrote(lm):
    view = read_prompt(lm, '<img src=x onerror="alert(1)">', chat=False)
    page = html(view, "en")
    assert "<img" not in page and "&lt;" in page and 'onerror="' not in page
    refused = read_prompt(lm, "a\x00b", chat=False)  # a prompt a run refuses is refused here in one line
    assert refused.error and "NUL" in refused.error and "pg-ptok-error" in html(refused)


@pytest.mark.slow
def test_smollm2_spells_a_chinese_question_in_bytes_split_across_tokens(smollm2_dir):
    lm = load_model(smollm2_dir)
    view = read_prompt(lm, QUESTION, chat=False)
    assert [t.id for t in view.tokens] == lm.tokenize(QUESTION)
    assert [t.text for t in view.tokens[:3]] == ["中", "<0xE5><0x9B>", "<0xBD>"]
    guo = next(c for c in view.chars if c.char == "国")
    assert guo.tokens == [1, 2] and explain(guo, "en") == "<0xE5> <0x9B> <0xBD> = 国, 3 UTF-8 bytes in 2 tokens"
    assert {c.char for c in view.chars} == {"国", "首", "都", "哪", "里"}  # the rest are whole pieces of its vocabulary
    chat = read_prompt(lm, QUESTION, chat=True)
    assert [t.id for t in chat.tokens] == lm.tokenize(QUESTION, chat=True)
    assert "<|im_start|>" in [t.text for t in chat.tokens if t.kind == "special"]
    assert [c.char for c in chat.chars] == [c.char for c in view.chars]
    assert any(t.kind == "template" for t in chat.tokens)
