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
LIBRARIES = {"server", "deploy"}  # helpers of the other tools; deploy runs as `python -m playground deploy`


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
