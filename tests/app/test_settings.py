"""Settings round-trip through links: types, ranges, notes for anything a link cannot mean."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from playground.app.limits import CAPS
from playground.app.settings import (
    FIELDS,
    RANGES,
    UISettings,
    format_branches,
    from_query,
    from_widgets,
    generation_kwargs,
    parse_branches,
    to_query,
)


def values(settings: UISettings) -> list:
    return [getattr(settings, f) for f in FIELDS]


def test_every_setting_round_trips_through_the_query_string():
    s = UISettings(model="tiny-lm", dtype="bfloat16", prompt="a b&c=d ü", chat=True, mode="sample",
                   temperature=0.7, top_k=12, top_p=0.85, repetition_penalty=1.3, num_beams=5, length_penalty=0.5,
                   early_stopping=True, max_new_tokens=77, seed=1234, top_candidates=6, attention=False, pace_ms=40)
    parsed, notes = from_query(dict(parse_qsl(to_query(s)[1:])))
    assert parsed == s and notes == []
    none_seed, _ = from_query({"seed": "none", "mode": "sample"})
    assert none_seed.seed is None and "seed=none" in to_query(none_seed)  # sampling: the seed is always named
    assert UISettings().seed is None and "seed" not in to_query(UISettings())  # greedy: no seed to name
    assert "seed=0" in to_query(UISettings(seed=0)) and from_query({"seed": "0"})[0].seed == 0


def test_bad_link_values_are_ignored_with_a_note():
    s, notes = from_query({"temperature": "hot", "top_p": "7", "mode": "telepathy", "evil": "1", "seed": "1.5"})
    assert s == UISettings()
    text = " ".join(notes)
    for word in ("temperature", "top_p", "mode", "unknown link parameter 'evil'", "seed"):
        assert word in text
    long, notes = from_query({"prompt": "x" * 10_000})
    assert len(long.prompt) == 4000 and "cut" in notes[0]


def test_widget_values_are_coerced_to_the_settings_types():
    raw = dict(zip(FIELDS, values(UISettings())))
    raw.update(top_k=12.0, seed=7.0, max_new_tokens=20.0)
    s = from_widgets(raw)
    assert s.top_k == 12 and isinstance(s.top_k, int) and s.seed == 7
    assert from_widgets({**raw, "seed": None}).seed is None


@pytest.mark.parametrize(("typed", "seed"), [("", None), ("  ", None), (None, None), ("7", 7), (" 42 ", 42),
                                             ("3.0", 3), (5.0, 5), ("abc", None), ("1.5", None), ("nan", None),
                                             ("-4", 0)])
def test_the_seed_box_text_is_a_seed_or_draws_one(typed, seed):
    """The seed box is text: empty (or anything not a whole number) draws a seed; a number is kept in range."""
    assert from_widgets({"seed": typed}).seed == seed


def test_modes_map_to_generation_configs():
    greedy = generation_kwargs(UISettings(mode="greedy", temperature=1.5, num_beams=4))
    assert greedy["temperature"] == 0 and greedy["num_beams"] == 1
    sample = generation_kwargs(UISettings(mode="sample", temperature=1.5, top_k=3, seed=9))
    assert sample["temperature"] == 1.5 and sample["top_k"] == 3 and sample["seed"] == 9 and sample["num_beams"] == 1
    beam = generation_kwargs(UISettings(mode="beam", num_beams=4, length_penalty=0.7, early_stopping=True))
    assert beam["num_beams"] == 4 and beam["temperature"] == 0 and beam["early_stopping"] is True


def test_branches_in_links_are_step_and_token_pairs():
    assert parse_branches("5:1234,9:77.78") == [(5, [1234]), (9, [77, 78])]
    assert format_branches([(5, [1234]), (9, [77, 78])]) == "5:1234,9:77.78"
    assert parse_branches("") == []
    for bad in ("5", "a:1", "5:", "5:1,", "-1:3", "1:2" + ",1:2" * 8):
        with pytest.raises(ValueError):
            parse_branches(bad)
    s, notes = from_query({"branches": "x:y", "lang": "fr"})
    assert s.branches == "" and s.lang == "en" and len(notes) == 2


def test_the_link_always_names_the_model_the_prompt_and_chat():
    q = to_query(UISettings(model="tiny-lm", prompt=""))
    assert "model=tiny-lm" in q and "prompt=" in q and "chat=false" in q


def test_one_source_for_every_limit():
    """The sliders' ranges and the clamps come from the same numbers."""
    assert RANGES["num_beams"][1] == CAPS.num_beams and RANGES["max_new_tokens"][1] == CAPS.max_new_tokens
    assert RANGES["top_candidates"][1] == CAPS.top_candidates and RANGES["pace_ms"][1] == CAPS.pace_ms
    too_many, notes = from_query({"num_beams": str(CAPS.num_beams + 1)})
    assert too_many.num_beams == UISettings().num_beams and "num_beams" in notes[0]
