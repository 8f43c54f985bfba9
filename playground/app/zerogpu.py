"""ZeroGPU: each visitor's run is one GPU call, decoded in a forked worker that the GPU is lent to.

On a ZeroGPU Space the GPU exists only inside a function wrapped by `spaces.GPU`; each call runs in a
forked worker process (reused while idle), its arguments and every value it yields are pickled, and
nothing the worker changes in its own memory comes back. So a run crosses as a `WorkerRequest` that
names its model (the checkpoint's path on the shared disk, the dtype) and carries the prompt ids and the
`GenerationConfig` (a second model that drafts crosses the same way, by its path: never a model in the
arguments); the worker loads the models on CUDA once and keeps them while it is reused
(`WorkerModels`), with their captured decode steps where the app runs with `--compile` (CUDA graphs captured
by hand, no compiler: a fresh worker captures a run's step shape once, and a reused one replays it), plans the
run again with `generation.plan.plan` and yields the engine's own
`StepEvent`s, which hold only plain Python and numpy. The page's other model work (lessons, the lab's
measurements, attention rows) stays on the main process's CPU copy: cheap for the shipped sizes, and it
costs no visitor any quota.

When the GPU is refused (quota spent, no GPU free in time) or the call fails before its first token,
the run goes to the CPU path instead, and with `report_waiting` a `Notice` says why and what to do.
The wrapper is a parameter (`ZeroGPU(gpu=spaces.GPU)` on a Space; the tests pass an emulation that
forks and pickles the same way), and nothing here imports Gradio or `spaces`.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playground.app import serving
from playground.app.words import t
from playground.generation.batch import CAUGHT_UP
from playground.generation.config import GenerationConfig, draft_layers
from playground.generation.events import StepEvent
from playground.generation.plan import Plan
from playground.loaded import LoadedModel

log = logging.getLogger("playground.zerogpu")

# The GPU time a run asks for (`duration`): the quota must hold it for the call to start, so ask for what
# the run needs with a margin, not ZeroGPU's default 60 s. Measured eager on an H100: 13.7 ms a step for
# the 135M SmolLM2 (73 tokens/s); ZeroGPU's card was not measured, hence the margin in STEP_SECONDS.
START_SECONDS = 10.0  # a fresh worker: fork, CUDA start-up, reading the weights of a model of ~135M
STEP_SECONDS = 0.03  # one decode step of a ~135M model, with room for captures and a slower card
# A fresh worker's first run of a step shape captures its CUDA graph (`app.py --compile`): built, run once, captured.
# Measured in the emulated worker on an H200 (SmolLM2-135M's shape, float32, the page's captures): 0.63 s; ZeroGPU's
# half card is slower, hence the margin. The main process cannot know whether the worker it gets is fresh or reused,
# so every captured run asks for one.
CAPTURE_SECONDS = 2.0
REFERENCE_PARAMETERS = 135e6
MIN_SECONDS, MAX_SECONDS = 5, 20 * 60  # ZeroGPU's streaming limit is 20 minutes a call


@dataclass(frozen=True)
class WorkerRequest:
    """What crosses into the worker: what identifies the model, never the model itself."""

    path: str  # the checkpoint as the registry loaded it (shipped, preloaded, or a visitor's upload folder)
    dtype: str  # "float32", "bfloat16" or "float16"
    prompt_ids: tuple[int, ...]  # already fitted to the context by the main process's plan
    forced_ids: tuple[int, ...]  # a branch's forced tokens
    cfg: GenerationConfig  # a second model's draft travels as `draft_path` (cfg.draft is None then)
    parameters: int = 0  # the model's size, for the duration estimate
    layers: int = 0  # the model's layers (a "layer:K" draft runs K of them)
    device: str | None = None  # None: the worker's GPU (the CPU where it has none)
    draft_path: str | None = None  # a second model that drafts: its checkpoint, loaded by the worker like the model
    draft_dtype: str = "float32"
    draft_parameters: int = 0  # the drafter's size: each drafted token is one pass of it
    captured: bool = False  # the worker decodes it through a captured step (`--compile`; a run the step takes)

    @classmethod
    def of(cls, plan: Plan, device: str | None = None) -> WorkerRequest:
        lm, cfg = plan.lm, plan.cfg
        draft: dict[str, Any] = {}
        if isinstance(cfg.draft, LoadedModel):  # by path, never the model's weights
            other = cfg.draft
            draft = dict(draft_path=str(other.path), draft_dtype=str(other.dtype).removeprefix("torch."),
                         draft_parameters=other.parameter_count)
            cfg = cfg.replace(draft=None)
        return cls(path=str(lm.path), dtype=str(lm.dtype).removeprefix("torch."), prompt_ids=tuple(plan.prompt_ids),
                   forced_ids=tuple(plan.forced_ids), cfg=cfg, parameters=lm.parameter_count,
                   layers=lm.config.n_layers, device=device, captured=worker_captures(plan), **draft)


@dataclass(frozen=True)
class Loaded:
    """The worker's first item: where the model runs and what finding it cost."""

    device: str
    seconds: float  # reading the checkpoint onto the device; 0.0 when the worker still held it
    cached: bool
    worker: int  # the worker's process id (the same id: a reused worker)


