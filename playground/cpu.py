"""How many CPU cores this process may use: the affinity mask, capped by a cgroup CPU quota.

A container (a Hugging Face Space among them) often sees every core of its host while its cgroup
allows only a few: 2 vCPUs on a 64-core machine. Starting 64 torch threads there makes them fight
for 2 cores. The quota is `cpu.max` ("200000 100000": 2 cores; "max 100000": none) under cgroup v2,
and `cpu.cfs_quota_us` / `cpu.cfs_period_us` (quota -1: none) under cgroup v1.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_quota(text: str | None) -> float | None:
    """Cores allowed by a cgroup v2 `cpu.max` line, or None when unlimited or unreadable."""
    parts = (text or "").split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_quota(quota_text: str | None, period_text: str | None) -> float | None:
    try:
        quota, period = int(quota_text or ""), int(period_text or "")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _own_paths(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """This process's cgroup path under v2 ("0::/path") and under v1's cpu controller."""
    v2 = v1 = None
    for line in (_read(proc_cgroup) or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        if fields[0] == "0" and fields[1] == "":
            v2 = fields[2]
        elif "cpu" in fields[1].split(","):
            v1 = fields[2]
    return v2, v1


def _ancestors(root: Path, own: str | None) -> list[Path]:
    """`root/own`, its parents up to `root` (a quota anywhere above limits us too); `root` alone if unknown."""
    parts = [p for p in (own or "").split("/") if p and p != ".."]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota in cores (e.g. 2.0, 0.5), the tightest along this process's cgroup path; None if none."""
    v2_path, v1_path = _own_paths(proc_cgroup)
    found: list[float] = []
    for folder in _ancestors(root, v2_path):
        quota = _v2_quota(_read(folder / "cpu.max"))
        if quota is not None:
            found.append(quota)
    for base in (root / "cpu", root / "cpu,cpuacct"):
        for folder in _ancestors(base, v1_path):
            quota = _v1_quota(_read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us"))
            if quota is not None:
                found.append(quota)
    return min(found) if found else None


def usable_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """Cores this process can run on: its affinity mask, capped by the quota (rounded up, at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota(root, proc_cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota - 1e-9)))
    return max(1, cores)


def default_threads(browser_here: bool, root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """Torch threads for the models: every usable core, but one when a browser runs on the same
    machine. Measured on 2 cores with Chromium beside the server: SmolLM2-135M streamed 17 tokens/s to
    the page with one torch thread and 8 with two, whose spinning workers kept losing their core to the
    browser. On a Space the browser is elsewhere, so every core of the quota works for the model."""
    cores = usable_cores(root, proc_cgroup)
    return max(1, cores - 1) if browser_here else cores


def choose_threads(asked: int = 0, *, space: bool, root: Path = CGROUP_ROOT,
                   proc_cgroup: Path = PROC_CGROUP) -> tuple[int, str]:
    """The models' torch threads, and why in a few words for the start-up line: `asked` (--threads) when
    positive, else OMP_NUM_THREADS, else on a Space every core of its quota (the visitors' browsers run
    elsewhere), else one fewer. Off a Space the page's browser is most often on the same machine, and on
    2 cores a second torch thread spinning against it made everything slower: SmolLM2's first token 3.9 s
    instead of 0.6 s and 2.1 tokens/s on the page instead of 8.4. A server without a browser beside it
    passes --threads."""
    if asked > 0:
        return asked, "--threads"
    omp = omp_threads()
    if omp:
        return omp, "OMP_NUM_THREADS"
    cores = usable_cores(root, proc_cgroup)
    if space:
        return cores, f"all {cores} cores of the Space"
    return default_threads(True, root, proc_cgroup), f"{cores} cores, one left to a browser on this machine"


def omp_threads() -> int | None:
    """OMP_NUM_THREADS when it is set to a positive whole number: an explicit choice, like --threads."""
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None
