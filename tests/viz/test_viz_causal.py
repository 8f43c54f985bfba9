"""The causal lab's figures from small synthetic inputs shaped like the analyses' `to_dict()`."""

from __future__ import annotations

import numpy as np
import pytest

from playground.viz.causal import attribution_caption, attribution_figure, divergence_figure, head_sweep_figure
from tests.viz_cases import attribution, divergence, head_sweep


def test_attribution_heat_map_and_bars_show_every_part():
    data = attribution()
    fig = attribution_figure(data, "α")
    heat, bars = fig.data
    np.testing.assert_array_equal(np.array(heat.z), np.array(data["heads"]))
    assert heat.zmid == 0 and heat.zmin == -heat.zmax  # signed scale centred at zero
    assert heat.zmax == pytest.approx(np.abs(data["heads"]).max())  # the heads' own scale, not the MLPs' (issue 29)
    assert list(bars.y[:3]) == ["MLP 0", "MLP 1", "MLP 2"] and list(bars.x[:3]) == data["mlps"]
    assert "token embedding" in bars.y and "steering vector" in bars.y
    assert sum(bars.x) + np.sum(heat.z) == pytest.approx(data["total"])
    assert "Why α" in fig.layout.title.text


def test_attribution_versus_and_seq2seq_draw_two_maps():
    data = attribution(seq2seq=True)
    fig = attribution_figure(data, "α", "β")
    assert [t.type for t in fig.data] == ["heatmap", "heatmap", "bar"]
    np.testing.assert_array_equal(np.array(fig.data[1].z), np.array(data["cross_heads"]))
    assert "not β" in fig.layout.title.text
    assert "而不是 β" in attribution_figure(data, "α", "β", lang="zh").layout.title.text


def test_attribution_caption_names_the_largest_pushes():
    data = attribution(every_part=False)
    data["heads"] = np.zeros((3, 4)).tolist()
    data["heads"][2][1] = 5.0
    data["mlps"] = [-4.0, 0.0, 0.0]
    text = attribution_caption(data, "α")
    assert "**head 2.1** (+5.000)" in text and "**MLP 0** (-4.000)" in text


def test_divergence_figure_marks_where_the_texts_part():
    fig = divergence_figure(divergence(2), ["α", "β", "γ", "δ", "ε"])
    kl, prob = fig.data
    assert list(kl.y) == [0.0, 0.1, 0.8, 1.2, 0.4] and list(prob.y) == [0.6, 0.5, 0.05, 0.01, 0.2]
    assert list(kl.x) == [1, 2, 3, 4, 5] and fig.layout.shapes[0].x0 == 2.5  # steps counted from 1: before step 3
    assert not divergence_figure(divergence(None), list("abcde")).layout.shapes
    with pytest.raises(ValueError, match="as many"):
        divergence_figure(divergence(), ["α"])


def test_head_sweep_lists_heads_in_order_and_marks_those_not_run():
    fig = head_sweep_figure(head_sweep(), "α")
    assert list(fig.data[0].y) == ["head 2", "head 0", "head 3", "head 1"]
    assert list(fig.data[0].x) == [1.2, 0.3, 0.0, -0.1]
    partial = head_sweep_figure(head_sweep(partial=True), "α")
    assert list(partial.data[0].text[-2:]) == ["not run", "not run"]
    with pytest.raises(ValueError, match="each of the 4 heads"):
        head_sweep_figure({**head_sweep(), "order": [0, 0, 1, 2]}, "α")