@dataclass(frozen=True)
class Failed:
    """The worker could not start the run (the model did not load, the device ran out of memory)."""

    message: str


def worker_captures(plan: Plan) -> bool:
    """Whether a worker decodes the run of `plan` through a captured step: the app runs with `--compile` (the
    worker's models have steps; the page's CPU copy has none) and the step takes the run (a copy of the model at
    another weight precision has no steps)."""
    from playground.checkpoints.loader import compile_requested
    from playground.generation.captured import why_not_taken

    return compile_requested() and plan.cfg.weight_precision is None and why_not_taken(plan) is None


@dataclass(frozen=True)
class Decoded:
    """The worker's last item: how the run decoded there (`Plan.decoding`; the caller's plan is not the worker's),
    and the steps the worker captured for it (0 in a worker that had its shape already) and their seconds."""

    decoding: dict[str, Any]
    captures: int = 0
    capture_seconds: float = 0.0


@dataclass(frozen=True)
class Notice:
    """A line for the run's notes (words.py): why the run went to the CPU and how to get GPU time, or the GPU time
    a run used; `values` fill the words' placeholders."""

    key: str
    values: dict[str, Any] = field(default_factory=dict)

    def text(self, lang: str = "en") -> str:
        return t(self.key, lang, **self.values)


def estimate_seconds(request: WorkerRequest) -> int:
    """GPU seconds to ask for: a worker's start, then every step of the run (all beams step together, so
    beams cost little; captures a little more), scaled by the model's size against the 135M model. A draft
    adds its passes: up to `draft_tokens` per pass of the model (a rejected draft leaves one token a pass), each
    a pass of the drafter (a second model: loaded too; the model's first K layers: K of its layers)."""
    cfg = request.cfg
    size = max(1.0, request.parameters / REFERENCE_PARAMETERS)
    steps = cfg.max_new_tokens + len(request.prompt_ids) / 512  # the prompt is one prefill pass per ~512 tokens
    factor = (1.0 + 0.1 * (cfg.num_beams - 1)) * (1.5 if cfg.records else 1.0) * size
    seconds = START_SECONDS * size + steps * STEP_SECONDS * factor
    if request.captured:  # a fresh worker captures the run's step first
        seconds += CAPTURE_SECONDS * size
    drafter = _drafter_size(request)
    if drafter and cfg.num_beams == 1:
        if request.draft_path is not None:
            seconds += START_SECONDS * drafter  # the worker reads the drafter too
        seconds += cfg.max_new_tokens * cfg.draft_tokens * STEP_SECONDS * max(drafter, 0.1)
    return int(min(MAX_SECONDS, max(MIN_SECONDS, math.ceil(seconds))))


def _drafter_size(request: WorkerRequest) -> float:
    """A drafter's pass against a pass of the 135M model (0: no drafter model)."""
    if request.draft_path is not None:
        return max(1.0, request.draft_parameters / REFERENCE_PARAMETERS)  # a small model's pass is launch-bound
    k = draft_layers(request.cfg.draft)
    if k is None:  # prompt lookup, or none: no passes of a model
        return 0.0
    return max(1.0, request.parameters / REFERENCE_PARAMETERS) * min(1.0, k / max(1, request.layers or k))


