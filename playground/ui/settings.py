"""The settings live in the app core (`playground.app.settings`); importable from here as well."""

from playground.app.settings import (
    DEFAULTS,
    DTYPES,
    FIELDS,
    LANGS,
    MODES,
    UISettings,
    from_query,
    from_widgets,
    to_query,
)

__all__ = ["DEFAULTS", "DTYPES", "FIELDS", "LANGS", "MODES", "UISettings", "from_query", "from_widgets", "to_query"]
