"""A token that is part of a character, shown as its bytes.

Byte-level tokenizers (GPT-2's BPE, SentencePiece's byte fallback) split a character they have no
piece for into its UTF-8 bytes: "é" is C3 A9, an emoji four bytes. Decoded alone, each such piece is
U+FFFD, so every one would read as the same "�". `readable_piece` gives such a piece its bytes
instead, as SentencePiece writes them ("<0xC3>"), and keeps any whole characters in it as text.
"""

from __future__ import annotations

import functools
import re

REPLACEMENT = "\ufffd"
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-to-character table (`bytes_to_unicode`), inverted: printable bytes stand for
    themselves, the other 68 are shifted to U+0100 and up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shifted)
            shifted += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def piece_bytes(piece: str) -> bytes | None:
    """The bytes a tokenizer's piece stands for: SentencePiece's "<0xC3>", or a byte-level BPE piece
    ("Ã", "Ġé"...); None for a piece of neither kind."""
    match = _BYTE_PIECE.fullmatch(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    alphabet = _byte_level_alphabet()
    if piece and all(c in alphabet for c in piece):
        return bytes(alphabet[c] for c in piece)
    return None


def shown_bytes(raw: bytes) -> str:
    """UTF-8 text with every byte that is not part of a whole character written as <0xNN>."""
    text = raw.decode("utf-8", errors="surrogateescape")  # a stray byte b becomes U+DC00 + b
    return "".join(f"<0x{ord(c) - 0xDC00:02X}>" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)


def readable_piece(decoded: str, piece: object) -> str:
    """`decoded` (one token decoded alone), or when it holds U+FFFD because the token is part of a
    character, its bytes (`piece`: the tokenizer's own string for the token)."""
    if REPLACEMENT not in decoded or not isinstance(piece, str):
        return decoded
    raw = piece_bytes(piece)
    if raw is None:
        return decoded
    return shown_bytes(raw)
