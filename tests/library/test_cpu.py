"""Torch threads from the CPU quota: cgroup v2 `cpu.max` and v1 `cpu.cfs_quota_us` files written here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from playground.cpu import choose_threads, cpu_quota, default_threads, omp_threads, usable_cores

AFFINITY = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _v2(tmp_path: Path, own: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


@pytest.mark.parametrize("line, cores", [("200000 100000", 2.0), ("50000 100000", 0.5), ("150000 100000", 1.5),
                                         ("max 100000", None), ("", None), ("garbage", None), ("-1 100000", None),
                                         ("100000 0", None)])
def test_cgroup_v2_cpu_max(tmp_path, line, cores):
    root, proc = _v2(tmp_path, "/", {"cpu.max": line})
    assert cpu_quota(root, proc) == cores


def test_cgroup_v2_the_tightest_quota_on_the_path_counts(tmp_path):
    root, proc = _v2(tmp_path, "/kubepods/pod1/ctr", {"cpu.max": "max 100000", "kubepods/cpu.max": "800000 100000",
                                                      "kubepods/pod1/cpu.max": "200000 100000",
                                                      "kubepods/pod1/ctr/cpu.max": "max 100000"})
    assert cpu_quota(root, proc) == 2.0


def test_cgroup_v1_cfs_quota(tmp_path):
    root = tmp_path / "cgroup"
    (root / "cpu,cpuacct").mkdir(parents=True)
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("300000\n")
    (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("4:memory:/x\n2:cpu,cpuacct:/\n")
    assert cpu_quota(root, proc) == 3.0
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")  # v1's "no limit"
    assert cpu_quota(root, proc) is None


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cpu_quota(tmp_path / "nothing", tmp_path / "no-proc-file") is None
    assert usable_cores(tmp_path / "nothing", tmp_path / "no-proc-file") == AFFINITY


def test_threads_use_every_core_of_the_quota_and_leave_one_to_a_browser_here(tmp_path):
    root, proc = _v2(tmp_path, "/", {"cpu.max": "100000 100000"})
    assert usable_cores(root, proc) == 1 and default_threads(False, root, proc) == 1
    assert default_threads(True, root, proc) == 1  # never below one
    root.joinpath("cpu.max").write_text("150000 100000")  # 1.5 cores: two threads share them
    assert usable_cores(root, proc) == min(2, AFFINITY)
    root.joinpath("cpu.max").write_text(f"{(AFFINITY + 8) * 100000} 100000")  # a quota above the cores changes nothing
    assert default_threads(False, root, proc) == AFFINITY
    assert default_threads(True, root, proc) == max(1, AFFINITY - 1)


def test_the_app_leaves_a_browser_a_core_except_on_a_space(tmp_path, monkeypatch):
    """`python app.py` on a laptop shares the machine with the page's browser: one core is left to it, and the
    start-up line says so; a Space (browsers elsewhere) uses its whole quota; --threads and OMP_NUM_THREADS win."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    root, proc = _v2(tmp_path, "/", {"cpu.max": "400000 100000"})
    cores = usable_cores(root, proc)
    assert choose_threads(space=True, root=root, proc_cgroup=proc) == (cores, f"all {cores} cores of the Space")
    threads, why = choose_threads(space=False, root=root, proc_cgroup=proc)
    assert threads == max(1, cores - 1) and "one left to a browser" in why
    root.joinpath("cpu.max").write_text("100000 100000")  # one core: never below one thread
    assert choose_threads(space=False, root=root, proc_cgroup=proc)[0] == 1
    assert choose_threads(3, space=False, root=root, proc_cgroup=proc) == (3, "--threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert choose_threads(space=True, root=root, proc_cgroup=proc) == (5, "OMP_NUM_THREADS")
    assert choose_threads(2, space=True, root=root, proc_cgroup=proc) == (2, "--threads")


def test_omp_num_threads_is_an_explicit_choice(monkeypatch):
    for raw, expected in (("3", 3), (" 1 ", 1), ("0", None), ("-2", None), ("many", None), ("", None)):
        monkeypatch.setenv("OMP_NUM_THREADS", raw)
        assert omp_threads() == expected
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert omp_threads() is None