@dataclass
class WorkerModels:
    """The models one worker keeps between calls (it is reused while idle), least recently used dropped."""

    capacity: int = 2
    _models: OrderedDict[tuple[str, str, str, tuple[int, ...]], Any] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _prefixes: weakref.WeakKeyDictionary[Any, Any] = field(default_factory=weakref.WeakKeyDictionary)

    def get(self, path: str, dtype: str, device: str | None = None) -> tuple[Any, Loaded]:
        import torch

        from playground.checkpoints.loader import load_model

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        key = (path, dtype, device, _stamp(path))  # a folder downloaded again holds new weights under the same path
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key], Loaded(device, 0.0, True, os.getpid())
            started = time.perf_counter()
            lm = load_model(path, device=device, dtype=dtype)
            lm.model.eval().requires_grad_(False)
            self._models[key] = lm
            while len(self._models) > self.capacity:
                self._models.popitem(last=False)
            return lm, Loaded(device, time.perf_counter() - started, False, os.getpid())

    def __len__(self) -> int:
        return len(self._models)

    def prefix(self, lm: Any) -> Any:
        """The prefix store of a kept model (`generation.prefix_cache`): its runs in this worker share their prompts'
        beginnings while the worker is reused, one store per model object (an upload's is its own), gone with it."""
        from playground.generation.batch import prefix_store

        with self._lock:
            store = self._prefixes.get(lm.model)
            if store is None:
                store = self._prefixes[lm.model] = prefix_store(lm)
            return store


def _stamp(path: str) -> tuple[int, ...]:
    """When the checkpoint's files last changed (the weights' files, or the single file)."""
    root = Path(path)
    try:
        files = sorted(root.glob("*.safetensors")) if root.is_dir() else [root]
        return tuple(f.stat().st_mtime_ns for f in files)
    except OSError:  # gone: the loader says so
        return ()


# One per process. Only a forked worker ever fills it; the main process's copy stays empty.
WORKER_MODELS = WorkerModels()


