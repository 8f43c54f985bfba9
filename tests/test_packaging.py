"""`pip install .` (or `-e .`) gives an importable package and a `playground` command, from any directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_installed_package_imports_and_runs_from_anywhere(tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet", "--target", str(site),
         str(REPO)],
        check=True, cwd=tmp_path, timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-c", "import playground.generation, playground.ui; print(playground.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(site)  # not the checkout: the installed copy
    packages = sorted(p.parent.relative_to(REPO).as_posix() for p in (REPO / "playground").rglob("__init__.py"))
    tools = [p for p in packages if p.startswith("playground/tools")]
    assert tools and not any((site / p).exists() for p in tools)  # run from a checkout only
    assert all((site / p / "__init__.py").exists() for p in packages if p not in tools), packages
    deploy = subprocess.run([str(site / "bin" / "playground"), "deploy-space", "me/x", "--dry-run"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert deploy.returncode == 2 and "from a checkout" in deploy.stderr and deploy.stderr.count("\n") == 1
    command = subprocess.run([str(site / "bin" / "playground"), "generate", "--help"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert command.returncode == 0 and "--max-new-tokens" in command.stdout, command.stderr


def test_dependencies_are_the_requirements_file():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements.txt"]}
    assert project["project"]["scripts"] == {"playground": "playground.cli:main"}
