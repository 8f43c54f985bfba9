"""The cache-reuse lab's figures: pure functions of plain numbers, drawn in English and 中文."""

from __future__ import annotations

import re

import pytest

from playground.viz import reuse

ROWS = [{"r": r, "kl_mean": k, "top1": t, "share": s} for r, k, t, s in
        ((0, 0.3, 0.8, 0.01), (50, 0.01, 1.0, 0.5), (100, 0.0, 1.0, 1.0))]
ROTATION = {"from": 0, "to": 16, "index": [0, 12, 23], "theta": [1.0, 0.05, 1e-4],
            "pairs": [[0.5, 0.1, -0.4, 0.3], [0.2, 0.2, 0.1, 0.25], [1.0, -0.2, 1.0, -0.2]]}
HANZI = re.compile(r"[\u4e00-\u9fff]")


def figures(lang: str) -> list:
    return [reuse.quality_figure(ROWS, lang=lang), reuse.layers_figure([0.0, 0.1, 0.3], lang=lang),
            reuse.positions_figure([0.0, 0.0, 2.0, 5.0], ["a", "b", "c", "d"], [0, 2], [3], 50, lang=lang),
            reuse.rotation_figure(ROTATION, lang=lang)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_figure_draws_in_both_languages(lang):
    for fig in figures(lang):
        title = fig.layout.title.text
        assert title and (bool(HANZI.search(title)) == (lang == "zh")), title


def test_the_figures_show_their_numbers():
    quality, layers, positions, rotation = figures("en")
    assert list(quality.data[0].y) == [0.3, 0.01, 0.0] and list(quality.data[2].y) == [1.0, 50.0, 100.0]
    assert list(layers.data[0].y) == [0.0, 0.1, 0.3]
    colours = list(positions.data[0].marker.color)
    assert colours[3] == reuse.PICKED and reuse.PICKED not in colours[:3] and colours[0] != colours[2]  # two chunks
    assert "1 of 4" in positions.layout.title.text
    assert len(rotation.data) == 6 and "turned 197°" in rotation.data[1].name  # 16 · 1 rad = 916.7° = 2 turns + 196.7°
    assert "R_n k" in rotation.layout.title.text
