"""The attention figures of a long real-model-like run, drawn by plotly.js in headless Chromium at a desktop
(1440 px) and a phone (400 px) width: no two labels, titles or colour-bar texts overlap.

The maps are shaped like SmolLM2's on a 271-token run (9 heads in 3 KV groups, 30 layers, the first token
taking most of every row); the figures are the builders' own, rendered with the plotly.js that ships in
the `plotly` package; the titles are as long as the page's own.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import plotly.io as pio
import pytest

from playground import viz
from playground.viz import kv_policy, logit_lens

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--allow-file-access-from-files"]
WIDTHS = {"desktop": 1440, "phone": 400}
T = 271
WORDS = ["<|im_start|>", "system", "↵", "You", "␣are", "␣a", "␣helpful", "␣assistant", "␣Transformer", "␣language",
         "␣model", "␣tokenizer", "␣embeddings", "␣attention", ",", ".", "␣the", "␣key", "-value", "␣cache"]

# Every text box plotly drew, with its font size and rotation, by role (a heatmap's cell text: "cell", with the
# plot area it is clipped to).
BOXES = """() => [...document.querySelectorAll('.main-svg text')].filter((e) => e.textContent.trim()).map((e) => {
  const r = e.getBoundingClientRect();
  const area = e.closest('.heatmaplayer') && document.querySelector('.nsewdrag').getBoundingClientRect();
  return {text: e.textContent, x: r.x, y: r.y, w: r.width, h: r.height,
          size: parseFloat(getComputedStyle(e).fontSize), rotated: /rotate/.test(e.getAttribute('transform') || ''),
          axis: e.closest('.xtick') ? 'x' : e.closest('.ytick') ? 'y' : area ? 'cell' : '',
          area: area ? {x: area.x, w: area.width} : null};
})"""


def _sink_map(rng: np.random.Generator) -> np.ndarray:
    """(h, T, T) causal maps of one layer: the first key takes 30-70% of every row, a few recent keys most of
    the rest."""
    logits = rng.normal(size=(9, T, T)) * 1.5
    logits += 3.0 * np.exp(-np.abs(np.arange(T)[:, None] - np.arange(T)[None, :]) / 3.0)  # local heads
    logits[..., 0] += 4.0
    logits = np.where(np.tril(np.ones((T, T), dtype=bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def figures() -> dict:
    rng = np.random.default_rng(0)
    entropy, distance, layer = [], [], None
    for i in range(30):  # 30 layers, as SmolLM2; one layer's maps held at a time
        m = _sink_map(rng)
        entropy.append(viz.attention_entropy(m))
        distance.append(viz.mean_attention_distance(m))
        if i == 14:
            layer = m
    entropy, distance = np.stack(entropy), np.stack(distance)
    labels = [WORDS[i % len(WORDS)] for i in range(T)]
    return {
        "grid": viz.attention_heads_grid(layer, labels, labels, title="decoder self-attention: all heads of layer 14",
                                         kv_groups=3),
        "heatmap": viz.attention_heatmap(layer[0], labels, labels, title="decoder self-attention, layer 14, head 0",
                                         highlight_row=T - 1),
        "row": viz.attention_row(layer[0][-1], labels, title="Row of query 270 (' decoder'), layer 14, head 0"),
        "summary": viz.head_summary(entropy, distance,
                                    title="decoder self-attention: entropy and mean distance of every head"),
        # SmolLM2's logit lens: 31 rows, the chosen token's rank in thousands low down (issue 36: its last column
        # was cut at 400 px)
        "lens": logit_lens.logit_lens_figure([
            {"name": "embedding" if i == 0 else f"block {i - 1}", "token_texts": [WORDS[(i + j) % len(WORDS)]
                                                                                  for j in range(5)],
             "token_ids": list(range(5)), "probs": [0.31, 0.2, 0.1, 0.05, 0.01], "rank": 12345 if i < 20 else 1,
             "prob": 0.00004 if i < 20 else 0.987} for i in range(31)], step=11,
            title="Logit lens · step 12").update_layout(width=336),  # the page's lesson plot on a 400-px phone
        # the KV-cache lab's divergence along a 48-token run (issue 36: its step labels overlapped)
        "divergence": kv_policy.divergence_figure(
            {"kl": list(rng.gamma(1.0, 0.2, 48)), "prob": list(rng.uniform(0, 1, 48)), "rank": [1] * 48,
             "first_difference": 20}, [WORDS[i % len(WORDS)] for i in range(48)]),
    }


@pytest.fixture(scope="module")
def drawn(figures, tmp_path_factory) -> dict:
    """(figure, width) -> every text box plotly drew."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Debian chromium is not installed (apt-get install -y chromium)", pytrace=False)
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    plotly_js = Path(pio.__file__).resolve().parents[1] / "package_data" / "plotly.min.js"
    folder = tmp_path_factory.mktemp("figures")
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for size, width in WIDTHS.items():
                page = browser.new_page(viewport={"width": width, "height": 900})
                for name, fig in figures.items():
                    html = folder / f"{name}.html"
                    html.write_text(f'<html><head><meta charset="utf-8"><script src="{plotly_js.as_uri()}"></script>'
                                    '</head><body style="margin:0;padding:8px">'
                                    + fig.to_html(include_plotlyjs=False, full_html=False) + "</body></html>")
                    page.goto(html.as_uri())
                    page.wait_for_selector(".main-svg")
                    out[name, size] = page.evaluate(BOXES)
                page.close()
        finally:
            browser.close()
    return out


