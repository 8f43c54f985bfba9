"""The page's modules stay small (issue 44, one kind of tab): no module of the UI over 350 lines, the size the page's
modules have kept since issue 12. (Complexity, C901 ≤ 15 in app/ and ui/, is ruff's: pyproject.toml.)"""

from __future__ import annotations

from pathlib import Path

UI = Path(__file__).resolve().parents[2] / "playground" / "ui"
MAX_LINES = 350


def test_no_ui_module_is_over_350_lines():
    sizes = {p.relative_to(UI).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in UI.rglob("*.py")}
    assert len(sizes) > 10  # the page's modules were found
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
