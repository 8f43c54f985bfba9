"""The cache-reuse lab's handlers without a browser: CacheBlend measured on the run on screen (progress, then its
figures and caption in both languages), prefix reuse of a second prompt, the second prompt as a branch, the run
forked to decode from its blended prompt cache (replayed by its link), and a model without RoPE saying why its keys
cannot move."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from playground.app.settings import UISettings
from playground.generation import GenerationConfig, generate_all
from tests.hf_tiny import gpt2_like, save_decoder
from tests.ui.test_ui import app, h, open_link, request, run, values  # noqa: F401 - fixtures
from tests.ui.test_ui_lab import press
from tests.ui_fixtures import CHARS, SPECIALS, save_char_tokenizer, save_tiny_decoder


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """The tiny Llama (RoPE) and a tiny GPT-2 (learned positions), both with the character tokenizer."""
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")
    save_decoder(root / "tiny-gpt2", "gpt2", gpt2_like(vocab_size=len(SPECIALS) + len(CHARS), n_positions=128))
    save_char_tokenizer(root / "tiny-gpt2")
    return root

pytestmark = pytest.mark.usefixtures("h")
SETTINGS = UISettings(prompt="A first part about cats. A second one, on dogs and birds. Which is it?", max_new_tokens=6)


def panels(h, session: str, r: float = 15) -> dict:  # noqa: F811
    h.sessions.get(session).deep_tab = "reuse"
    return h.views.control("reuse", {"reuse_r": r}, request(session))


def test_cacheblend_measures_the_run_and_draws_its_figures(h):  # noqa: F811
    _, original = run(h, SETTINGS, "blend")
    assert "Choose how to cut" in panels(h, "blend")["reuse_md"]["value"]
    frames = press(h, "reuse_blend", "blend", reuse_chunks="tokens:16")
    assert frames[0].startswith("r 1 of") and frames[-1] == ""
    result = original.results["reuse_blend"]
    assert result["starts"][:3] == [0, 16, 32] and result["rows"][-1]["kl_mean"] == 0.0 and result["rows"][-1]["top1"] == 1.0
    out = panels(h, "blend", r=50)
    md = out["reuse_md"]["value"]
    assert "Naive reuse loses" in md and "r = 50 %" in md and "is the full prefill itself" in md
    for name in ("reuse_quality", "reuse_positions", "reuse_layers", "reuse_rotation"):
        assert out[name]["visible"] is True, name
    h.sessions.get("blend").lang = "zh"
    assert "直接复用的损失" in panels(h, "blend")["reuse_md"]["value"]
    h.sessions.get("blend").lang = "en"


def test_prefix_reuse_and_its_fork(h):  # noqa: F811
    _, original = run(h, SETTINGS, "prefix")
    frames = press(h, "reuse_prefix", "prefix", reuse_ending="Which is louder?")
    assert frames[-1] == ""
    found = original.results["reuse_prefix"]
    assert found["shared"] > 0 and found["same"]
    assert "the same" in panels(h, "prefix")["reuse_prefix_md"]["value"]
    empty = press(h, "reuse_fork", "prefix", reuse_ending="")
    assert len(empty) == 1 and "new ending" in empty[0][3]
    frames = press(h, "reuse_fork", "prefix", reuse_ending="Which is louder?")
    fork = h.sessions.get("prefix").current
    assert fork is not original and fork.settings.prompt.endswith("dogs and birds. Which is louder?")
    assert fork.origin == original.number and frames[-1][0]["status"]["state"] == "done"
    assert 0 < fork.settings.reuse_shared < len(fork.prompt_ids)
    assert [b["edit"] for b in frames[-1][0]["branches"]] == ["", f"second prompt, {fork.settings.reuse_shared} tokens shared"]


def test_a_model_without_rope_says_why(h):  # noqa: F811
    _, gpt2 = run(h, UISettings(model="tiny-gpt2", prompt="Hello there", max_new_tokens=3), "gpt2")
    assert gpt2.path
    md = panels(h, "gpt2")["reuse_md"]["value"]
    assert "cannot be moved" in md and "learns one vector per position" in md
    frames = press(h, "reuse_blend", "gpt2", reuse_chunks="paragraphs")
    assert "cannot be moved" in frames[-1] and "reuse_blend" not in gpt2.results
    assert "Prefix reuse below still works" in md
    frames = press(h, "reuse_prefix", "gpt2", reuse_ending="Hi again.")
    assert frames[-1] == "" and gpt2.results["reuse_prefix"]["same"]  # learned positions: a prefix is still exact
    h.sessions.get("gpt2").lang = "zh"
    assert "无法移动" in panels(h, "gpt2")["reuse_md"]["value"]


def test_a_blended_fork_decodes_from_the_blend_and_its_link_replays_it(h):  # noqa: F811
    _, original = run(h, SETTINGS, "blendfork")
    frames = press(h, "reuse_blend_fork", "blendfork", reuse_chunks="tokens:16", reuse_r=40)
    fork = h.sessions.get("blendfork").current
    assert fork is not original and fork.origin == original.number and fork.settings.cache_blend == "tokens:16@40"
    live = frames[-1][0]
    assert live["status"]["state"] == "done"
    assert [b["edit"] for b in live["branches"]] == ["", "CacheBlend: every 16 tokens, r = 40 %"]
    lm = h.models.model_for(SETTINGS.model, "float32", "blendfork")
    blended = generate_all(lm, list(original.prompt_ids), fork.cfg.replace(cache_blend="tokens:16@40"))
    assert fork.generated_ids == blended.token_ids  # the engine's own decode from the blended cache
    plain = generate_all(lm, list(original.prompt_ids), GenerationConfig(max_new_tokens=6))
    assert original.generated_ids == plain.token_ids
    md = panels(h, "blendfork")["reuse_md"]["value"]
    assert f"Run {fork.number} decoded from a blended prompt cache (CacheBlend: every 16 tokens, r = 40 %)" in md
    same = next((i for i, (a, b) in enumerate(zip(fork.generated_ids, original.generated_ids)) if a != b), None)
    assert (f"agrees with run {original.number} for its first {same} of 6 tokens" in md if same is not None
            else f"Its 6 tokens are run {original.number}'s" in md)
    h.sessions.get("blendfork").lang = "zh"
    assert "从混合后的提示词缓存解码" in panels(h, "blendfork")["reuse_md"]["value"]
    h.sessions.get("blendfork").lang = "en"
    query = h.stream.link(request("blendfork"), *values(SETTINGS))
    params = dict(parse_qsl(query[1:]))
    assert params["cache_blend"] == "tokens:16@40"
    open_link(h, "blendfork-replay", **params)
    again = h.sessions.get("blendfork-replay")
    assert again.current.settings.cache_blend == "tokens:16@40"
    assert again.current.generated_ids == fork.generated_ids
    assert again.runs[0].generated_ids == original.generated_ids


def test_a_blend_a_model_cannot_take_is_refused_or_dropped_with_a_note(h):  # noqa: F811
    run(h, UISettings(model="tiny-gpt2", prompt="Hello there, friend", max_new_tokens=3), "gpt2-blend")
    frames = press(h, "reuse_blend_fork", "gpt2-blend", reuse_chunks="paragraphs", reuse_r=15)
    assert len(frames) == 1 and "cannot be moved" in frames[0][3]  # the line under the button; no run
    linked = open_link(h, "gpt2-blend-link", model="tiny-gpt2", prompt="Hello there, friend", max_new_tokens="3",
                       cache_blend="paragraphs@15")
    run_ = h.sessions.get("gpt2-blend-link").current
    assert run_.cfg.cache_blend is None and run_.generated_ids  # prefilled whole, and said so
    notes = linked[-1][1]
    assert "CacheBlend was not used" in str(notes) and "learns one vector per position" in str(notes)
