"""Target languages of multilingual translation checkpoints: their language-code tokens.

mBART-50, M2M100 and NLLB pick the output language by forcing a language-code token as the first
generated token (`GenerationConfig.forced_bos_token_id`). Which codes exist is a property of the
tokenizer; these functions read them, for a dropdown or a `--target-lang` flag.
"""

from __future__ import annotations

import re
from typing import Any

from playground.generation.config import SettingsError

# mBART "fr_XX" / "zh_CN", NLLB "fra_Latn" / "zho_Hans", M2M100 "__fr__".
LANGUAGE_CODE = re.compile(r"__[a-z]{2,3}__|[a-z]{2,3}_[A-Z][A-Za-z]{1,3}")


def language_codes(tokenizer: Any | None) -> dict[str, int]:
    """Language-code tokens the tokenizer knows, code -> token id, in id order; empty without any.

    Read from the tokenizer's own tables where it has them (M2M100's `lang_token_to_id`, mBART's
    `lang_code_to_id`) and from its special tokens shaped like a language code (NLLB, or any tokenizer
    whose codes were added as special tokens).
    """
    if tokenizer is None:
        return {}
    found: dict[str, int] = {}
    for table in ("lang_token_to_id", "lang_code_to_id"):
        mapping = getattr(tokenizer, table, None)
        if isinstance(mapping, dict):
            found.update({str(code): int(i) for code, i in mapping.items() if LANGUAGE_CODE.fullmatch(str(code))})
    for token in getattr(tokenizer, "all_special_tokens", ()):
        if isinstance(token, str) and token not in found and LANGUAGE_CODE.fullmatch(token):
            token_id = tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int):
                found[token] = token_id
    return dict(sorted(found.items(), key=lambda item: item[1]))


def language_token_id(tokenizer: Any | None, code: str) -> int:
    """The token id of a target language: its code as the tokenizer spells it ("fr_XX", "fra_Latn",
    "__fr__") or M2M100's short form ("fr"). Raises SettingsError listing some known codes."""
    codes = language_codes(tokenizer)
    for candidate in (code, f"__{code}__"):
        if candidate in codes:
            return codes[candidate]
    if not codes:
        raise SettingsError("this checkpoint's tokenizer has no language codes; pass --forced-bos-token-id instead")
    examples = ", ".join(list(codes)[:8])
    raise SettingsError(f"unknown target language {code!r}; this tokenizer knows {len(codes)} codes, e.g. {examples}")
