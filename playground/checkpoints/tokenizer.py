"""Tokenizers from checkpoint files (never from remote code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "spiece.model", "source.spm", "vocab.json", "tokenizer.model")


def load_directory_tokenizer(directory: Path) -> tuple[Any | None, str | None]:
    """(tokenizer, None) or (None, why text input is unavailable)."""
    if not any((directory / name).exists() for name in TOKENIZER_FILES):
        return None, (
            f"no tokenizer files in {directory.name} (tokenizer.json, tokenizer_config.json...); "
            "text input is unavailable, pass token ids instead"
        )
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False), None
    except Exception as error:  # tokenizer libraries raise many types; report, keep the model usable
        return None, f"tokenizer files in {directory.name} could not be read ({type(error).__name__}: {error}); pass token ids instead"


def tokenizer_from_json(tokenizer_json: str, settings: dict[str, Any] | None = None) -> Any:
    """A fast tokenizer from a tokenizer.json string plus special-token settings (our own format)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    settings = dict(settings or {})
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer_json), **settings)


def tokenizer_to_json(tokenizer: Any) -> tuple[str, dict[str, Any]]:
    """Serialise a fast tokenizer into (tokenizer.json string, special-token settings)."""
    backend = tokenizer.backend_tokenizer if hasattr(tokenizer, "backend_tokenizer") else tokenizer
    settings: dict[str, Any] = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = getattr(tokenizer, key, None)
        if isinstance(value, str):
            settings[key] = value
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        settings["chat_template"] = template
    return backend.to_str(), settings


def dumps_settings(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True)
