"""The prompt as the model will read it: its tokens, their ids, and byte tokens explained. No Gradio, no model work.

    view = read_prompt(lm, "中国的首都是哪里?", chat=True)   # tokenizing only (and the chat template)
    view.tokens[i].text, .id, .kind                           # "text", "byte", "special", "unknown", "template"
    view.chars                                                # each character spelled in UTF-8 bytes
    html(view, "zh")                                          # the view under the prompt box

Byte-level tokenizers (GPT-2's BPE, SentencePiece's byte fallback) spell a character they have no piece for in
its UTF-8 bytes, one or a few bytes per token: SmolLM2 reads 国 as the tokens "<0xE5><0x9B>" and "<0xBD>". Decoded
alone, such a token is "�"; here each is shown as its bytes, and the bytes are put back together into the
character they spell ("<0xE5> <0x9B> <0xBD> = 国, 3 UTF-8 bytes"), even when a character's bytes are split across
tokens, or a token holds the end of one character and the start of the next.
"""

from __future__ import annotations

import html as html_lib
from dataclasses import dataclass, field
from typing import Any

from playground.app.notes import error_line, render
from playground.app.play import prompt_tokens
from playground.app.settings import UISettings
from playground.app.words import t
from playground.checkpoints.tokenizer import guarded
from playground.token_pieces import REPLACEMENT, piece_bytes

MAX_SHOWN = 400  # chips drawn under the prompt box; the count says how many more there are
MAX_EXPLAINED = 12  # characters explained in words below them
SHOWN_EXPLAINED = 2  # of which in sight (the rest one click away, so the Generate button stays near the prompt)


@dataclass
class PromptToken:
    id: int
    text: str  # what the chip shows: the token's text, or its bytes ("<0xE5><0x9B>")
    kind: str  # "text", "byte" (a piece of a character's UTF-8 bytes), "special", "unknown" or "template"
    raw: bytes = b""  # a byte token's bytes
    chars: list[int] = field(default_factory=list)  # the ByteChars this byte token holds bytes of


@dataclass
class ByteChar:
    """A character the tokenizer spelled in bytes: its bytes and the tokens holding them."""

    char: str  # "" when its bytes do not make a whole character (the prompt was cut inside it)
    raw: bytes
    tokens: list[int]  # indices into PromptTokens.tokens, in order


@dataclass
class PromptTokens:
    tokens: list[PromptToken] = field(default_factory=list)
    chars: list[ByteChar] = field(default_factory=list)
    chat: bool = False  # the chat template wraps the prompt (its own tokens are kind "template")
    typed: tuple[int, int] | None = None  # with the chat template: the visitor's own tokens, tokens[lo:hi]
    notes: list[str] = field(default_factory=list)  # keyed notes: the prompt cut, chat unavailable
    error: str | None = None  # one line in the visitor's language when the prompt cannot be read


def read_prompt(lm: Any, text: str, *, chat: bool, lang: str = "en") -> PromptTokens:
    """What the model reads for the prompt box's `text`, as a run would read it (`play.prompt_tokens`: the app's
    caps, the chat template when on and available). An empty prompt reads nothing; a prompt the model cannot read
    is one line in `error`."""
    if not str(text or "").strip():
        return PromptTokens()
    settings = UISettings(prompt=str(text), chat=bool(chat))
    try:
        ids, notes = prompt_tokens(lm, settings)
    except Exception as exc:  # noqa: BLE001 - a prompt the model cannot read is one line, as Generate says it
        return PromptTokens(error=error_line(exc, lang, "tokens"))
    chat = bool(chat) and lm.chat_template_available
    view = PromptTokens(tokens=[_token(lm, i) for i in ids], chat=chat, notes=list(notes))
    if chat:
        _mark_template(lm, str(text), view)
    view.chars = spell(view.tokens)
    return view


def _token(lm: Any, token_id: int) -> PromptToken:
    # (no model: a view drawn while its run streams may have been given none when the run had no token yet)
    tokenizer = getattr(lm, "tokenizer", None)
    if tokenizer is None:  # a model without a tokenizer reads ids
        return PromptToken(token_id, str(token_id), "text")
    if token_id in set(getattr(tokenizer, "all_special_ids", ()) or ()):
        kind = "unknown" if token_id == getattr(tokenizer, "unk_token_id", None) else "special"
        return PromptToken(token_id, lm.detokenize([token_id]), kind)
    decoded = lm.detokenize([token_id])
    if REPLACEMENT in decoded:
        raw = piece_bytes(str(tokenizer.convert_ids_to_tokens(token_id)))
        if raw is not None:
            return PromptToken(token_id, lm.token_text(token_id), "byte", raw)
    return PromptToken(token_id, decoded, "text")


