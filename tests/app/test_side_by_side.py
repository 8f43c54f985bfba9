"""Temperature side by side: three runs that differ only in the temperature, and the entropy each token was drawn
with, computed over the whole vocabulary through the run's own sampler pipeline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from playground.app.activities import side_by_side
from playground.app.play import play
from playground.app.session import Session
from playground.app.settings import UISettings
from playground.checkpoints.loader import load_model
from playground.generation.engine import drain

ROOT = Path(__file__).resolve().parents[2]


def runs(lm, widgets: UISettings, temperatures=side_by_side.TEMPERATURES, seed: int = 7) -> list:
    session = Session(key="class")
    out = []
    for settings in side_by_side.settings_for(widgets, temperatures, seed):
        *_, last = play(session, lambda name, dtype, owner: lm, settings, pace=False)
        out.append(last.run)
    return out


def test_the_three_runs_differ_only_in_the_temperature():
    widgets = UISettings(model="m", prompt="Hi", mode="beam", top_k=20, top_p=0.9, repetition_penalty=1.2,
                         max_new_tokens=500, seed=None, edits="x", kv_window=16, weight_precision="int8", draft="ngram",
                         branches="1:2")
    made = side_by_side.settings_for(widgets, (0.3, 0.8, 1.5), seed=11)
    assert [s.temperature for s in made] == [0.3, 0.8, 1.5]
    for s in made:
        assert (s.mode, s.seed, s.top_k, s.top_p, s.repetition_penalty) == ("sample", 11, 20, 0.9, 1.2)
        assert s.max_new_tokens == side_by_side.MAX_NEW_TOKENS  # three short runs
        assert (s.edits, s.kv_window, s.weight_precision, s.draft, s.branches) == ("", 0, "", "", "")
    assert side_by_side.settings_for(widgets, (0.0, 99.0), 1)[0].temperature > 0  # always a temperature that samples


def test_the_entropy_is_the_sampled_distribution_s_over_the_whole_vocabulary(lm):
    # top-k 5 with 5 candidates recorded: the candidates hold the whole final distribution, so its entropy from them
    # must equal the teacher-forced pass's over every token
    widgets = UISettings(model="m", prompt="Hello there", top_k=5, top_candidates=5, repetition_penalty=1.3,
                         max_new_tokens=9)
    for run in runs(lm, widgets):
        entropies = side_by_side.step_entropies(lm, run)
        assert len(entropies) == len(run.path) > 0
        for h, step in zip(entropies, run.path):
            final = [c.prob_final for c in step.candidates if c.prob_final > 0]
            assert math.isclose(sum(final), 1.0, abs_tol=1e-5)
            assert h == pytest.approx(-sum(p * math.log2(p) for p in final), abs=1e-4)


def test_columns_show_more_entropy_and_fewer_top_choices_as_the_temperature_rises():
    lm = load_model(ROOT / "weights" / "tiny-lm")  # the shipped model: trained, so its distributions mean something
    made = runs(lm, UISettings(model="tiny-lm", prompt="The Python interpreter", max_new_tokens=40),
                temperatures=(0.2, 1.0, 2.0))
    columns = drain(side_by_side.columns_work(lm, made))
    assert [c.temperature for c in columns] == [0.2, 1.0, 2.0] and [c.run for c in columns] == [1, 2, 3]
    assert columns[0].entropy < columns[1].entropy < columns[2].entropy
    assert columns[0].top1 > columns[2].top1
    assert [t for t, _, _ in columns[0].tokens] == [s.token_text for s in made[0].path]
    page = side_by_side.html(columns, 7, "tiny-lm", "en")
    assert page.count('<section class="pg-sbs-col"') == 3 and "Seed 7 for all three runs" in page
    assert "温度 2" in side_by_side.html(columns, 7, "tiny-lm", "zh")
    hostile = side_by_side.Column(1.0, 1, [("<img src=x onerror=alert(1)>", 0.5, 1.0)], prompt="<script>")
    assert "<img" not in side_by_side.html([hostile], 1, "<b>", "en") and "<script>" not in side_by_side.html([hostile], 1, "m")


def test_top1_share_counts_the_drawn_token_against_the_most_likely():
    lm = load_model(ROOT / "weights" / "tiny-lm")
    (cold,) = runs(lm, UISettings(model="tiny-lm", prompt="The Python interpreter", max_new_tokens=12),
                   temperatures=(0.05,))
    assert side_by_side.top1_share(cold) == 1.0
    assert side_by_side.top1_share(cold) == sum(s.candidates[0].chosen for s in cold.path) / len(cold.path)


def test_the_chat_templates_opening_is_marked_in_the_stream_and_the_columns(tmp_path):
    """The tokens the chat template wrote before the typed text (a system message, role markers) are counted on
    the run, sent with the live screen's head and marked in each side-by-side column, for the switch that hides
    them; without chat there is none."""
    from transformers import PreTrainedTokenizerFast

    from playground.app import frames
    from tests.app.test_tokens_view import CHAT_TEMPLATE
    from tests.ui_fixtures import save_tiny_decoder

    folder = save_tiny_decoder(tmp_path / "chat")
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    tok.chat_template = CHAT_TEMPLATE.replace("{% for m", "<s>system: Be kind.</s>{% for m")  # a system part
    tok.save_pretrained(folder)
    chat_lm = load_model(folder)
    widgets = UISettings(model="m", prompt="hi there", chat=True, max_new_tokens=3)
    made = runs(chat_lm, widgets)
    for run in made:
        before = "".join(run.prompt_texts[: run.opening])
        assert before.startswith("<s>system: Be kind.</s>") and before.endswith("user: ")  # all before the typed text
        assert "".join(run.prompt_texts[run.opening:]).startswith("hi there")
        assert frames.run_head(run)["opening"] == run.opening
    columns = drain(side_by_side.columns_work(chat_lm, made))
    assert all(c.opening.endswith("user: ") and c.prompt.startswith("hi there") for c in columns)
    for lang in ("en", "zh"):
        page = side_by_side.html(columns, 7, "m", lang)
        assert page.count('<span class="pg-sys">&lt;s&gt;system: Be kind.&lt;/s&gt;') == 3
    plain = runs(chat_lm, UISettings(model="m", prompt="hi there", chat=False, max_new_tokens=3))
    assert {r.opening for r in plain} == {0}
    assert 'class="pg-sys"' not in side_by_side.html(drain(side_by_side.columns_work(chat_lm, plain)), 7, "m")
