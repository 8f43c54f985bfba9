"""A model's example prompt in the page's language.

A model card names one example prompt, in English. The ones the class models use (SmolLM2's question, Gemma 3's
question-and-answer form for a base model) have a 中文 twin in the locale files, so a class that switches to 中文
reads a Chinese question; an example without a twin (a tiny model trained on English) stays as it is.
"""

from __future__ import annotations

from playground.app.words import LANGUAGES, t

TWINS = ("example_capital", "example_capital_qa")  # locale keys whose English text is an example a card names


def in_language(example: str, lang: str) -> str:
    """`example` in `lang`, where the locale files have its twin; else `example` itself."""
    key = next((k for k in TWINS if t(k, "en") == example), None)
    return t(key, lang) if key is not None else example


def switched(prompt: str, example: str, lang: str) -> str | None:
    """The prompt box's new text after a switch to `lang`: the example in `lang` when the box still holds the example
    in another language (the visitor typed nothing of their own); None to leave the box alone."""
    others = {in_language(example, code) for _, code in LANGUAGES if code != lang}
    new = in_language(example, lang)
    return new if prompt in others and prompt != new else None
