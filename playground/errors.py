"""Error types whose messages say what is wrong and what to do.

The CLI and the UI show `str(error)` as one line; tracebacks are for bugs only.
"""


class PlaygroundError(ValueError):
    """Base class for every error we expect a person to read."""


class ConfigError(PlaygroundError):
    """A model or generation config that cannot describe a working model."""


class CheckpointError(PlaygroundError):
    """A checkpoint that cannot be loaded safely or faithfully."""
