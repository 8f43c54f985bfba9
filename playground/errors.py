"""Error types whose messages say what is wrong and what to do.

The CLI and the UI show `str(error)` as one line; tracebacks are for bugs only.
"""


class PlaygroundError(ValueError):
    """Base class for every error we expect a person to read."""


class ConfigError(PlaygroundError):
    """A model or generation config that cannot describe a working model."""


class CheckpointError(PlaygroundError):
    """A checkpoint that cannot be loaded safely or faithfully."""


class PromptError(PlaygroundError):
    """Prompt text that cannot be tokenized as written (not valid Unicode text, or a NUL character)."""


class ChatTemplateError(PlaygroundError):
    """A checkpoint's chat template that failed, or went past its time, work or size bounds."""


class TokenizerError(PlaygroundError):
    """A checkpoint's tokenizer that failed on a text or on token ids (its own code panicked)."""
