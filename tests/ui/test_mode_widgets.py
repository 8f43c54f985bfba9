"""The decoding column shows only the knobs of the chosen mode (issue 36 point 5: the Seed box showed in greedy
and beam modes, where nothing is drawn at random)."""

from __future__ import annotations

import pytest

from playground.ui.wiring import BEAM_ONLY, SAMPLE_ONLY, mode_visibility


@pytest.mark.parametrize("mode, seed_shown", [("greedy", False), ("beam", False), ("sample", True)])
def test_the_seed_box_shows_only_when_sampling(mode, seed_shown):
    shown = {name: update["visible"] for name, update in zip(SAMPLE_ONLY + BEAM_ONLY, mode_visibility(mode))}
    assert shown["seed"] is seed_shown and shown["temperature"] is seed_shown
    assert shown["num_beams"] is (mode == "beam")
