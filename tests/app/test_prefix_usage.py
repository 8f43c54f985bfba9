"""`/generate_text` says what was reused (`usage`, as OpenAI-style APIs do), and the server's prefix stores are
kept per model object: a prompt sent again is restored whole (its blocks and its tail, any length, greedy or
sampled: the same tokens), a longer one restores the full blocks it shares, a visitor's upload and another dtype
never share them, six visitors sending one prompt at once compute it at most twice, and the holdings line counts
them. The page's runs record the last position at step 0, so they restore full blocks only.

`play_script` is what `/generate_text` calls (ui/streaming.py adds only the session and the error line); the
lookup here is the test's catalog of real checkpoints saved by transformers.
"""

from __future__ import annotations

import threading

import pytest

from playground.app import serving
from playground.app.holdings import holdings
from playground.app.play import play_script
from playground.checkpoints.loader import load_model
from playground.generation.prefix_cache import BLOCK
from tests.ui_fixtures import save_tiny_decoder

TEXT = ("the quick brown fox jumps over the lazy dog; " * 6)[:225]  # 225 tokens of the character tokenizer


@pytest.fixture
def server(monkeypatch):
    fresh = serving.Server()
    monkeypatch.setattr(serving, "_server", fresh)
    return fresh


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_decoder(tmp_path_factory.mktemp("w") / "tiny-lm")


def _ask(lookup, text: str = TEXT, query: str = "max_new_tokens=6", visitor: str = "a") -> dict:
    return play_script(lookup, "tiny-lm", text, query, "script-api", visitor)


def _token_bytes(lm) -> int:
    c = lm.config
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4  # K,V · layers · kv heads · d · float32


def test_the_same_prompt_twice_is_restored_whole(server, folder):
    lm = load_model(folder)
    lookup = lambda name, dtype, owner: lm  # noqa: E731
    first, second = _ask(lookup), _ask(lookup)
    assert first["usage"] == {"prompt_tokens": 225, "cached_tokens": 0, "completion_tokens": 6}
    assert second["usage"] == {"prompt_tokens": 225, "cached_tokens": 225, "completion_tokens": 6}
    assert second["token_ids"] == first["token_ids"]
    # a shared beginning is reused, the rest computed: the full blocks it shares (the stored prompt's tail is no
    # block of a longer prompt: that one's fresh run feeds those positions in a full chunk)
    longer = _ask(lookup, TEXT[:2 * BLOCK] + "a different ending, computed by this run alone")
    assert longer["usage"] == {"prompt_tokens": 110, "cached_tokens": 2 * BLOCK, "completion_tokens": 6}
    # 225: 7 blocks and a tail of 1 token; 110: one more block and a tail of 14; each tail with its logits
    tails = 2 * lm.config.vocab_size * 4
    assert server.prefix_held() == (7 + 1 + 1 + 1, (8 * BLOCK + 1 + 14) * _token_bytes(lm) + tails)


@pytest.mark.parametrize("length", [7, 40, 225])
@pytest.mark.parametrize("query", ["max_new_tokens=6",
                                   "max_new_tokens=8&mode=sample&temperature=0.9&seed=3&repetition_penalty=1.3"],
                         ids=["greedy", "sampled"])
def test_a_prompt_of_any_length_sent_twice_is_reused_whole(server, folder, length, query):
    lm = load_model(folder)
    lookup = lambda name, dtype, owner: lm  # noqa: E731
    text = TEXT[:length]
    fresh = _ask(lookup, text, query)
    again = _ask(lookup, text, query, visitor="b")
    assert fresh["usage"]["prompt_tokens"] == length and fresh["usage"]["cached_tokens"] == 0
    assert again["usage"] == {**fresh["usage"], "cached_tokens": length}
    assert again["token_ids"] == fresh["token_ids"] and again["text"] == fresh["text"]


def test_no_block_crosses_an_upload_or_a_dtype(server, folder):
    """Each visitor's upload is a model object of its own (the catalog loads it from the owner's folder), as is
    each dtype: their stores are their own."""
    models = {(owner, dtype): load_model(folder, dtype=dtype) for owner in ("ann", "bob")
              for dtype in ("float32", "bfloat16")}

    def lookup(name: str, dtype: str, owner: str):
        return models[owner, dtype]

    for owner in ("ann", "bob"):
        for dtype in ("float32", "bfloat16"):
            query = f"max_new_tokens=3&dtype={dtype}"
            got = play_script(lookup, "tiny-lm", TEXT, query, owner, owner)
            assert got["usage"]["cached_tokens"] == 0, (owner, dtype)
    again = play_script(lookup, "tiny-lm", TEXT, "max_new_tokens=3&dtype=bfloat16", "bob", "bob")
    assert again["usage"]["cached_tokens"] == 225


