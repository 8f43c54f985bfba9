"""The generated text as HTML: one span per token, shaded by the probability it was chosen with.

Token dicts: {"token": str, "id": int, "prob": float | None, "step": int (optional)}.
prob None marks a prompt token (no sampling step): drawn unshaded and not clickable. Without an
explicit "step", generated tokens are numbered 0, 1, 2... in order, prompt tokens not counted.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

# Light-to-strong blue (ColorBrewer Blues ends); one hue reads well for colour-blind users.
_LOW = (239, 243, 255)
_HIGH = (8, 81, 156)
_DARK_TEXT_LIMIT = 0.6  # above this probability the background is dark enough for white text


def prob_colour(prob: float) -> str:
    """Background colour for a probability in [0, 1] (clipped): light = unlikely, strong = likely."""
    p = min(1.0, max(0.0, float(prob)))
    r, g, b = (round(lo + (hi - lo) * p) for lo, hi in zip(_LOW, _HIGH))
    return f"rgb({r}, {g}, {b})"


NEWLINE_MARK = "↵"  # drawn before each newline so a newline token has a visible, clickable box


def _span(tok: dict, default_step: int, selected: int | None) -> str:
    text = html.escape(str(tok.get("token", "")), quote=True).replace("\n", NEWLINE_MARK + "\n")
    prob = tok.get("prob")
    tid = tok.get("id")
    if prob is None:
        tip = html.escape(f"prompt token · id {tid}", quote=True)
        return f'<span class="tok prompt" title="{tip}">{text}</span>'
    step = int(tok.get("step", default_step))
    p = float(prob)
    colour = "#ffffff" if p > _DARK_TEXT_LIMIT else "#111111"
    outline = "outline: 2px solid #ff9800;" if selected == step else ""
    tip = html.escape(f"step {step} · id {tid} · p = {p:.3f}", quote=True)
    return (
        f'<span class="tok" data-step="{step}" title="{tip}" '
        f'style="background:{prob_colour(p)};color:{colour};border-radius:3px;cursor:pointer;{outline}">'
        f"{text}</span>"
    )


def tokens_html(tokens: Sequence[dict], selected: int | None = None) -> str:
    """HTML for the token stream; every generated token's span has data-step for the inspector.

    Token text is HTML-escaped (a token may be `<script>`); spaces and newlines are preserved by
    `white-space: pre-wrap`, and each newline is preceded by ↵ so a newline token can be seen,
    hovered and clicked. `selected` outlines the span of that step.
    """
    spans, generated = [], 0
    for tok in tokens:
        spans.append(_span(tok, generated, selected))
        generated += tok.get("prob") is not None
    return (
        '<div class="token-stream" style="white-space:pre-wrap;font-family:ui-monospace,monospace;'
        f'line-height:1.7;word-break:break-word">{"".join(spans)}</div>'
    )