def gpu_run(request: WorkerRequest) -> Iterator[Loaded | Failed | StepEvent | Decoded]:
    """The GPU call's body, in the worker: `Loaded` (or `Failed`), the engine's events, then `Decoded`. Closing it
    (Stop) closes the engine's stream before its next step."""
    import torch

    from playground.generation.engine import run_plan
    from playground.generation.plan import plan

    # The worker is forked: the parent's OpenMP thread team did not come along (libgomp is not fork-safe), and
    # a parallel CPU op can wait for it forever; torch's own pool is rebuilt by the first parallel op of each
    # thread, which the loader's reader threads race to do ("Invalid thread pool!"). So: one CPU thread, set
    # here first. The CPU only reads the checkpoint; the decoding is on the GPU.
    torch.set_num_threads(1)
    try:
        lm, loaded = WORKER_MODELS.get(request.path, request.dtype, request.device)
        cfg = request.cfg
        if request.draft_path is not None:  # the drafter, found as the model is (kept while the worker is reused)
            cfg = cfg.replace(draft=WORKER_MODELS.get(request.draft_path, request.draft_dtype, request.device)[0])
        p = plan(lm, list(request.prompt_ids), cfg, request.forced_ids)
    except Exception as exc:  # noqa: BLE001 - the wrapper would keep only the class name; say it in one line
        log.warning("ZeroGPU worker could not start a run: %s", exc, exc_info=True)
        yield Failed(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return
    yield loaded
    decoder = p.lm.captured
    if decoder is not None:
        before = decoder.captures, decoder.capture_seconds
        yield from run_plan(p)  # a captured step decodes as the engine's own loop does (its static rows are no pool's)
        captured = decoder.captures - before[0], decoder.capture_seconds - before[1]  # none in a worker that kept it
    else:
        yield from _through_batch(p, WORKER_MODELS.prefix(lm))
        captured = 0, 0.0
    if p.decoding is not None:
        yield Decoded(p.decoding, captured[0], round(captured[1], 3))


def _through_batch(p: Plan, store: Any) -> Iterator[StepEvent]:
    """The run's events through a scheduler of its own with the worker's prefix store: the prompt fed in the
    batch's chunks, its full blocks restored when an earlier run in this worker computed them (and a script's
    run, which records nothing of its last prompt position, the whole prompt when it was sent before)."""
    from playground.generation.batch import Scheduler

    scheduler = Scheduler(p.lm, prefix=store)
    ticket = scheduler.submit(p)
    try:
        while scheduler.busy():
            scheduler.step()
            yield from ticket.take()
    finally:
        ticket.cancel()


_LEFT = re.compile(r"(\d+(?:\.\d+)?)\s*s\s+left")


def refusal(error: BaseException | None) -> Notice:
    """The notice of a refused GPU: `refusal_key`'s words, and what is left of the visitor's quota where the refusal
    says it ("You have exceeded your free GPU quota (13s requested vs. 7s left)")."""
    key = refusal_key(error)
    left = _LEFT.search(str(error or ""))
    if key == "zerogpu_quota" and left:
        return Notice("zerogpu_quota_left", {"left": int(float(left.group(1)))})
    return Notice(key)


def refusal_key(error: BaseException | None) -> str:
    """Which words say why the GPU did not run this: the `spaces` package raises a Gradio error titled
    "ZeroGPU quota exceeded", "ZeroGPU queue timeout", ... (read by attribute: no Gradio import here)."""
    if error is None:
        return "zerogpu_failed"
    title = f"{getattr(error, 'title', '') or ''} {error}".lower()
    if "quota" in title or "credits" in title or "limit" in title:
        return "zerogpu_quota"
    if "queue" in title or "no gpu" in title or "unavailable" in title:
        return "zerogpu_busy"
    return "zerogpu_failed"


class ZeroGPU:
    """Runs go to a GPU call made with `gpu` (`spaces.GPU` on a Space, an emulation in the tests); refused
    ones to the CPU's shared batch (`serving`)."""

    def __init__(self, gpu: Callable[..., Callable[..., Iterator[Any]]], device: str | None = None) -> None:
        """`device`: where the worker decodes (None: its GPU; the tests' emulation names the CPU)."""
        self.call = gpu(gpu_run, duration=estimate_seconds)  # ZeroGPU calls `duration` with the call's arguments
        self.device = device

    def run_events(
        self, plan: Plan, stop: threading.Event, owner: Any = None, *, report_waiting: bool = False, tag: Any = None,
        due: Callable[[], float] | None = None,
    ) -> Iterator[StepEvent | Notice | serving.Waiting]:
        """The run's events from the GPU call; before its first token, a refusal or a failure sends the run to
        the CPU (a `Notice` first with `report_waiting`; `due`: the reader's next frame there, `serving.run_events`).
        Stop (or closing this) closes the GPU call."""
        request = WorkerRequest.of(plan, self.device)
        stream = self.call(request)
        started = False
        refused: BaseException | None = None
        ended = False
        lent: float | None = None  # when the GPU was lent: the first item's arrival less the model's loading in the worker
        try:
            while not stop.is_set():
                try:
                    item = next(stream)
                except StopIteration:
                    ended = True
                    break
                except Exception as exc:  # noqa: BLE001 - quota, queue, a dead worker: all end the GPU call
                    if started:
                        raise
                    refused = exc
                    break
                if isinstance(item, Loaded):
                    lent = time.monotonic() - item.seconds
                    log.info("ZeroGPU: model %s on %s in worker %d (%.2f s)", "found" if item.cached else "loaded",
                             item.device, item.worker, item.seconds)
                    continue
                if isinstance(item, Decoded):
                    plan.decoding = item.decoding
                    if item.captures:
                        log.info("ZeroGPU: the worker captured %d decode step(s) for this run (%.2f s)", item.captures,
                                 item.capture_seconds)
                    continue
                if isinstance(item, Failed):
                    log.warning("ZeroGPU: the worker could not run it (%s); the run goes to the CPU", item.message)
                    break
                started = True
                yield item
                if due is not None:  # a paced reader (a page) draws what the worker sent: it cannot see what is queued
                    yield CAUGHT_UP
        finally:
            stream.close()
        if started or ended or stop.is_set():
            if report_waiting and lent is not None:  # what this run cost the visitor's daily quota, about
                yield Notice("zerogpu_used", {"seconds": max(0.1, round(time.monotonic() - lent, 1)),
                                              "asked": estimate_seconds(request)})
            return
        if refused is not None:
            log.warning("ZeroGPU refused the GPU (%s: %s); the run goes to the CPU",
                        getattr(refused, "title", None) or type(refused).__name__, str(refused).splitlines()[:1])
        if report_waiting:
            yield refusal(refused) if refused is not None else Notice("zerogpu_failed")
        yield from serving.run_events(plan, stop, owner, report_waiting=report_waiting, tag=tag, due=due)


_active: ZeroGPU | None = None  # the process's mode: set once at start (app.main), or by a test


def install(mode: ZeroGPU | None) -> None:
    """Serve every run through `mode` (None: the CPU path again)."""
    global _active
    _active = mode


def active() -> ZeroGPU | None:
    return _active


def for_space() -> ZeroGPU | None:
    """The mode with the real `spaces.GPU`, or None where `spaces` is not installed. Call it before the app
    launches: ZeroGPU looks for its decorated functions at start-up."""
    try:
        import spaces
    except ImportError:
        log.warning("ZeroGPU Space without the `spaces` package: every run stays on the CPU")
        return None
    return ZeroGPU(spaces.GPU)
