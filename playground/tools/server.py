"""Start and stop app.py for the load tests and the page benchmark, and read its memory from /proc.

Shared by `loadtest`, `loadtest_page` and `bench_browser`; it imports none of them, so the tools have no
import cycle (loadtest starts loadtest_page for `--page`, and both use this module).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playground.app.holdings import PREFIX, Holdings, parse

REPO = Path(__file__).resolve().parents[2]  # playground/tools/server.py -> the checkout's root
PROMPTS = ["The Python interpreter", "A list is", "def main():", "import os", "The function returns",
           "Errors should", "In this tutorial", "class Foo:"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _vmrss_bytes(pid: int) -> int:
    """VmRSS of one process from /proc/<pid>/status (Linux), in bytes; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    """Direct children of a process (from /proc/<pid>/task/*/children)."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return kids


def rss_bytes(pid: int) -> int:
    """Resident memory of the server process and its descendants (Linux /proc; no psutil needed)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _vmrss_bytes(p)
        todo += _children(p)
    return total


# The load tests play many visitors from one machine: the server believes one proxy (the test itself, standing
# in for a Space's), and each virtual client names its own address in X-Forwarded-For (`client_headers`).
AS_BEHIND_A_PROXY = {"PLAYGROUND_TRUSTED_PROXIES": "1"}


def client_headers(index: int) -> dict[str, str]:
    """What the proxy in front of the server would add for virtual client `index`: its own address."""
    return {"X-Forwarded-For": f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"}


def start_server(weights: str | None, concurrency: int, *app_args: str, repo: Path = REPO,
                 env: dict[str, str] | None = None, log: Path | None = None,
                 port: int | None = None) -> tuple[subprocess.Popen, str]:
    """app.py of `repo` (this checkout, or another one to compare with) on `port` or a free one (more `app_args`
    appended, `env` added, its log written to `log`), once it answers: (process, URL)."""
    port = port or _free_port()
    cmd = [sys.executable, str(repo / "app.py"), "--port", str(port), "--concurrency", str(concurrency), *app_args]
    if weights:
        cmd += ["--weights", weights]
    proc = subprocess.Popen(cmd, cwd=repo, env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=log.open("wb") if log else subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the server exited during start-up; run `python app.py` to see why")
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the server did not start within 180 s")


def holdings_of(proc: subprocess.Popen, log: Path, timeout: float = 10.0) -> Holdings | None:
    """What the server started with `log` keeps on purpose (models, precision copies, recorded runs): it logs them
    on SIGUSR1 (`playground.app.holdings`). None if no line came within `timeout` seconds."""
    seen = log.read_text(errors="replace").count(PREFIX + " ")
    os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.time() + timeout
    while time.time() < deadline:
        lines = [line for line in log.read_text(errors="replace").splitlines() if PREFIX + " " in line]
        if len(lines) > seen:
            return parse(lines[-1])
        time.sleep(0.2)
    return None


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
