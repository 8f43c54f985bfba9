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
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path

from playground.app.torch_thread import runs_on_torch_thread
from playground.loaded import LoadedModel

Loader = Callable[[Path, str], LoadedModel]


def _loader_on(device: str) -> Loader:
    @runs_on_torch_thread
    def load(path: Path, dtype: str) -> LoadedModel:
        from playground.checkpoints.loader import load_model

        return load_model(path, device=device, dtype=dtype)

    return load


class ModelRegistry:
    def __init__(self, capacity: int = 3, loader: Loader | None = None, device: str = "cpu",
                 default_dtype: str = "float32") -> None:
        """`device`: where the default loader puts every model; `default_dtype`: what a page starts
        with (`python app.py --device cuda --dtype bfloat16`)."""
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

    @staticmethod
    def key(path: Path | str, dtype: str) -> tuple[str, str]:
        return str(Path(path).resolve()), dtype

    def get(self, path: Path | str, dtype: str = "float32") -> LoadedModel:
        """The shared model for (path, dtype), loading it on first use."""
        key = self.key(path, dtype)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._models:  # another session loaded it while we waited
                    self._models.move_to_end(key)
                    return self._models[key]
            lm = self._loader(Path(key[0]), dtype)
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
            return lm

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
