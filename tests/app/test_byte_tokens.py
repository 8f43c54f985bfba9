"""Byte tokens are named as what they are (issue 36 point 5: SmolLM2 answered a Chinese question with bare
`<0xE5><0x9B>` tokens and nothing said these are UTF-8 pieces). The shipped tiny-lm spells Chinese in bytes as
SmolLM2 does: 中 is the three tokens <0xE4> <0xB8> <0xAD>."""

from __future__ import annotations

import pytest

import playground
from playground.app import tokens_view, views
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.app.views import Selection
from playground.app.words import t
from tests.app.test_app_run import play

PROMPT = UISettings(model="tiny-lm", prompt="中国的首都是", chat=False, max_new_tokens=8, top_candidates=10)
INSPECTOR = views.PANELS["inspector"]


@pytest.fixture(scope="module")
def lm():
    return playground.load_model("weights/tiny-lm")


def show(lm, session: Session, step: int) -> dict:
    return views.show(INSPECTOR, views.context_for(INSPECTOR, session, lambda *a: lm), Selection(step=step))


def test_byte_tokens_are_read_into_the_characters_they_spell(lm):
    """As the prompt's tokenizer view reads them (the same function): 中国 is six byte tokens, two characters."""
    ids = lm.tokenizer.encode("首都中国", add_special_tokens=False)
    assert [lm.token_text(i) for i in ids][-6:] == ["<0xE4>", "<0xB8>", "<0xAD>", "<0xE5>", "<0x9B>", "<0xBD>"]
    n = len(ids)
    for index, char in ((n - 5, "中"), (n - 1, "国")):
        chars = tokens_view.byte_chars(lm, ids, index)
        assert [(c.char, c.raw, len(c.tokens)) for c in chars] == [(char, char.encode(), 3)]
        bytes_ = " ".join(f"<0x{b:02X}>" for b in char.encode())
        assert tokens_view.token_bytes_words(chars, "en") == (
            f"This token is not a character but UTF-8 bytes of one: {bytes_} = {char}, 3 UTF-8 bytes in 3 tokens.")
    assert tokens_view.byte_chars(lm, [ids[-1]], 0)[0].char == ""  # its lead byte not there: no whole character
    assert tokens_view.byte_chars(lm, lm.tokenizer.encode("the", add_special_tokens=False), 0) == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_generated_byte_token_says_it_is_utf8_bytes(lm, lang):
    session = Session(model="tiny-lm", lang=lang)
    run = play(session, lm, UISettings(model="tiny-lm", prompt="中国的首都是", chat=False, max_new_tokens=6,
                                       mode="sample", temperature=1.5, seed=3, lang=lang))
    assert run.path[3].token_text == "<0x9C>"  # sampled: one byte that starts no character
    caption = show(lm, session, 3)["caption"].value
    assert caption.endswith(t("tok_is_bytes_part", lang, bytes="<0x9C>"))
    assert t("tok_is_bytes", lang, what="")[:8] not in show(lm, session, 0)["caption"].value  # a text token


def test_byte_candidates_are_labelled_as_utf8_bytes(lm):
    session = Session(model="tiny-lm")
    run = play(session, lm, PROMPT)
    candidates = run.path[3].candidates
    assert " <0xE2><0x80>" in [c.text for c in candidates]  # two bytes of a three-byte character
    ticks = list(show(lm, session, 3)["funnel"].value.layout.yaxis.ticktext)
    byte_ticks = [tick for tick in ticks if "0xE2" in tick]
    assert byte_ticks == ["␣&lt;0xE2&gt;&lt;0x80&gt; #590 · UTF-8 bytes"]
    assert sum("UTF-8" in tick for tick in ticks) == sum(tokens_view.is_byte_token(lm, c.token_id) for c in candidates)


def test_a_view_given_no_model_marks_no_byte_tokens():
    """The candidates view drawn while its run streams can be given no model (the run had no token when the view's
    context was made, and has some when it computes): its tokens are then no byte tokens, never an error."""
    assert tokens_view.is_byte_token(None, 7) is False
    assert tokens_view.byte_chars(None, [5, 6, 7], 1) == []
