"""One shared, read-only copy of each loaded model, whatever the number of sessions.

Keyed by (resolved path, dtype). Loading the same key from many sessions at once loads it once
(the others wait on the key's lock). Only shipped and preloaded checkpoints are actually shared:
the catalog stores each visitor's uploads and Hub downloads under that visitor's own folder, so
their paths (and models) are reachable only through `Catalog.resolve(name, owner)` for that owner. The least recently used models beyond `capacity` are dropped
from the registry; generations still running keep their own reference until they finish, after
which the memory is returned. No Gradio here.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from playground.loaded import LoadedModel

T = TypeVar("T")
Loader = Callable[[Path, str], LoadedModel]
LOAD_SHARE = 0.5  # of a visitor's time, at most, spent loading models
MAX_OWNERS = 4096  # visitors whose last load is remembered (those still waiting are never forgotten)


def on_loader_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) on a new thread that ends with it; its result or error, in the caller."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            outcome["error"] = error

    thread = threading.Thread(target=run, name="playground-loader", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _loader_on(device: str) -> Loader:
    def load(path: Path, dtype: str) -> LoadedModel:
        from playground.checkpoints.loader import load_model

        return on_loader_thread(load_model, path, device=device, dtype=dtype)

    return load


@dataclass
class _OwnerLoads:
    """One visitor's loads: one at a time (`lock`), the next not before `ready_at` (the registry's clock)."""

    lock: threading.Lock
    ready_at: float = 0.0


class ModelRegistry:
    def __init__(self, capacity: int = 3, loader: Loader | None = None, device: str = "cpu",
                 default_dtype: str = "float32", *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """`device`: where the default loader puts every model; `default_dtype`: what a page starts
        with (`python app.py --device cuda --dtype bfloat16`); `clock` and `sleep` time the visitors' loads."""
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.device = device
        self.default_dtype = default_dtype
        self._loader = loader or _loader_on(device)
        self._models: OrderedDict[tuple[str, str], LoadedModel] = OrderedDict()
        self._lock = threading.Lock()  # guards _models and _key_locks
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}
        self.loads = 0  # how many times a checkpoint was actually read (tests check sharing)
        self.clock, self.sleep = clock, sleep
        self._owners: dict[str, _OwnerLoads] = {}

    @staticmethod
    def key(path: Path | str, dtype: str) -> tuple[str, str]:
        return str(Path(path).resolve()), dtype

    def get(self, path: Path | str, dtype: str = "float32", owner: str | None = None) -> LoadedModel:
        """The shared model for (path, dtype), loading it on first use. `owner` (a visitor): a load it causes
        waits for its previous one and its share of the time (`load_wait`); None: no bound (scripts, tests)."""
        key = self.key(path, dtype)
        found = self._cached(key)
        if found is not None:
            return found
        if owner is None:
            return self._load(key)[0]
        loads = self._owner(owner)
        with loads.lock:  # this visitor's loads, one at a time; nobody else waits here
            wait = loads.ready_at - self.clock()
            if wait > 0 and self._cached(key) is None:
                self.sleep(wait)
            began = self.clock()
            lm, loaded = self._load(key)
            if loaded:
                took = self.clock() - began
                loads.ready_at = self.clock() + took * (1 - LOAD_SHARE) / LOAD_SHARE
            return lm

    def load_wait(self, owner: str) -> float:
        """Seconds `owner`'s next load would wait now (0: none)."""
        with self._lock:
            loads = self._owners.get(owner)
        return 0.0 if loads is None else max(0.0, loads.ready_at - self.clock())

    def _owner(self, owner: str) -> _OwnerLoads:
        with self._lock:
            loads = self._owners.get(owner)
            if loads is None:
                if len(self._owners) >= MAX_OWNERS:  # forget visitors whose wait is over and who load nothing now
                    now = self.clock()
                    for name, old in list(self._owners.items()):
                        if old.ready_at <= now and not old.lock.locked():
                            del self._owners[name]
                loads = self._owners[owner] = _OwnerLoads(threading.Lock())
            return loads

    def _cached(self, key: tuple[str, str]) -> LoadedModel | None:
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
        return None

    def _load(self, key: tuple[str, str]) -> tuple[LoadedModel, bool]:
        """The model for `key` and whether this call read it (False: another session loaded it meanwhile)."""
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._models:  # another session loaded it while we waited
                    self._models.move_to_end(key)
                    return self._models[key], False
            lm = self._loader(Path(key[0]), key[1])
            _freeze(lm)
            with self._lock:
                self.loads += 1
                self._models[key] = lm
                self._models.move_to_end(key)
                self._key_locks.pop(key, None)  # later callers find the model under _lock
                evicted = []
                while len(self._models) > self.capacity:
                    evicted.append(self._models.popitem(last=False))
            if evicted:
                del evicted
                gc.collect()
            return lm, True

    def held(self) -> tuple[int, int]:
        """(models loaded, the bytes they hold: `LoadedModel.resident_bytes`)."""
        with self._lock:
            return len(self._models), sum(lm.resident_bytes for lm in self._models.values())

    def steps_held(self) -> tuple[int, int]:
        """(captured decode steps the loaded models keep, the bytes they hold: `CapturedDecoder.held`)."""
        with self._lock:
            decoders = [lm.captured for lm in self._models.values() if lm.captured is not None]
        held = [decoder.held() for decoder in decoders]
        return sum(n for n, _ in held), sum(b for _, b in held)

    def loaded_keys(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._models)

    def drop(self, path: Path | str, dtype: str = "float32") -> None:
        with self._lock:
            self._models.pop(self.key(path, dtype), None)

    def drop_under(self, roots: Iterable[Path | str]) -> int:
        """Drop every model loaded from inside `roots` (a visitor's folders after `Catalog.forget`, or
        uploads the catalog evicted); runs still holding one finish with their own reference."""
        roots = [Path(r).resolve() for r in roots]
        with self._lock:
            gone = [k for k in self._models if any(Path(k[0]).is_relative_to(r) for r in roots)]
            for k in gone:
                del self._models[k]
        if gone:
            gc.collect()
        return len(gone)


def _freeze(lm: LoadedModel) -> None:
    """Shared across sessions: no gradients, eval mode; nothing may write to the weights."""
    lm.model.eval()
    for p in lm.model.parameters():
        p.requires_grad_(False)