@pytest.mark.parametrize("length", [7, 225])
def test_six_visitors_at_once_read_one_prompt_at_most_twice(server, folder, length):
    lm = load_model(folder)
    lookup = lambda name, dtype, owner: lm  # noqa: E731
    text = TEXT[:length]
    alone = _ask(lookup, text, visitor="alone")
    store = server._prefixes[lm.model]
    store.clear()  # an empty store: the six arrive to nothing cached
    hits, misses = store.hits, store.misses
    answers: dict[int, dict] = {}
    threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, _ask(lookup, text, visitor=f"v{i}")))
               for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(answers) == list(range(6))
    assert all(a["token_ids"] == alone["token_ids"] for a in answers.values())
    computed = sum(length - a["usage"]["cached_tokens"] for a in answers.values())
    assert computed <= 2 * length  # the prompt computed once or twice, not six times
    entries = (length - 1) // BLOCK + 1  # its blocks and its tail
    assert store.misses - misses <= 2 * entries and store.hits - hits >= 4 * entries


def test_the_holdings_line_counts_the_prefix_blocks(server, folder):
    from playground.app.registry import ModelRegistry
    from playground.app.session import Sessions

    lm = load_model(folder)
    _ask(lambda name, dtype, owner: lm)
    held = holdings(ModelRegistry(), Sessions())
    size = (7 * BLOCK + 1) * _token_bytes(lm) + lm.config.vocab_size * 4  # 7 blocks, a tail of 1 token and its logits
    assert (held.prefix_blocks, held.prefix_bytes) == server.prefix_held() == (8, size)
    assert "prefix_blocks=8 " in held.line() and held.total_bytes >= held.prefix_bytes


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_kv_panel_and_the_serving_lesson_say_what_was_reused(server, folder, lang):
    from playground import viz
    from playground.app import describe, lessons
    from playground.app.play import play
    from playground.app.session import Session
    from playground.app.settings import UISettings

    lm = load_model(folder)
    lookup = lambda name, dtype, owner: lm  # noqa: E731
    runs = []
    for _ in range(2):
        session = Session(model="tiny-lm", lang=lang)
        settings = UISettings(model="tiny-lm", prompt=TEXT, max_new_tokens=4, lang=lang)
        for _ in play(session, lookup, settings, pace=False):
            pass
        runs.append(session.current)
    # the page's runs record the last position's residual stream (and attention row) at step 0, which a stored
    # tail does not hold: they restore the full blocks (224 tokens) and run the last chunk themselves
    first, second = (describe.cache_markdown(r.events[-1].cache, lang) for r in runs)
    assert "0–223" not in first
    if lang == "en":
        assert "positions 0–223 (224 prompt tokens) were restored from the server" in second
        assert "positions 224–227 (4) were computed by this run" in second
    else:
        assert "位置 0–223(提示词的 224 个 token)由服务器恢复" in second and "位置 224–227(4 个)由本次运行计算" in second
    # the growth figure draws the line under which the positions were restored: 224 tokens · K,V · 2 layers ·
    # 2 KV heads · 12 dims · 4 bytes
    assert describe.reused_bytes(runs[0].events[-1].cache) == (0, 0)
    reused = describe.reused_bytes(runs[1].events[-1].cache)
    assert reused == (224, 224 * 2 * 2 * 2 * 12 * 4)
    figure = viz.cache_growth(*describe.growth_series(runs[1].events), lang=lang, reused=reused)
    line = [a.text for a in figure.layout.annotations if "224" in a.text]
    assert line == ([f"restored from the prefix cache: 224 tokens, {viz.format_bytes(reused[1])}"] if lang == "en"
                    else [f"由前缀缓存恢复:224 个 token,{viz.format_bytes(reused[1])}"])
    caption = lessons.show("serving", lm, runs[1], None, lessons.Inputs(), lang).caption
    if lang == "en":
        assert "In this batch's last 2 prompts, 224 of 450 tokens were restored (hit rate 50 %); yours: 224 of 225." \
            in caption
    else:
        assert "本批次最近 2 个提示词中，450 个 token 里有 224 个是恢复的（命中率 50 %）；你的：225 个中 224 个。" in caption
