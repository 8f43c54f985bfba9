"""One table of the decoding knobs drives the strict validation, the app's clamp, the link round trip and
the sliders: each consumer's bounds are the table's, read back from the consumer itself."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from playground.app.limits import CAPS, clamp_settings
from playground.app.settings import RANGES, from_query
from playground.config import ModelConfig
from playground.generation import KNOBS, GenerationConfig, SettingsError


def _lm(vocab: int = 1000):
    config = ModelConfig(family="llama", vocab_size=vocab, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                         max_positions=4096, positional="rope")
    return SimpleNamespace(config=config, kind="decoder")


def _step(knob) -> float:
    return 1 if knob.kind is int else 1e-3


def _outside(knob) -> list[float]:
    """Values just beyond the engine's bounds (the low itself where it is excluded)."""
    out = []
    if knob.low is not None:
        out.append(knob.low if knob.low_open else knob.low - _step(knob))
    if knob.high is not None:
        out.append(knob.high + _step(knob))
    return out


@pytest.mark.parametrize("name", list(KNOBS))
def test_validate_accepts_the_tables_bounds_and_names_the_knob_just_beyond(name):
    knob = KNOBS[name]
    for value in (knob.low, knob.high):
        if value is not None and not (knob.low_open and value == knob.low):
            GenerationConfig(**{name: knob.kind(value)}).validate()
    for value in _outside(knob):
        with pytest.raises(SettingsError, match=f"^{name} .*{re.escape(knob.hint)}"):
            GenerationConfig(**{name: knob.kind(value)}).validate()
    GenerationConfig(**{name: knob.default}).validate()


def _names(n, name: str) -> bool:
    """Whether the note `n` is about the knob `name` (its words name the page's control, its values the knob)."""
    return n.values.get("name") == name or n.key == f"{name}_vocab"


@pytest.mark.parametrize("name", [n for n in KNOBS if n != "seed"])
def test_the_clamp_moves_values_beyond_the_table_to_its_fallback_or_cap_with_a_note(name):
    knob, lm = KNOBS[name], _lm()
    for value in _outside(knob):
        cfg, notes = clamp_settings(GenerationConfig(**{name: knob.kind(value)}), lm, 4)
        assert getattr(cfg, name) == knob.fallback(value) and any(_names(n, name) for n in notes)
        cfg.validate()
    if knob.capped:
        cap = getattr(CAPS, name)
        assert cap == knob.offer[1]
        cfg, notes = clamp_settings(GenerationConfig(**{name: cap + 1}), lm, 4)
        assert getattr(cfg, name) == cap and any(f"limit of {cap}" in n for n in notes)
    elif knob.offer is not None:  # the slider's range bounds only the slider: an API caller may go beyond
        beyond = knob.kind(knob.offer[1] + _step(knob))
        if knob.in_range(beyond) and not (name == "top_k" and beyond > lm.config.vocab_size):
            cfg, notes = clamp_settings(GenerationConfig(**{name: beyond}), lm, 4)
            assert getattr(cfg, name) == beyond and not any(_names(n, name) for n in notes)


def test_the_sliders_and_the_links_offer_the_tables_ranges():
    offered = {name: knob.offer for name, knob in KNOBS.items() if knob.offer is not None}
    assert {k: v for k, v in RANGES.items() if k in KNOBS} == offered
    for name, (low, high) in offered.items():
        knob = KNOBS[name]
        for value in (low, high):
            s, notes = from_query({name: str(knob.kind(value))})
            assert getattr(s, name) == knob.kind(value) and notes == []
        for value in (low - _step(knob), high + _step(knob)):
            s, notes = from_query({name: str(knob.kind(value))})
            assert getattr(s, name) != knob.kind(value) and len(notes) == 1 and name in notes[0]


def test_the_page_sliders_read_the_ranges():
    pytest.importorskip("gradio")
    from playground.ui.layout import build_page

    page = build_page()
    sliders = {name: c for name, c in page.settings.items() if type(c).__name__ == "Slider"}
    assert sliders and set(sliders) <= set(RANGES)
    for name, slider in sliders.items():
        assert (slider.minimum, slider.maximum) == RANGES[name], name
