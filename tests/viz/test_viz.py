"""Figure builders: built from small synthetic arrays, checked for the properties the UI relies on."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import plotly.graph_objects as go
import pytest

from playground.viz import (
    aggregate_heads,
    attention_entropy,
    attention_heads_grid,
    attention_heatmap,
    attention_row,
    beam_table,
    beam_tree,
    cache_growth,
    candidate_funnel,
    cosine_similarity,
    cosine_similarity_matrix,
    format_bytes,
    group_by_kv_head,
    head_summary,
    learned_table_heatmap,
    mean_attention_distance,
    pe_base_comparison,
    pe_heatmap,
    pe_similarity,
    pe_waves,
    relative_bias_plot,
    rope_frequencies,
    rope_relative_scores,
    rope_rotation,
    timing_comparison,
)
from playground.viz._common import FITS_ANY_WIDTH, TITLE_CHARS, display_token, token_axis, wrap_title
from playground.viz.attention import CAP_BELOW, row_top, scaled_weights, typical_peak
from playground.viz.positional import default_dims

RNG = np.random.default_rng(0)


def softmax_rows(shape: tuple[int, ...], sharpness: float = 1.0) -> np.ndarray:
    x = sharpness * RNG.normal(size=shape)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sinusoid(length: int, dim: int, base: float = 10000.0) -> np.ndarray:
    pos = np.arange(length)[:, None]
    rates = base ** (-np.arange(0, dim, 2) / dim)
    table = np.zeros((length, dim))
    table[:, 0::2] = np.sin(pos * rates)
    table[:, 1::2] = np.cos(pos * rates)
    return table


def assert_page_friendly(fig: go.Figure) -> None:
    """Fixed height, width follows the page (never wider than 1280 px), a title, serialisable."""
    assert fig.layout.height is not None and 200 <= fig.layout.height <= 1500
    assert fig.layout.width is None or fig.layout.width <= 1280
    assert fig.layout.autosize is True
    assert fig.layout.title.text
    json.loads(fig.to_json())  # the UI ships it to the browser


# --- attention stats ----------------------------------------------------------------------------


def test_entropy_of_uniform_rows_is_log_s_and_one_hot_is_zero():
    S = 7
    uniform = np.full((2, 3, S), 1 / S)
    np.testing.assert_allclose(attention_entropy(uniform), np.full(2, math.log(S)))
    one_hot = np.zeros((4, 4))
    one_hot[np.arange(4), [0, 2, 1, 3]] = 1.0
    assert attention_entropy(one_hot) == pytest.approx(0.0)  # zero probs ignored, no NaN


def test_entropy_ignores_masked_keys():
    # Causal row over 2 of 4 keys: entropy log 2, the masked zeros add nothing.
    w = np.array([[0.5, 0.5, 0.0, 0.0]])
    assert attention_entropy(w) == pytest.approx(math.log(2))


def test_mean_distance_identity_is_zero_and_first_token_attention_grows():
    assert mean_attention_distance(np.eye(5)) == pytest.approx(0.0)
    sink = np.zeros((4, 4))
    sink[:, 0] = 1.0  # every query looks at token 0: distances 0, 1, 2, 3
    assert mean_attention_distance(sink) == pytest.approx(1.5)


def test_mean_distance_places_decode_queries_at_the_end():
    # One decode query (T=1) over S=6 keys sits at position 5; attending to key 1 is distance 4.
    w = np.zeros((2, 1, 6))
    w[:, 0, 1] = 1.0
    np.testing.assert_allclose(mean_attention_distance(w), [4.0, 4.0])


def test_aggregate_and_group_heads():
    w = softmax_rows((6, 3, 5))
    np.testing.assert_allclose(aggregate_heads(w, "mean"), w.mean(axis=0))
    np.testing.assert_allclose(aggregate_heads(w, "max"), w.max(axis=0))
    grouped = group_by_kv_head(w, kv_groups=3)  # heads 0-2 share KV 0, heads 3-5 share KV 1
    assert grouped.shape == (2, 3, 5)
    np.testing.assert_allclose(grouped[1], w[3:6].mean(axis=0))
    with pytest.raises(ValueError, match="divisor"):
        group_by_kv_head(w, kv_groups=4)
    with pytest.raises(ValueError, match="'mean' or 'max'"):
        aggregate_heads(w, "median")


# --- attention figures --------------------------------------------------------------------------


def test_heads_grid_one_heatmap_per_head_on_shared_scale():
    w = softmax_rows((4, 5, 5), sharpness=8.0)  # rows peak near 1: the plain probability scale
    labels = ["The", "cat", "sat", "on", "mat"]
    fig = attention_heads_grid(w, labels, labels, title="layer 0")
    assert [type(t) for t in fig.data] == [go.Heatmap] * 4
    for i, trace in enumerate(fig.data):
        np.testing.assert_allclose(trace.z, w[i])
        assert trace.coloraxis == "coloraxis"
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 1.0)
    assert [a.text for a in fig.layout.annotations] == ["head 0", "head 1", "head 2", "head 3"]
    assert fig.layout.yaxis.autorange == "reversed"
    assert fig.data[0].text[1][2] == "cat → sat"
    assert_page_friendly(fig)


def test_heads_grid_groups_gqa_heads_by_kv_head():
    w = softmax_rows((6, 3, 4))
    fig = attention_heads_grid(w, None, None, title="GQA", kv_groups=3)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["head 0<br>KV 0", "head 1<br>KV 0", "head 2<br>KV 0",  # two lines: one is too wide at 400 px
                      "head 3<br>KV 1", "head 4<br>KV 1", "head 5<br>KV 1"]
    assert fig.data[3].hovertemplate.startswith("head 3 · KV 1<br>")
    # One row per KV head: heads 0-2 share the first row's y-axis domain, head 3 starts row 2.
    domains = [fig.layout[t.yaxis.replace("y", "yaxis")].domain for t in fig.data]
    assert domains[0] == domains[1] == domains[2] != domains[3]
    with pytest.raises(ValueError, match="divisor"):
        attention_heads_grid(w, kv_groups=4)


def test_heatmap_keeps_repeated_tokens_and_escapes_labels():
    w = softmax_rows((4, 4), sharpness=8.0)  # rows peak near 1: the plain probability scale
    tokens = ["the", " the", "<b>", "\n"]
    fig = attention_heatmap(w, tokens, tokens, title="head 3")
    (trace,) = fig.data
    np.testing.assert_allclose(trace.z, w)
    assert (trace.zmin, trace.zmax) == (0.0, 1.0)  # a linear scale is the probability scale
    # Numeric axes keep both "the" rows; tick text shows whitespace and escapes plotly's HTML.
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2, 3]
    assert list(fig.layout.yaxis.ticktext) == ["the", "␣the", "&lt;b&gt;", "↵"]
    assert list(fig.layout.xaxis.ticktext) == ["the", "␣the", "&lt;b&gt;", "↵"]
    long = attention_heatmap(np.eye(2), ["=" * 40, "<" * 20], ["a", "b"])
    assert list(long.layout.yaxis.ticktext) == ["=" * 11 + "…", "&lt;" * 11 + "…"]  # cut on the axis only
    assert "=" * 40 in long.data[0].text[0][0]
    assert fig.layout.xaxis.title.text == "key" and fig.layout.yaxis.title.text == "query"
    assert fig.layout.yaxis.autorange == "reversed"
    assert trace.text[2][0] == "&lt;b&gt; → the"
    np.testing.assert_allclose(trace.customdata, w)  # hover shows the weight itself, whatever the colour scale
    assert "%{text}" in trace.hovertemplate and "%{customdata" in trace.hovertemplate
    assert_page_friendly(fig)


def test_heatmap_labels_short_prompts_fully_and_lets_the_drawn_width_thin_long_ones():
    short = attention_heatmap(softmax_rows((FITS_ANY_WIDTH, FITS_ANY_WIDTH)), None, None)
    assert list(short.layout.xaxis.tickvals) == list(range(FITS_ANY_WIDTH))  # every token: fits a phone's axis
    tokens = [f"tok{i}" for i in range(199)] + ["<" * 30]
    fig = attention_heatmap(softmax_rows((200, 200)), tokens, tokens, title="long", highlight_row=150)
    (trace,) = fig.data
    # Long: positions as categories with their tokens as aliases; plotly keeps the labels that fit.
    assert list(trace.x) == list(trace.y) == [str(i) for i in range(200)]
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        assert axis.type == "category" and axis.tickmode == "auto" and axis.tickvals is None
        assert axis.labelalias["7"] == "tok7" and axis.labelalias["199"] == "&lt;" * 11 + "…"
    assert trace.text[150][3] == "tok150 → tok3"  # hover still names every pair
    assert fig.layout.height <= 900 and fig.layout.shapes[0].y0 == 149.5
    with pytest.raises(ValueError, match="labels"):
        attention_heatmap(softmax_rows((3, 3)), ["a", "b"], None)
    with pytest.raises(ValueError, match="dimensions"):
        attention_heatmap(softmax_rows((2, 3, 3)))


def test_long_titles_break_once_where_the_lines_come_out_even():
    assert wrap_title("All heads") == "All heads"
    assert wrap_title("decoder self-attention: entropy and mean distance of every head") == (
        "decoder self-attention:<br>entropy and mean distance of every head")
    assert wrap_title("Row of query 269 (' decoder'), layer 0, head 0") == "Row of query 269 (' decoder'),<br>layer 0, head 0"
    assert wrap_title("KV memory<br><sup>2 · N · B · h_kv · T · d_h · s · a very long model name here</sup>").count("<br>") == 1
    for title in ("x" * 60, "word " * 20):
        first = wrap_title(title).split("<br>")[0]
        assert len(first) <= TITLE_CHARS or "<br>" not in wrap_title(title)


def test_token_axis_switches_to_width_thinned_categories_beyond_what_fits_anywhere():
    coords, axis = token_axis(["a", "b"])
    assert coords is None and axis["tickvals"] == [0, 1] and axis["ticktext"] == ["a", "b"]
    coords, axis = token_axis([str(i % 3) for i in range(FITS_ANY_WIDTH + 1)])  # repeated tokens stay apart
    assert coords == [str(i) for i in range(FITS_ANY_WIDTH + 1)] and axis["type"] == "category"
    assert [axis["labelalias"][c] for c in coords[:4]] == ["0", "1", "2", "0"]


def sink_map(T: int = 200, sink: float = 0.6, local: float = 0.1) -> np.ndarray:
    """A causal (T, T) map as real models draw long texts: the first key takes `sink` of every row, the
    newest key `local`, the rest spread evenly over the keys in between."""
    w = np.zeros((T, T))
    w[0, 0] = 1.0
    for i in range(1, T):
        w[i, 0], w[i, i] = sink, local
        if i > 1:
            w[i, 1:i] = (1 - sink - local) / (i - 1)
        w[i] /= w[i].sum()
    return w


def test_typical_peak_sees_past_the_sink_and_the_short_early_rows():
    w = sink_map()
    assert typical_peak(w) == pytest.approx(0.1)  # the median row's strongest key after the first
    assert typical_peak(np.eye(4)) == 1.0 and typical_peak(np.ones((3, 1))) == 1.0
    assert typical_peak(np.stack([w, w])) == pytest.approx(0.1)  # all heads together (a shared colour axis)


def test_linear_scale_caps_at_the_typical_peak_on_long_maps_and_says_so():
    w = sink_map()
    z, axis = scaled_weights(w)
    np.testing.assert_array_equal(z, w)  # the values are drawn as they are; only the colour axis changes
    assert axis["cmin"] == 0.0 and axis["cmax"] == pytest.approx(0.1) and axis["cmax"] < CAP_BELOW
    assert axis["colorbar"]["ticktext"][-1] == "≥ 0.1" and axis["colorbar"]["tickvals"][-1] == axis["cmax"]
    _, plain = scaled_weights(np.eye(5))  # rows that peak high keep the probability scale
    assert (plain["cmin"], plain["cmax"]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="linear"):
        scaled_weights(w, scale="cubic")


def test_a_sink_bar_is_clipped_and_its_weight_written():
    w = np.array([0.7, 0.05, 0.1, 0.15])
    assert row_top(w) == 0.15 and row_top(np.array([0.2, 0.15, 0.65])) == 0.65
    fig = attention_row(w, ["<s>", "a", "b", "c"])
    assert fig.layout.yaxis.range[1] == pytest.approx(0.165)
    assert [a.text for a in fig.layout.annotations] == ["0.70 ↑"]
    assert not attention_row(np.array([0.3, 0.3, 0.4])).layout.annotations


def test_log_scale_and_hidden_attention_sink_make_long_maps_readable():
    w = softmax_rows((6, 6))
    w[:, 0] += 5.0  # a sink: the first key takes most of every row
    w /= w.sum(axis=1, keepdims=True)
    hidden = attention_heatmap(w, scale="linear", hide_first=True)
    z = np.asarray(hidden.data[0].z, dtype=float)
    assert np.isnan(z[:, 0]).all() and hidden.data[0].zmax == pytest.approx(typical_peak(w))
    assert hidden.data[0].zmax < w[:, 1:].max()  # the short early rows saturate, as the "≥" says
    log = attention_heatmap(w, scale="log")
    z = np.asarray(log.data[0].z, dtype=float)
    np.testing.assert_allclose(z, np.log10(np.clip(w, w.max() * 1e-4, None)))
    assert log.data[0].zmax == pytest.approx(np.log10(w.max())) and log.data[0].colorbar.ticktext
    grid = attention_heads_grid(np.stack([w, w]), scale="log", hide_first=True)
    assert grid.layout.coloraxis.cmax == pytest.approx(np.log10(w[:, 1:].max()))


def test_attention_row_bars():
    w = softmax_rows((5,))
    fig = attention_row(w, ["a", "b", "c", "d", "e"], title="step 4")
    (bar,) = fig.data
    assert isinstance(bar, go.Bar)
    np.testing.assert_allclose(bar.y, w)
    assert list(bar.customdata) == ["a", "b", "c", "d", "e"]
    assert fig.layout.yaxis.title.text == "attention weight"
    assert fig.layout.xaxis.title.text == "key token"
    assert_page_friendly(fig)


def test_head_summary_two_maps():
    ent = RNG.random((3, 4))
    dist = RNG.random((3, 4)) * 10
    fig = head_summary(ent, dist)
    assert [type(t) for t in fig.data] == [go.Heatmap, go.Heatmap]
    np.testing.assert_allclose(fig.data[0].z, ent)
    np.testing.assert_allclose(fig.data[1].z, dist)
    # Each colour bar lies under its own map and names what it measures; one shared layer axis.
    assert [d.colorbar.title.text for d in fig.data] == ["entropy (nats)", "mean distance (tokens)"]
    assert all(d.colorbar.orientation == "h" for d in fig.data)
    assert fig.data[0].colorbar.x < 0.5 < fig.data[1].colorbar.x
    assert fig.layout.xaxis.title.text == "head" and fig.layout.yaxis.title.text == "layer"
    assert fig.layout.yaxis2.matches == "y" and not fig.layout.yaxis2.title.text
    every = head_summary(RNG.random((30, 9)), RNG.random((30, 9)))  # SmolLM2: every layer has a labelled row
    assert every.layout.yaxis.dtick == 1 and every.layout.height >= 30 * 14
    with pytest.raises(ValueError, match="same"):
        head_summary(ent, dist[:2])


# --- positional figures -------------------------------------------------------------------------


def test_pe_heatmap_is_diverging_and_centred():
    table = sinusoid(20, 16)
    fig = pe_heatmap(table)
    (trace,) = fig.data
    np.testing.assert_allclose(trace.z, table)
    assert trace.zmid == 0.0 and trace.zmin == -trace.zmax
    assert fig.layout.xaxis.title.text == "dimension" and fig.layout.yaxis.title.text == "position"
    assert_page_friendly(fig)


def test_pe_waves_one_line_per_dim():
    table = sinusoid(50, 16)
    fig = pe_waves(table, dims=[4, 5, 6, 7])
    assert [t.name for t in fig.data] == ["dim 4", "dim 5", "dim 6", "dim 7"]
    np.testing.assert_allclose(fig.data[2].y, table[:, 6])
    assert fig.layout.xaxis.title.text == "position"
    assert default_dims(512) == [0, 64, 128, 256]
    with pytest.raises(ValueError, match="outside"):
        pe_waves(table, dims=[16])


def test_pe_similarity_is_dot_product():
    table = sinusoid(12, 8)
    fig = pe_similarity(table)
    sim = np.asarray(fig.data[0].z)
    np.testing.assert_allclose(sim, table @ table.T)
    np.testing.assert_allclose(np.diag(sim), 4.0)  # sin² + cos² per pair, 4 pairs
    assert_page_friendly(fig)


def test_pe_base_comparison_stacks_two_bases():
    a, b = sinusoid(60, 16, 10000.0), sinusoid(60, 16, 1000.0)
    fig = pe_base_comparison(a, b, dims=[6, 10])
    assert [an.text for an in fig.layout.annotations] == ["base 10000", "base 1000"]
    assert len(fig.data) == 4
    np.testing.assert_allclose(fig.data[1].y, a[:, 10])
    np.testing.assert_allclose(fig.data[3].y, b[:, 10])
    assert fig.data[3].yaxis == "y2" and not fig.data[3].showlegend  # one legend entry per dim
    assert fig.data[0].line.color == fig.data[2].line.color
    with pytest.raises(ValueError, match="dimension count"):
        pe_base_comparison(a, sinusoid(60, 8))


def test_rope_frequencies_log_axes_and_wavelengths():
    inv_freq = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    fig = rope_frequencies(inv_freq, context_length=2048)
    np.testing.assert_allclose(fig.data[0].y, inv_freq)
    np.testing.assert_allclose(fig.data[1].y, 2 * np.pi / inv_freq)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "log"
    assert any("context 2048" in (a.text or "") for a in fig.layout.annotations)
    assert fig.layout.xaxis.title.text == "dimension pair i"


def test_rope_rotation_points_lie_on_unit_circle_at_p_theta():
    inv_freq = np.array([1.0, 0.1, 0.01])
    fig = rope_rotation(inv_freq, pair=1, positions=10)
    points = fig.data[1]
    angles = np.arange(10) * 0.1
    np.testing.assert_allclose(points.x, np.cos(angles))
    np.testing.assert_allclose(points.y, np.sin(angles))
    np.testing.assert_allclose(points.marker.color, np.arange(10))  # coloured by position
    assert fig.layout.yaxis.scaleanchor == "x"  # a circle, not an ellipse
    assert "wavelength" in fig.layout.title.text
    with pytest.raises(ValueError, match="out of range"):
        rope_rotation(inv_freq, pair=3, positions=10)


def test_rope_relative_scores_line():
    d = np.arange(0, 64)
    s = np.cos(d * 0.1)
    fig = rope_relative_scores(s, d)
    np.testing.assert_allclose(fig.data[0].x, d)
    np.testing.assert_allclose(fig.data[0].y, s)
    assert fig.layout.xaxis.title.text == "relative distance (tokens)"
    with pytest.raises(ValueError, match="same length"):
        rope_relative_scores(s, d[:-1])


def test_learned_table_and_cosine_similarity():
    table = RNG.normal(size=(10, 6))
    table[3] = 0.0  # a zero row must not produce NaN
    fig = learned_table_heatmap(table)
    np.testing.assert_allclose(fig.data[0].z, table)
    assert fig.data[0].zmid == 0.0
    sim = cosine_similarity(table)
    assert not np.isnan(sim).any()
    np.testing.assert_allclose(np.delete(np.diag(sim), 3), 1.0)
    fig = cosine_similarity_matrix(table)
    np.testing.assert_allclose(fig.data[0].z, sim)
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-1.0, 1.0)
    assert fig.data[0].colorscale[0][1] != fig.data[0].colorscale[-1][1]  # a real diverging scale


def test_relative_bias_lines_per_head():
    bias = RNG.normal(size=(3, 9))
    d = np.arange(-4, 5)
    fig = relative_bias_plot(bias, d)
    assert [t.name for t in fig.data] == ["head 0", "head 1", "head 2"]
    np.testing.assert_allclose(fig.data[2].y, bias[2])
    assert fig.layout.xaxis.title.text.startswith("relative distance")
    with pytest.raises(ValueError, match="distances"):
        relative_bias_plot(bias, d[:5])


# --- sampling -----------------------------------------------------------------------------------


CANDIDATES = [
    {"token": " Paris", "id": 7, "stages": {"raw": 0.50, "repetition_penalty": 0.50, "temperature": 0.62,
                                            "top_k": 0.70, "top_p": 1.0}, "removed_by": None, "chosen": True},
    {"token": "<script>", "id": 8, "stages": {"raw": 0.20, "repetition_penalty": 0.20, "temperature": 0.18,
                                              "top_k": 0.30, "top_p": 0.0}, "removed_by": "top_p",
     "chosen": False},
    {"token": " the", "id": 9, "stages": {"raw": 0.10, "repetition_penalty": 0.04, "temperature": 0.02,
                                          "top_k": 0.0, "top_p": 0.0}, "removed_by": "top_k", "chosen": False},
]


def test_candidate_funnel_bars_per_stage_in_pipeline_order():
    fig = candidate_funnel(CANDIDATES)
    assert [t.name for t in fig.data] == ["raw softmax", "repetition penalty", "temperature", "top-k", "top-p"]
    assert all(isinstance(t, go.Bar) and t.orientation == "h" for t in fig.data)
    np.testing.assert_allclose(fig.data[2].x, [0.62, 0.18, 0.02])
    assert fig.layout.barmode == "group"
    assert fig.layout.xaxis.title.text == "probability"
    assert_page_friendly(fig)


def test_candidate_funnel_marks_removed_and_chosen():
    fig = candidate_funnel(CANDIDATES)
    notes = [a.text for a in fig.layout.annotations]
    assert "<i>removed by top-k</i>" in notes and "<i>removed by top-p</i>" in notes
    assert "<b>chosen</b>" in notes
    colours = fig.data[0].marker.color
    assert colours[1] == colours[2] == "#bdbdbd" != colours[0]  # removed rows greyed
    (band,) = fig.layout.shapes  # highlight band behind the chosen row
    assert (band.y0, band.y1) == (-0.5, 0.5)
    ticks = list(fig.layout.yaxis.ticktext)
    assert ticks[0].startswith("<b>▶") and "␣Paris" in ticks[0]
    assert "&lt;script&gt;" in ticks[1] and "<script>" not in ticks[1]
    assert "#9e9e9e" in ticks[2]


def test_candidate_funnel_skips_stages_that_did_not_run_and_handles_empty():
    only = [{"token": "a", "id": 1, "stages": {"raw": 0.6, "temperature": 0.7}, "removed_by": None,
             "chosen": True}]
    fig = candidate_funnel(only)
    assert [t.name for t in fig.data] == ["raw softmax", "temperature"]
    empty = candidate_funnel([])
    assert len(empty.data) == 0 and "no candidates" in empty.layout.annotations[0].text
    with pytest.raises(ValueError, match="stages"):
        candidate_funnel([{"token": "a"}])


BEAMS = [
    [{"tokens": "The", "score": -0.5, "finished": False}, {"tokens": "A", "score": -1.2, "finished": False}],
    [{"tokens": "The cat", "score": -0.9, "finished": True}, {"tokens": "A <dog>", "score": -1.5,
                                                              "finished": False}],
]


def test_beam_table_rows_and_finished_shading():
    fig = beam_table(BEAMS)
    (table,) = fig.data
    assert isinstance(table, go.Table)
    assert list(table.header.values) == ["step", "rank", "hypothesis", "score", "status"]
    steps, ranks, text, scores, status = (list(v) for v in table.cells.values)
    assert steps == [1, 1, 2, 2] and ranks == [0, 1, 0, 1]  # steps counted from 1, as the live screen
    assert text[3] == "A &lt;dog&gt;"
    assert scores[2] == "-0.900" and status == ["open", "open", "finished", "open"]
    assert table.cells.fill.color[0][2] == "#e5f5e0"
    assert_page_friendly(fig)


def test_beam_tree_links_each_beam_to_its_prefix():
    fig = beam_tree(BEAMS)
    edges, nodes = fig.data
    assert list(edges.x) == [1, 2, None, 1, 2, None]  # steps counted from 1, as the live screen
    assert list(edges.y) == [0, 0, None, 1, 1, None]  # "The cat" <- "The", "A <dog>" <- "A"
    assert list(nodes.text) == ["The", "A", "␣cat", "␣&lt;dog&gt;"]
    assert list(nodes.marker.symbol) == ["circle", "circle", "star", "circle"]
    explicit = [BEAMS[0], [{"tokens": "x", "score": -2.0, "finished": False, "parent": 1}]]
    assert list(beam_tree(explicit).data[0].y) == [1, 0, None]


def test_a_long_beam_search_keeps_only_the_winning_path_labelled():
    words = [f" w{i}" for i in range(40)]
    beams = [[{"tokens": "".join(words[: t + 1]), "score": -t, "finished": t == 39},
              {"tokens": "".join(words[:t]) + " other", "score": -t - 1.0, "finished": False}] for t in range(40)]
    fig = beam_tree(beams, final="".join(words))
    grey, winning, nodes = fig.data
    assert winning.line.color == "#e6550d" and len([x for x in winning.x if x is not None]) == 2 * 39
    labelled = [text for text in nodes.text if text]
    assert labelled == [display_token(w) for w in words]  # 40 labels on the winning path, none on the others
    assert fig.layout.xaxis.dtick > 1


# --- cache --------------------------------------------------------------------------------------


def test_cache_growth_units_and_series():
    steps = [1, 2, 3, 4]
    used = [n * 3 * 2**20 for n in steps]  # 3 MiB per token
    fig = cache_growth(steps, used, [12 * 2**20] * 4, [3 * u for u in used])
    assert [t.name for t in fig.data] == ["KV cache used", "allocated (static buffer)", "MHA equivalent"]
    assert fig.layout.yaxis.title.text == "memory (MiB)"
    np.testing.assert_allclose(fig.data[0].y, [3, 6, 9, 12])
    assert "3.00 MiB<br>(3,145,728 bytes)" == fig.data[0].customdata[0]  # two short lines (a phone)
    assert fig.layout.annotations[0].text == "3× smaller than MHA"
    assert_page_friendly(fig)
    small = cache_growth([1], [300], [512], [300])  # largest value 512 B stays in bytes
    assert small.layout.yaxis.title.text == "memory (B)" and not small.layout.annotations
    with pytest.raises(ValueError, match="one value per step"):
        cache_growth([1, 2], [1], [1, 2], [1, 2])


def test_cache_growth_hides_a_dwarfing_static_buffer():
    steps = list(range(1, 11))
    used = [s * 4096 for s in steps]  # up to 40 KiB
    fig = cache_growth(steps, used, [64 * 2**20] * 10, [3 * u for u in used])  # 64 MiB buffer
    allocated = fig.data[1]
    assert allocated.visible == "legendonly" and allocated.name == "allocated (static buffer): 64.00 MiB"
    assert fig.layout.yaxis.title.text == "memory (KiB)"  # unit follows what is drawn
    assert fig.data[0].visible is True


def test_format_bytes():
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(100) == "100 B"
    assert format_bytes(5 * 2**30) == "5.00 GiB"


def test_timing_comparison():
    with_c = {"prefill_ms": 100.0, "decode_ms_per_token": 20.0, "tokens_per_s": 50.0}
    without = {"prefill_ms": 100.0, "decode_ms_per_token": 80.0, "tokens_per_s": 12.5}
    fig = timing_comparison(with_c, without)
    names = [t.name for t in fig.data]
    assert names.count("with KV cache") == 2 and names.count("without KV cache") == 2
    np.testing.assert_allclose(fig.data[2].y, [100.0, 80.0])
    assert any("4.00× faster decode" in a.text for a in fig.layout.annotations)
    assert fig.layout.barmode == "group"
    assert_page_friendly(fig)
    # Without throughput numbers only the time panel is drawn.
    assert len(timing_comparison({"prefill_ms": 1, "decode_ms_per_token": 1},
                                 {"prefill_ms": 1, "decode_ms_per_token": 2}).data) == 2
    with pytest.raises(ValueError, match="missing"):
        timing_comparison({"prefill_ms": 1.0}, without)


def test_viz_imports_neither_torch_nor_gradio():
    code = "import sys, playground.viz; print('torch' in sys.modules, 'gradio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_kv_formula_fills_the_seed_formula_and_matches_bytes():
    from playground.viz import kv_formula

    stats = {"layers": 4, "batch": 1, "kv_heads": 2, "query_heads": 8, "tokens": 37, "head_dim": 32,
             "element_size": 4}
    text = kv_formula(stats)
    total = 2 * 4 * 1 * 2 * 37 * 32 * 4
    assert "2 · 4 · 1 · 2 · 37 · 32 · 4" in text
    assert f"{total:,} bytes" in text
    assert f"{total * 4:,} bytes" in text and "4× more" in text  # MHA line for GQA
    mha = kv_formula({**stats, "query_heads": 2})
    assert "MHA" not in mha
    with pytest.raises(ValueError, match="missing"):
        kv_formula({"layers": 1})


def test_rope_score_curve_starts_at_head_dim_and_decays():
    from playground.viz import rope_score_curve

    inv_freq = 1.0 / (10000 ** (np.arange(0, 64, 2) / 64))
    d = np.arange(0, 512)
    s = rope_score_curve(inv_freq, d)
    assert s.shape == (512,)
    assert s[0] == pytest.approx(64.0)
    assert np.abs(s[256:]).mean() < s[0] / 2 and s[1:].max() < s[0]


def test_a_chinese_title_breaks_by_its_drawn_width():
    """A Chinese character is drawn two columns wide: 25 of them run past a 400-px phone as surely as 50 letters."""
    from playground.viz._common import columns

    assert columns("第 6 步") == 7 and columns("KV") == 2  # two characters, two spaces, a digit
    title = "自注意力:每个头的注意力熵和平均距离(全部层与全部头)"
    lines = wrap_title(title).split("<br>")
    assert len(lines) == 2 and "".join(lines) == title and all(columns(line) <= TITLE_CHARS for line in lines)
    assert wrap_title("为什么是 ␣Paris:每个部分在它的 logit 中所占的份额与方向") == (
        "为什么是 ␣Paris:<br>每个部分在它的 logit 中所占的份额与方向")
    assert wrap_title("第 6 步:候选词经过采样流程") == "第 6 步:候选词经过采样流程"
