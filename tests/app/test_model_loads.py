"""Model loads never hold the torch thread, and a visitor cycling models waits for their own loads only
(reliability round 5, row 9)."""

from __future__ import annotations

import threading
from pathlib import Path

from playground.app import torch_thread
from playground.app.registry import ModelRegistry
from playground.checkpoints.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "weights" / "tiny-lm"


def test_a_model_loads_while_the_torch_thread_is_busy():
    """Round 5: every dtype switch of a 545-680 MB upload was a reload, one uninterruptible call on the torch
    thread: another visitor's 32-token request took 7.6-15.5 s instead of 0.4-1.0 s. Here the torch thread is
    held by other work for the whole load: the load must not need it."""
    registry = ModelRegistry(capacity=1)
    held, release = threading.Event(), threading.Event()
    busy = threading.Thread(target=torch_thread.call, args=(lambda: (held.set(), release.wait(60)),), daemon=True)
    busy.start()
    assert held.wait(30)
    loaded: list = []
    loader = threading.Thread(target=lambda: loaded.append(registry.get(TINY, "bfloat16")), daemon=True)
    loader.start()
    loader.join(20)
    loaded_while_held = bool(loaded)
    release.set()
    busy.join(30)
    loader.join(30)
    assert loaded_while_held, "the load waited for the torch thread"
    assert str(loaded[0].dtype) == "torch.bfloat16" and registry.loads == 1


class FakeTime:
    """The registry's clock and sleep; a load 'takes' `load_seconds` of it."""

    def __init__(self, load_seconds: float) -> None:
        self.now, self.load_seconds, self.slept = 0.0, load_seconds, []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds

    def loader(self, path, dtype):
        self.now += self.load_seconds
        return load_model(path, dtype=dtype)


def test_a_visitor_cycling_dtypes_waits_and_the_others_do_not():
    """More (model, dtype) pairs than the registry keeps: each switch is a reload. After a load of s seconds the
    same visitor's next load waits s more (at most half their time is loading); another visitor's does not, and
    a model already loaded is never waited for."""
    time = FakeTime(load_seconds=2.0)
    registry = ModelRegistry(capacity=1, loader=time.loader, clock=time.clock, sleep=time.sleep)
    registry.get(TINY, "float32", owner="cycler")  # t 0 -> 2
    assert registry.load_wait("cycler") == 2.0 and registry.load_wait("other") == 0.0
    registry.get(TINY, "float32", owner="cycler")  # loaded: no wait
    assert time.slept == []
    registry.get(TINY, "float16", owner="cycler")  # its share used: waits until t 4, then loads (t 4 -> 6)
    assert time.slept == [2.0] and time.now == 6.0 and registry.load_wait("cycler") == 2.0
    registry.get(TINY, "bfloat16", owner="other")  # another visitor meanwhile: at once (t 6 -> 8)
    assert time.slept == [2.0] and registry.loads == 3
    registry.get(TINY, "bfloat16")  # no visitor (a script's shipped model, a test): no bound
    assert time.slept == [2.0]
