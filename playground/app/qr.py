"""The game link as a QR code, drawn as inline SVG by `segno` (pure Python): shown in projector mode, so a class
joins the room by pointing their phones at the projected screen. No Gradio, no model work.

    qr_html("https://…/?game=3f9c…")   # <div class="pg-game-qr"><svg viewBox="0 0 37 37" …></svg></div>

The SVG is drawn at one unit a module (its viewBox is the symbol and its quiet zone) and sized by the page's style,
so it scales with the projector's large type; dark modules on white, whatever the page's theme.
"""

from __future__ import annotations

import html as html_lib

import segno

QUIET_ZONE = 4  # modules of white around the symbol, as the QR standard asks (a reader needs them to find it)


def qr_svg(link: str) -> str:
    """The link as a QR code (never a Micro QR: a phone's camera may not read those): an `<svg>` whose viewBox is
    the symbol's modules plus the quiet zone on each side."""
    code = segno.make(link, micro=False)
    return code.svg_inline(scale=1, border=QUIET_ZONE, omitsize=True, dark="#000", light="#fff",
                           svgclass="pg-game-qr-svg", lineclass=None)


def qr_html(link: str) -> str:
    """The QR code's block under the game link ("" for no link); `data-link` names the link it spells."""
    if not link:
        return ""
    return f'<div class="pg-game-qr" data-link="{html_lib.escape(link)}">{qr_svg(link)}</div>'
