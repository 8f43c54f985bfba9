"""Figure details seen in screenshots (issue 29, item 9), asserted on the figures and on the live screen's own
functions: the "why this token" heads on their own colour scale and every bar labelled, a downloaded PNG named
after its title and wide enough for it, a small toolbar, the funnel's probability axis ending at 1, a tiny
probability read "<0.5%" (not "0%") and a tokenizer-less model's ids kept apart."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from playground import viz
from playground.viz import causal
from playground.viz._common import EXPORT_WIDTH, export_name

LIVE_JS = Path(__file__).resolve().parents[2] / "playground/ui/assets/live.js"
PAGE_CSS = Path(__file__).resolve().parents[2] / "playground/ui/assets/page.css"


def attribution(layers: int = 30, heads: int = 9) -> dict:
    rng = np.random.default_rng(0)
    h = rng.normal(scale=0.3, size=(layers, heads))
    h[23, 4] = 2.81
    mlps = rng.normal(scale=0.5, size=layers)
    mlps[27] = 29.9  # one MLP pushes ten times harder than any head
    return {"heads": h.tolist(), "mlps": mlps.tolist(), "other": {"embedding": 0.4, "bias": -0.2},
            "logit": 13.67, "total": 13.67}


def test_the_heads_heatmap_has_its_own_colour_scale_and_every_bar_its_label():
    data = attribution()
    fig = causal.attribution_figure(data, " Paris")
    heat = next(t for t in fig.data if t.type == "heatmap")
    assert heat.zmax == pytest.approx(2.81) and heat.zmin == pytest.approx(-2.81)  # not ±29.9, the MLP's
    bar = next(t for t in fig.data if t.type == "bar")
    axis = fig.layout[bar.yaxis.replace("y", "yaxis")]
    assert list(axis.tickvals) == list(bar.y) and len(bar.y) == 32  # 30 MLPs and 2 other parts, each named
    bar_row = axis.domain
    pixels = (bar_row[1] - bar_row[0]) * (fig.layout.height - 140)
    assert pixels / len(bar.y) >= 14, "a bar too thin for its label: plotly would drop every other one"


def test_a_downloaded_figure_is_named_after_its_title_and_wide_enough_for_it():
    fig = viz.attention_heatmap(np.eye(3).tolist(), title="Attention · layer 2, head 3<br><sup>the query row</sup>")
    config = json.loads(fig.to_json())["config"]  # what Gradio's Plot hands to Plotly.react
    export = config["toImageButtonOptions"]
    assert export["filename"] == "transformer-playground-attention-layer-2-head-3" != "newplot"
    assert export["width"] == EXPORT_WIDTH >= 1000 and export["height"] == fig.layout.height
    assert config["displaylogo"] is False and {"lasso2d", "select2d", "zoomIn2d"} <= set(config["modeBarButtonsToRemove"])
    zh = viz.attention_heatmap(np.eye(3).tolist(), lang="zh")
    assert json.loads(zh.to_json())["config"]["toImageButtonOptions"]["filename"] == "transformer-playground-注意力"
    assert export_name("<b>KV-cache memory</b>") == "transformer-playground-kv-cache-memory"


def test_the_funnel_s_probability_axis_ends_at_one():
    candidates = [{"token": " Paris", "stages": {"raw": 0.95, "temperature": 0.97}, "chosen": True},
                  {"token": " Lyon", "stages": {"raw": 0.03, "temperature": 0.02}, "removed_by": "top_k"}]
    fig = viz.candidate_funnel(candidates)
    assert fig.layout.xaxis.range[1] == 1.0
    chosen = next(a for a in fig.layout.annotations if "chosen" in a.text)
    assert chosen.xanchor == "right" and chosen.x <= 1.0  # drawn inside its bar, not past the axis
    small = viz.candidate_funnel([{"token": "a", "stages": {"raw": 0.2}, "chosen": True}])
    assert small.layout.xaxis.range[1] == pytest.approx(0.27)


def _live_function(*names: str) -> str:
    script = LIVE_JS.read_text(encoding="utf-8")
    out = []
    for name in names:
        start = script.index(f"function {name}(")
        end = script.index("\n}\n", start) + 3
        out.append(script[start:end])
    return "\n".join(out)


@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the live screen's functions")
def test_the_live_screen_reads_tiny_probabilities_and_ids_as_a_person_should():
    code = _live_function("pct", "isBytes", "idClass", "idsOnly") + (
        "\nconsole.log(JSON.stringify([pct(0), pct(0.0004), pct(0.0049), pct(0.005), pct(0.123), pct(0.999), pct(1),"
        " idClass('123', 123), idClass(' Paris', 3), idClass('7', 8), idClass('<0xE5>', 162),"
        " idClass(' <0xE2><0x80>', 590), idClass('<0xZZ>', 4),"
        " idsOnly({prompt: [['12', 12], ['333', 333]]}), idsOnly({prompt: [['12', 12], [' Paris', 7]]}), idsOnly({})]));")
    out = subprocess.run(["node", "-e", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out) == ["0%", "<0.5%", "<0.5%", "0.5%", "12.3%", "100%", "100%", " id", "", "", " bytes",
                               " bytes", "", True, False, False]


@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the live screen's functions")
def test_a_repair_keeps_the_steps_the_page_already_drew():
    """A lost frame makes the page ask for the run whole; the steps it holds that the whole value repeats
    stay on the page (a long run is not drawn again), from the first that differs on."""
    held = [[" The", 5, 0.5], [" cat", 9, 0.25], [" sat", 11, 0.125]]
    code = _live_function("samePrefix") + (
        f"\nconst held = {json.dumps(held)};"
        "\nconsole.log(JSON.stringify([samePrefix(held, held.concat([[' on', 3, 0.9]])), samePrefix(held, held.slice(0, 2)),"
        " samePrefix(held, [[' The', 5, 0.5], [' dog', 10, 0.25]]), samePrefix([], held), samePrefix(held, []),"
        " samePrefix(held, [[' The', 5, 0.75]])]));")
    out = subprocess.run(["node", "-e", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out) == [3, 2, 1, 0, 0, 0]


def test_the_page_keeps_tokens_whole_and_candidate_headers_uncut():
    css = PAGE_CSS.read_text(encoding="utf-8")
    rule = lambda selector: re.search(re.escape(selector) + r"\s*\{([^}]*)\}", css).group(1)  # noqa: E731
    assert "white-space: pre" in rule("#token-stream .tok")  # never " P|aris" across two lines
    assert "margin-right" in rule("#token-stream .tok.id") and "margin-right" in rule(".achip.id")
    header = rule(".pg-ctable th")
    assert "ellipsis" not in header and "white-space: normal" in header  # "raw softmax" wraps, never "softm…"


def test_legends_sit_under_the_axis_not_over_the_title():
    """Above the plot, a three-entry legend wraps into rows on a 400-px phone and runs over the title."""
    cache = viz.cache_growth([1, 2, 3], [1, 2, 3], [4, 4, 4], [3, 6, 9])
    funnel = viz.candidate_funnel([{"token": "a", "stages": {"raw": 0.6, "temperature": 0.7}, "chosen": True},
                                   {"token": "b", "stages": {"raw": 0.4, "temperature": 0.3}}])
    for fig in (cache, funnel):
        assert fig.layout.legend.yanchor == "top" and fig.layout.legend.y < -0.15, fig.layout.legend


def test_on_a_phone_the_toolbar_leaves_the_title_alone():
    css = PAGE_CSS.read_text(encoding="utf-8")
    phone = css[css.index("@media (max-width: 700px)"):]
    rule = re.search(r"\.js-plotly-plot \.modebar-container\s*\{([^}]*)\}", phone).group(1)
    assert "bottom: 0 !important" in rule and "top: auto !important" in rule
    bar = re.search(r"\.modebar-container \.modebar\s*\{([^}]*)\}", phone).group(1)  # the bar itself, inside it
    assert "bottom: 2px !important" in bar and "top: auto !important" in bar
    assert re.search(r'\.modebar-btn\[data-attr="dragmode"\][^{]*\{\s*display: none', phone)  # save buttons only


PHONE_PX = 400  # the phone's figure width (400 × 850)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_kv_chart_s_hover_label_fits_beside_a_point_on_a_phone(lang):
    """A hover label is drawn beside its point, on whichever side has room: a label wider than half the phone's
    figure is cut at the edge for a point in the middle. The KV chart's label (the allocated buffer's, the
    longest name; a long run's step; a size in the millions of bytes) fits in half of 400 px at its font size."""
    from playground.viz._common import columns

    steps = list(range(1, 1025))
    fig = viz.cache_growth(steps, [4096 * s for s in steps], [10**9] * len(steps), [16384 * s for s in steps],
                           lang=lang)
    layout = fig.layout
    assert layout.hovermode in (None, "closest")  # one point's label, never a unified box of every trace
    size = layout.hoverlabel.font.size
    assert size is not None and size <= 12 and layout.hoverlabel.font.family == "monospace"
    for trace in fig.data:
        template = re.sub(r"<extra>.*?</extra>", "", trace.hovertemplate)
        lines = template.replace("%{x}", str(steps[-1])).replace("%{customdata}", trace.customdata[-1]).split("<br>")
        px = max(columns(line) for line in lines) * 0.6 * size + 16  # a monospace column is 0.6 em; the box's padding
        assert px <= PHONE_PX / 2, (trace.name, lines, px)
