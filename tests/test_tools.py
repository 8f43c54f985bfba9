"""The project's command-line tools (benchmarks, load tests, deploy) import and parse their arguments.

They live outside the tests' import graph (nothing in the package imports them), so a module that
moved or a function whose signature changed would otherwise only show when someone runs the tool."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import playground.tools
from playground.cpu import default_threads
from playground.tools import crowd

TOOLS = sorted(m.name for m in pkgutil.iter_modules(playground.tools.__path__))
LIBRARIES = {"server", "deploy", "zerogpu_emulation"}  # helpers; deploy runs as `python -m playground deploy`


def test_every_tool_is_listed():
    assert {"bench", "crowd", "deploy", "kernels", "loadtest", "loadtest_page", "server"} <= set(TOOLS)


@pytest.mark.parametrize("name", TOOLS)
def test_tool_imports_and_prints_its_help(name, capsys):
    module = importlib.import_module(f"playground.tools.{name}")
    main = getattr(module, "main", None)
    assert (main is None) == (name in LIBRARIES)
    if main is None:
        return
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_crowd_runs_with_the_apps_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert crowd.app_threads([]) == default_threads(browser_here=False)
    assert crowd.app_threads(["--browser-here"]) == default_threads(browser_here=True)
    assert crowd.app_threads(["--threads", "3"]) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert crowd.app_threads([]) == 5


def test_the_crowd_chart_is_an_svg_with_a_bar_per_crowd_and_its_legend():
    import xml.etree.ElementTree as ET

    rows = [(1, 34.0, 26.4, 0.1), (8, 14.1, 72.8, 0.7), (16, 9.3, 102.9, 0.6)]
    root = ET.fromstring(crowd.chart(rows, cli=37.9))
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("fill") == "#4c78a8"]
    assert len(bars) == 1 + len(rows)  # one per crowd, and the legend's swatch
    assert {"1", "8", "16", "26", "73", "103"} <= set(texts)
    assert "the CLI, one request" in texts and "each visitor (median)" in texts
