"""The game link as a QR code (`playground.app.qr`): an inline SVG of the link's modules plus the quiet zone."""

from __future__ import annotations

import re

import segno

from playground.app.qr import QUIET_ZONE, qr_html, qr_svg


def test_the_qr_code_is_an_svg_of_the_link_s_modules():
    link = "https://example.org/playground/?game=AbC123xyz_-9"
    svg = qr_svg(link)
    size = segno.make(link, micro=False).symbol_size(scale=1, border=0)[0]
    assert svg.startswith("<svg") and f'viewBox="0 0 {size + 2 * QUIET_ZONE} {size + 2 * QUIET_ZONE}"' in svg
    assert 'width="' not in svg.split(">")[0]  # sized by the page's style, not by the SVG


def test_the_block_escapes_the_link_and_is_empty_without_one():
    assert qr_html("") == ""
    block = qr_html('https://x/?game=a"b<')
    assert 'data-link="https://x/?game=a&quot;b&lt;"' in block and re.search(r"<svg[^>]*pg-game-qr-svg", block)
