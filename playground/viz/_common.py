"""Shared layout and label helpers for the figure builders (private to `playground.viz`)."""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from playground.viz._language import texts

# Leaves room for colour bars and long token labels inside a 1280-px page.
MARGIN = dict(l=70, r=30, t=70, b=60)
PROB_SCALE = "Viridis"  # sequential, for probabilities
SIGNED_SCALE = "RdBu"  # diverging, always centred at 0
MAX_TICKS = 48  # beyond this, token tick labels overlap; hover still shows every token
FITS_ANY_WIDTH = 24  # token labels that fit a 400-px-wide phone's axis, each one shown; beyond, the drawn width decides
MAX_TICK_CHARS = 12  # longer token labels are cut with "…" on the axes (hover shows them whole)

# The analyses name the residual stream's layers "embedding", "block 0", "block 1", …
_T = texts("_common")  # this module's words, from playground/locales/


HOVER_FONT_PX = 12  # hover labels: small enough that a few short lines fit beside a point on a 400-px phone
TITLE_CHARS = 40  # a title longer than this runs past a 400-px phone's figure (plotly never wraps titles)


def columns(text: str) -> int:
    """How wide a text is drawn, in columns of a Latin letter: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in html.unescape(text))


def _wide(c: str) -> bool:
    return unicodedata.east_asian_width(c) in "WF"


def wrap_title(title: str, width: int = TITLE_CHARS) -> str:
    """A one-line title wider than `width` columns (a Chinese character counts two), broken once where the two
    lines come out most even: at a ": ", ", ", " · " (or "：", "，", "、",
                                                      or ":" before Chinese) if one keeps the first line within
    `width`, else at a space, else between two Chinese characters. Titles with their own line breaks are kept."""
    if "<br>" in title or columns(title) <= width:
        return title
    total = columns(title)

    def inside_markup(i: int) -> bool:
        head = title[:i]
        return head.rfind("<") > head.rfind(">") or head.rfind("&") > head.rfind(";")

    for marks in ((": ", ", ", " · ", "：", "，", "、"), (" ",), None):
        cuts = []  # (columns of the first line, where it ends, where the second starts)
        for i in range(1, len(title)):
            if marks is None:
                found = (_wide(title[i - 1]) or _wide(title[i])) and not inside_markup(i)
                end, start = i, i
            else:
                m = next((m for m in marks if title.startswith(m, i)), None)
                if m is None and marks[0] == ": " and title[i] in ":," and i + 1 < len(title) and _wide(title[i + 1]):
                    m = title[i]  # "自注意力:每个头…": a Latin colon or comma before Chinese text
                found = m is not None
                end, start = (i + len(m.rstrip()), i + len(m)) if found else (i, i)
            if found and width // 3 <= columns(title[:i]) <= width and columns(title[:end]) <= width:
                cuts.append((columns(title[:i]), end, start))
        if cuts:
            _, end, start = min(cuts, key=lambda c: abs(c[0] - total / 2))
            return title[:end] + "<br>" + title[start:]
    return title


EXPORT_WIDTH = 1200  # px of a downloaded PNG: wide enough that no title is cut, whatever the screen's width
# Plotly's toolbar keeps only what a reader uses (save, zoom, pan, reset): on a 400-px phone a full bar sits over
# the title's end; it shows on hover (a tap on a phone) only.
MODEBAR_REMOVE = ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d", "toggleSpikelines",
                  "hoverClosestCartesian", "hoverCompareCartesian"]


def export_name(title: str) -> str:
    """A downloaded figure's file name from its title: "transformer-playground-attention-layer-2-head-3"."""
    plain = html.unescape(re.sub(r"<sup>.*?</sup>|<[^>]+>", " ", title))
    words = re.findall(r"\w+", plain.lower())
    return "-".join(["transformer-playground", *words])[:80].rstrip("-")


def plotly_config(fig: go.Figure) -> dict:
    """The plotly.js config a figure is drawn with (Gradio's Plot reads it from the figure's JSON)."""
    title = fig.layout.title.text or ""
    return {"displaylogo": False, "displayModeBar": "hover", "modeBarButtonsToRemove": MODEBAR_REMOVE,
            "toImageButtonOptions": {"format": "png", "filename": export_name(title), "width": EXPORT_WIDTH,
                                     "height": int(fig.layout.height or 450), "scale": 2}}


class Figure(go.Figure):
    """A plotly figure whose JSON carries its plotly.js config too (export file name and size, toolbar):
    `go.Figure.to_json` writes only data and layout, and Gradio's Plot passes a top-level "config" on to
    Plotly.react."""

    def to_json(self, *args, **kwargs) -> str:
        text = super().to_json(*args, **kwargs)
        return text[:-1] + ', "config": ' + json.dumps(plotly_config(self)) + "}" if text.endswith("}") else text


