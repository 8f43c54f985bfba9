"""Published advisories against the web framework the app pins (Gradio), and what closes each one here.

One row per advisory: the versions it affects (first affected, first fixed) and, when the pinned version is
still inside that range, the launch settings that close it in this app. `tests/ui/test_hosting_advisories.py`
(part of the normal suite, so CI runs it) fails when the pin in requirements.txt falls inside a row's range,
unless the row names a mitigation and `playground.ui.launch_kwargs()` really launches with it.

Interim state (2026-11): gradio is pinned to 6.31.0, inside CVE-2026-134825, because the package index here does
not offer 6.32.0 yet. The app launches with Gradio's run history and SSR off, which closes it; move the pin (and
README's `sdk_version`) to 6.32.0 or later once the index offers it. Nothing here imports Gradio.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version


@dataclass(frozen=True)
class Advisory:
    id: str
    package: str
    affected: tuple[str, str]  # [first affected, first fixed): the fixed version is outside
    what: str
    # launch keyword arguments that close it in this app; empty: nothing does, only another version
    mitigation: Mapping[str, Any] = field(default_factory=dict)

    def affects(self, package: str, version: str) -> bool:
        low, fixed = (Version(v) for v in self.affected)
        return package.lower() == self.package and low <= Version(version) < fixed

    def closed_by(self, launch: Mapping[str, Any]) -> bool:
        """Whether launch settings `launch` hold every part of this row's mitigation (False without one)."""
        return bool(self.mitigation) and all(k in launch and launch[k] == v for k, v in self.mitigation.items())


ADVISORIES: tuple[Advisory, ...] = (
    Advisory(
        id="CVE-2026-134825",
        package="gradio",
        affected=("6.27.0", "6.32.0"),
        what="with server-side rendering on, a forged `Host: localhost` through the SSR proxy passes the loopback "
             "check of Gradio's run history, which then lists, reads and writes run-history buckets with the "
             "server's saved Hugging Face token (a Space with an HF_TOKEN secret)",
        # the playground keeps its own run history and needs none of Gradio's; the page renders in the browser
        mitigation={"run_history": False, "ssr_mode": False},
    ),
)


def open_advisories(package: str, version: str, launch: Mapping[str, Any]) -> list[Advisory]:
    """The advisories that affect `package` at `version` and that launch settings `launch` do not close."""
    return [a for a in ADVISORIES if a.affects(package, version) and not a.closed_by(launch)]