def _overlap(a: dict, b: dict, slack: float = 1.0) -> bool:
    return (a["x"] + slack < b["x"] + b["w"] and b["x"] + slack < a["x"] + a["w"]
            and a["y"] + slack < b["y"] + b["h"] and b["y"] + slack < a["y"] + a["h"])


@pytest.mark.parametrize("size", list(WIDTHS))
@pytest.mark.parametrize("name", ["grid", "heatmap", "row", "summary", "divergence"])
def test_no_label_or_title_overlaps_another(drawn, name, size):
    boxes = drawn[name, size]
    assert boxes, "nothing was drawn"
    width = WIDTHS[size]
    for box in boxes:
        assert box["x"] >= -1 and box["x"] + box["w"] <= width + 1, f"{box['text']!r} runs off the {width}-px page"
        assert box["y"] >= 0, f"{box['text']!r} is cut off at the top"
    # Rotated tick labels lie on parallel slanted lines: they are apart when neighbours' anchors are at least
    # one line of text apart across the slant (60°), whatever their axis-aligned boxes do; each label
    # ends at its tick, so the boxes' right edges are the anchors.
    for axis in ("x", "y"):
        ticks = sorted((b for b in boxes if b["axis"] == axis), key=lambda b: (b["x"], b["y"]))
        if len(ticks) < 2:
            continue
        if any(b["rotated"] for b in ticks):
            ends = sorted(b["x"] + b["w"] for b in ticks)  # each slanted label ends at its tick (top right)
            gaps = np.diff(ends) * np.sin(np.radians(60))
            assert gaps.min() >= ticks[0]["size"], f"{name} {size}: slanted {axis} labels closer than a line"
        else:
            for i, a in enumerate(ticks):
                for b in ticks[i + 1:]:
                    assert not _overlap(a, b), f"{name} {size}: {axis} labels {a['text']!r} and {b['text']!r} overlap"
    # Everything else (titles, subplot titles, colour bars, axis titles) keeps clear of everything.
    others = [b for b in boxes if not b["axis"]]
    for i, a in enumerate(others):
        for b in others[i + 1:] + [t for t in boxes if t["axis"]]:
            assert not _overlap(a, b), f"{name} {size}: {a['text']!r} overlaps {b['text']!r}"


def test_long_axes_show_fewer_labels_on_a_phone_than_on_a_desktop(drawn):
    for name in ("heatmap", "row"):
        phone = [b for b in drawn[name, "phone"] if b["axis"] == "x"]
        desktop = [b for b in drawn[name, "desktop"] if b["axis"] == "x"]
        assert 4 <= len(phone) < len(desktop) < T, (name, len(phone), len(desktop))
        assert {b["text"] for b in desktop} <= set(WORDS)  # tokens, not positions


def test_the_divergence_shows_some_step_labels_on_a_phone_and_all_that_fit_on_a_desktop(drawn):
    phone = [b for b in drawn["divergence", "phone"] if b["axis"] == "x"]
    desktop = [b for b in drawn["divergence", "desktop"] if b["axis"] == "x"]
    assert 4 <= len(phone) < len(desktop) <= 48, (len(phone), len(desktop))


@pytest.mark.parametrize("size", list(WIDTHS))
def test_the_logit_lens_cells_keep_their_text_inside_the_plot(drawn, size):
    """Every cell's text, the chosen token's column last, lies inside the plot area (outside it, plotly clips it),
    the figure as wide as the page's lesson plot on a 400-px phone (336 px)."""
    cells = [b for b in drawn["lens", size] if b["axis"] == "cell"]
    assert len(cells) >= 31 * 6
    for b in cells:
        assert b["area"]["x"] - 1 <= b["x"] and b["x"] + b["w"] <= b["area"]["x"] + b["area"]["w"] + 1, \
            f"{size}: the cell text {b['text']!r} is cut by the plot's edge"