def legend_below(height: int, gap_px: int = 80) -> dict:
    """A horizontal legend under the x axis's title: above the plot it wraps into rows on a 400-px phone and
    runs over the title. `gap_px` below the plot area of a figure `height` px tall (MARGIN's top and bottom)."""
    plot = max(int(height) - MARGIN["t"] - MARGIN["b"], 100)
    return dict(orientation="h", x=0, xanchor="left", y=-gap_px / plot, yanchor="top")


def finish(fig: go.Figure, title: str, height: int, **layout) -> go.Figure:
    """Apply the common look: title (wrapped to fit a phone), fixed height, page-filling width, margins;
    the figure comes back as a `Figure` whose JSON names its download after its title."""
    if type(fig) is go.Figure:
        fig.__class__ = Figure  # same object, same data: only its JSON gains the config
    fig.update_layout(
        # Anchored to the top of the figure, pushing the plot down when it takes two lines.
        title=dict(text=wrap_title(title), x=0.01, xanchor="left", yref="container", y=1, yanchor="top",
                   pad=dict(t=12), automargin=True),
        height=int(height),
        autosize=True,  # width follows the container, so it never overflows the page
        margin={**MARGIN, **layout.pop("margin", {})},
        template="plotly_white",
        hoverlabel=dict(font_family="monospace", font_size=HOVER_FONT_PX, align="left"),
        **layout,
    )
    return fig


def layer_name(name: str, lang: str = "en") -> str:
    """An analysis' layer name ("embedding", "block 3") in the current language; other names as given."""
    if name == "embedding":
        return _T(lang)["embedding"]
    kind, _, index = name.partition(" ")
    return _T(lang)["block"].format(i=int(index)) if kind == "block" and index.isdigit() else name


def display_token(token: str) -> str:
    """Make a token safe and visible in plotly text: whitespace shown, pseudo-HTML escaped.

    Plotly renders a small HTML subset in tick labels and hover text, so a token such as `<br>`
    would break the line and `<b>` would turn bold; entities are decoded back for display.
    """
    if token == "":
        return "∅"
    shown = token.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
    return html.escape(shown, quote=False)


def labels_or_index(labels: Sequence[str] | None, n: int, name: str) -> list[str]:
    """Displayable labels, defaulting to positions; the count must match the data."""
    if labels is None:
        return [str(i) for i in range(n)]
    labels = list(labels)
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the data has {n} entries; pass one label per entry")
    return [display_token(str(t)) for t in labels]


def token_ticks(labels: Sequence[str], max_ticks: int = MAX_TICKS) -> dict:
    """Tick settings for a numeric axis labelled by tokens.

    Numeric positions (not categories) because repeated tokens ("the" twice) would otherwise be
    merged into one category and the heatmap would silently lose rows.
    """
    n = len(labels)
    stride = max(1, int(np.ceil(n / max_ticks)))
    vals = list(range(0, n, stride))
    return dict(tickmode="array", tickvals=vals, ticktext=[short_label(labels[i]) for i in vals])


def token_axis(labels: Sequence[str], fits: int = FITS_ANY_WIDTH) -> tuple[list[str] | None, dict]:
    """Coordinates and axis settings for positions 0..n-1 labelled by their tokens, thinned to what fits.

    Up to `fits` labels, every one is a tick (numeric positions: coordinates None, the trace's default).
    Beyond that, the figure's drawn width decides: the positions become categories "0", "1", … whose
    tick text is aliased to the tokens, so plotly keeps only the labels that fit the axis as drawn
    (a phone shows fewer than a desktop, whole positions only) and hover still names every token.
    Returns (coordinates for the trace or None, settings for `update_xaxes` / `update_yaxes`).
    """
    if len(labels) <= fits:
        return None, token_ticks(labels, max_ticks=fits)
    positions = [str(i) for i in range(len(labels))]
    return positions, dict(type="category", tickmode="auto",
                           labelalias={p: short_label(label) for p, label in zip(positions, labels)})


def short_label(label: str, max_chars: int = MAX_TICK_CHARS) -> str:
    """An escaped display label cut to `max_chars` visible characters (entities kept whole)."""
    plain = html.unescape(label)
    if len(plain) <= max_chars:
        return label
    return html.escape(plain[: max_chars - 1], quote=False) + "…"


def as_array(x, ndim: int, name: str) -> np.ndarray:
    """Float numpy array of the expected rank, or a ValueError that names the expected shape."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    return arr


def pair_text(query_labels: Sequence[str], key_labels: Sequence[str]) -> np.ndarray:
    """(T, S) hover strings 'query → key' for attention cells."""
    q = np.asarray(query_labels, dtype=object)[:, None]
    k = np.asarray(key_labels, dtype=object)[None, :]
    return q + " → " + k


def display_text(text: str) -> str:
    """Escape running text (a beam hypothesis) for plotly; spaces kept, newlines shown as ↵."""
    return html.escape(text.replace("\n", "↵"), quote=False)


def empty_figure(message: str, title: str, height: int = 260) -> go.Figure:
    """A blank figure that says why there is nothing to show yet (e.g. before the first step)."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=14, color="grey"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return finish(fig, title, height=height)
