"""Stop strings are found by decoding a tail of the run, not the whole text at every step (issue 43, one event tail):
the same step stops as with the whole text, on real tokenizers (byte-level BPE, SentencePiece with byte fallback),
for every stop string a run's text holds; and a long run decodes O(n) tokens, not O(n^2)."""

from __future__ import annotations

import random

import pytest

from playground.checkpoints.tokenizer import load_directory_tokenizer
from playground.generation.tokens import Tokens
from playground.loaded import detokenize

TEXTS = [
    "The water cycle: water evaporates, rises, cools and falls again as rain.\n\nStep 1 — heat.",
    "水循环：水蒸发，上升，冷却，然后作为雨再次落下。第二步：凝结。",
    "emoji 🚲🌧️ and accents: café, naïve, Ærø; code: `x = [1, 2, 3]` ## end ##",
    "    indented\n\tand tabbed\n\n\nlines   with    spaces",
]


def first_stop(decode, ids: list[int], needles: list[str], *, whole: bool) -> int | None:
    """The step at which a run of `ids` stops on `needles` (None: it does not), checked as the tail does or on
    the whole text."""
    node = Tokens.start(decode)
    for step, token_id in enumerate(ids):
        node = node.extend(token_id)
        found = any(n in node.text for n in needles) if whole else node.text_holds(needles)
        if found:
            return step
    return None


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_the_tail_stops_at_the_same_step_as_the_whole_text(model, request):
    folder = request.getfixturevalue(f"{model}_dir")
    tokenizer, _ = load_directory_tokenizer(folder)
    decode = lambda ids: detokenize(tokenizer, ids, skip_special_tokens=True)  # noqa: E731 - the runs' own decode
    rng = random.Random(0)
    checked = 0
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        whole = decode(ids)
        needles = {whole[a:a + n] for n in (1, 2, 3, 5, 9, 20, 40) for a in range(0, max(1, len(whole) - n), 3)}
        needles |= {"not in the text at all", whole[-1:], whole[:30]}
        for needle in sorted(needles):
            if not needle.strip():
                continue
            assert first_stop(decode, ids, [needle], whole=False) == first_stop(decode, ids, [needle], whole=True), \
                (model, needle)
            checked += 1
        # several at once, as a settings list gives them
        for _ in range(20):
            several = rng.sample(sorted(needles), 3)
            assert first_stop(decode, ids, several, whole=False) == first_stop(decode, ids, several, whole=True)
    assert checked > 300


def test_a_long_run_decodes_a_tail_per_step_not_the_run():
    decoded: list[int] = []

    def decode(ids: list[int]) -> str:
        decoded.append(len(ids))
        return "".join(chr(97 + i % 26) for i in ids)  # one character per token

    node = Tokens.start(decode)
    per_step = []
    for i in range(1024):
        node = node.extend(i)
        decoded.clear()
        assert not node.text_holds(["the stop string is not here"])
        per_step.append(sum(decoded))
    assert max(per_step) <= 4 * 64  # a 27-character needle and the margin: tails of at most 64 tokens
    assert per_step[200:] == [per_step[200]] * (1024 - 200)  # the same work at step 200 as at step 1,023
