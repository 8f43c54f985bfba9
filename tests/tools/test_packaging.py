"""`pip install .` (or `-e .`) gives an importable package and a `playground` command, from any directory.

The tools (benchmarks, load tests, the Space deploy) stay out of the installed package: they run from a checkout.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
    assert all((site / "playground" / "locales" / f"{lang}.json").is_file() for lang in ("en", "zh"))  # the words
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


def _imports(path: Path, module: str, modules: set[str]) -> set[str]:
    """The playground modules one file imports, at the top or inside functions (lazy imports count;
    imports for type checkers only, under `if TYPE_CHECKING:`, never run and do not)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {known(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb from this file's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found |= {known(f"{base}.{a.name}") if f"{base}.{a.name}" in modules else known(base) for a in node.names}
    return found - {None, module}


def test_the_package_has_no_import_cycles():
    """Modules import in one direction: a cycle (two tools importing each other's helpers) is a design smell."""
    files = {}
    for path in (REPO / "playground").rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {m: _imports(p, m, set(files)) for m, p in files.items()}
    assert graph["playground.tools.loadtest"] >= {"playground.tools.server"}  # the walk sees real edges
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(module):] + [module]))
        if module not in done:
            for dep in sorted(graph[module]):
                visit(dep, trail + [module])
            done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_the_cli_never_imports_the_tools_until_a_tool_subcommand_runs():
    """The wheel has no playground/tools: `playground --help`, `info` and `generate` must not need them."""
    code = ("import sys, playground.cli as c; c.build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('playground.tools')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
    usage = subprocess.run([sys.executable, "-m", "playground", "deploy-space", "--help"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0 and "--dry-run" in usage.stdout  # from a checkout, the tool's own options