def _mark_template(lm: Any, text: str, view: PromptTokens) -> None:
    """The chat template's own tokens (around the visitor's text) become kind "template", found by the tokenizer's
    character offsets in the rendered prompt; left as they are where the offsets cannot be had."""
    try:
        rendered = lm.render_chat([{"role": "user", "content": text}])
        encoded = guarded(lm.tokenizer, rendered, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(encoded["input_ids"]), list(encoded["offset_mapping"])
    except Exception:  # noqa: BLE001 - a slow tokenizer has no offsets (a panicking one none either): left as is
        return
    shown = [t.id for t in view.tokens]
    if ids[-len(shown):] != shown:  # not the ids the run reads (a template that renders differently): leave them
        return
    offsets = offsets[-len(shown):]
    start = rendered.rfind(text)
    end = start + len(text)
    typed = []
    for index, (token, (lo, hi)) in enumerate(zip(view.tokens, offsets)):
        if start < 0 or hi <= start or lo >= end:
            if token.kind == "text":
                token.kind = "template"
        else:
            typed.append(index)
    if typed:
        view.typed = (typed[0], typed[-1] + 1)


def spell(tokens: list[PromptToken]) -> list[ByteChar]:
    """The characters the byte tokens spell, in order: UTF-8 read across token boundaries (a character may take
    bytes from several tokens, a token may end one character and start the next). One-byte characters (ASCII) a
    byte token holds need no spelling out and are skipped; bytes that make no whole character (a character cut
    by the prompt's limit, a text token in the middle) are kept as one incomplete entry."""
    chars: list[ByteChar] = []
    pending: list[tuple[int, int]] = []  # (byte, token index) not yet part of a whole character

    def close(complete: bool) -> None:
        if not pending:
            return
        raw = bytes(b for b, _ in pending)
        owners = list(dict.fromkeys(i for _, i in pending))
        pending.clear()
        if complete and len(raw) == 1:  # ASCII inside a byte token: plain text, nothing to explain
            return
        chars.append(ByteChar(raw.decode("utf-8") if complete else "", raw, owners))
        for i in owners:
            tokens[i].chars.append(len(chars) - 1)

    for index, token in enumerate(tokens):
        if token.kind != "byte":
            close(False)  # a character's bytes cannot go on after a whole-text token
            continue
        for byte in token.raw:
            stray = bool(pending) and _length(pending[0][0]) == 0  # bytes of a character whose start is gone
            if pending and _is_continuation(byte) and (stray or len(pending) < _length(pending[0][0])):
                pending.append((byte, index))
            else:
                close(False)
                pending.append((byte, index))
            if len(pending) == _length(pending[0][0]):
                close(_valid(bytes(b for b, _ in pending)))
    close(False)
    return chars


def byte_chars(lm: Any, ids: list[int], index: int) -> list[ByteChar]:
    """The characters token `index` of `ids` (a run's tokens) holds UTF-8 bytes of, read as `spell` reads a prompt,
    over the tokens near it (a character takes at most 4 bytes); [] for a token that is not a byte token."""
    lo = max(0, index - 4)
    tokens = [_token(lm, i) for i in ids[lo:index + 5]]
    if tokens[index - lo].kind != "byte":
        return []
    chars = spell(tokens)
    return [chars[c] for c in tokens[index - lo].chars]


def is_byte_token(lm: Any, token_id: int) -> bool:
    """Whether the tokenizer spells this token as raw bytes (a piece of a character's UTF-8 bytes)."""
    return _token(lm, token_id).kind == "byte"


def _length(lead: int) -> int:
    """How many bytes a UTF-8 character starting with `lead` has; 0 for a byte that cannot start one."""
    if lead < 0x80:
        return 1
    if lead < 0xC0 or lead >= 0xF8:
        return 0
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


def _valid(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- words and the view under the prompt box ----------------------------------------------------------------


def byte_words(raw: bytes) -> str:
    return " ".join(f"<0x{b:02X}>" for b in raw)


def explain(char: ByteChar, lang: str) -> str:
    """"<0xE5> <0x9B> <0xBD> = 国, 3 UTF-8 bytes (in 2 tokens)" in `lang`."""
    if not char.char:
        return t("tok_bytes_cut", lang, bytes=byte_words(char.raw))
    words = t("tok_char_bytes", lang, bytes=byte_words(char.raw), char=char.char, n=len(char.raw))
    if len(char.tokens) > 1:
        words += t("tok_char_tokens", lang, tokens=len(char.tokens))
    return words


def token_bytes_words(chars: list[ByteChar], lang: str) -> str:
    """A generated byte token in words: not a character but UTF-8 bytes of one ("<0xE5> <0x9B> <0xBD> = 国, 3 UTF-8
    bytes"), or bytes that make no whole character with the tokens beside it."""
    whole = [c for c in chars if c.char]
    if whole:
        return t("tok_is_bytes", lang, what="; ".join(explain(c, lang) for c in whole))
    return t("tok_is_bytes_part", lang, bytes=" ".join(byte_words(c.raw) for c in chars)) if chars else ""


def shown(text: str) -> str:
    """A token in a chip: one line, its spaces visible (as the live screen labels tokens)."""
    if text == "":
        return "∅"
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")


def _chip(view: PromptTokens, index: int, lang: str) -> str:
    """One token's chip: its piece over its id, its kind and spelled characters in the title."""
    token = view.tokens[index]
    title = t("tok_title", lang, id=token.id)
    shade = ""
    if token.chars:
        title += " · " + "; ".join(explain(view.chars[c], lang) for c in token.chars)
        shade = f" pg-char{token.chars[0] % 2}"
    elif token.kind in ("special", "unknown", "template"):
        title += " · " + t(f"tok_kind_{token.kind}", lang)
    return (f'<span class="pg-ptok {token.kind}{shade}" data-i="{index}" data-id="{token.id}" '
            f'title="{html_lib.escape(title)}"><b>{html_lib.escape(shown(token.text))}</b><sub>{token.id}</sub></span>')


def _chips(view: PromptTokens, indices: range, lang: str) -> list[str]:
    """The chips of these tokens, at most `MAX_SHOWN` (then how many more)."""
    chips = [_chip(view, i, lang) for i in indices[:MAX_SHOWN]]
    if len(indices) > MAX_SHOWN:
        chips.append(f'<span class="pg-muted">{html_lib.escape(t("tok_more", lang, n=len(indices) - MAX_SHOWN))}</span>')
    return chips


def _box(chips: list[str]) -> str:
    return f'<div class="pg-ptok-chips">{"".join(chips)}</div>'


def legend(view: PromptTokens, lang: str) -> str:
    """What the chips' marks stand for: ␣ a space and ↵ a new line (always), ⇥ a tab (when one is there)."""
    words = t("tok_legend", lang)
    if any("\t" in token.text for token in view.tokens):
        words += " · " + t("tok_legend_tab", lang)
    return f'<span class="pg-ptok-legend">{html_lib.escape(words)}</span>'


def _token_rows(view: PromptTokens, lang: str) -> list[str]:
    """The head and the chips: with the chat template, the visitor's own tokens first, then the template's around
    them folded (in the order the model reads them, a gap where the visitor's stand); else all in order."""
    esc = html_lib.escape
    n = len(view.tokens)
    if not (view.chat and view.typed):
        head = t("tok_count_chat" if view.chat else "tok_count", lang, n=n)
        return [f'<div class="pg-ptok-head">{esc(head)} {legend(view, lang)}</div>', _box(_chips(view, range(n), lang))]
    lo, hi = view.typed
    head = t("tok_count_typed", lang, n=n, typed=hi - lo)
    gap = f'<span class="pg-ptok-gap">{esc(t("tok_typed_gap", lang, n=hi - lo))}</span>'
    around = _box([*_chips(view, range(lo), lang), gap, *_chips(view, range(hi, n), lang)])
    return [f'<div class="pg-ptok-head">{esc(head)} {legend(view, lang)}</div>',
            f'<div class="pg-ptok-typed">{_box(_chips(view, range(lo, hi), lang))}</div>',
            f'<details class="pg-ptok-template"><summary>{esc(t("tok_template_fold", lang, n=n - (hi - lo)))}'
            f'</summary>{around}</details>']


def html(view: PromptTokens, lang: str = "en") -> str:
    """The tokenizer view: a count and a legend, the chips (piece over id; byte tokens marked, each character's
    tokens coloured alike; the visitor's own first, the chat template's folded), then each spelled character in
    words. Every text from the checkpoint is escaped."""
    esc = html_lib.escape
    if view.error:
        return f'<div class="pg-ptoks"><p class="pg-ptok-error">{esc(view.error)}</p></div>'
    if not view.tokens:
        return ""
    n = len(view.tokens)
    lines = [f"<li>{esc(explain(c, lang))}</li>" for c in view.chars[:MAX_EXPLAINED]]
    if len(view.chars) > MAX_EXPLAINED:
        lines.append(f'<li class="pg-muted">{esc(t("tok_more_chars", lang, n=len(view.chars) - MAX_EXPLAINED))}</li>')
    parts = [f'<div class="pg-ptoks" data-count="{n}">', *_token_rows(view, lang)]
    if view.chars:  # the first characters in words at once; the rest, and why, one click away (the buttons stay near)
        parts.append(f'<ul class="pg-ptok-chars">{"".join(lines[:SHOWN_EXPLAINED])}</ul>')
        more = t("tok_why_more", lang, n=len(view.chars) - SHOWN_EXPLAINED) if len(view.chars) > SHOWN_EXPLAINED \
            else t("tok_why", lang)
        parts.append(f'<details class="pg-ptok-more"><summary>{esc(more)}</summary><p class="pg-ptok-hint">'
                     f'{esc(t("tok_bytes_hint", lang))}</p><ul class="pg-ptok-chars">{"".join(lines[SHOWN_EXPLAINED:])}'
                     '</ul></details>')
    for note in view.notes:
        parts.append(f'<p class="pg-muted">{esc(render(note, lang))}</p>')
    parts.append("</div>")
    return "".join(parts)
