"""Captured decoding: the decode step as a pure function of tensors, compiled once per shape.

    lm = playground.load_model(path, compile=True)
    result = playground.generate_all(lm, prompt, cfg)  # every decode step through torch.compile(fullgraph=True)
    result.decoding                                     # {"captured": True, ...} or the reason it ran eagerly

A `DecodeStep` is a module whose forward takes no Python number: each row's last token, its position
and its cache live in the step's own buffers (`models.static.StaticRows` reads them), the sampler runs
on the device (`generation.sampler`: greedy, temperature, top-k, top-p, min-p, repetition penalty, the
run's seeded draws), and everything the step tells (the chosen ids, their probabilities, the top
candidates, the page's captures) is written into one output row per request: the host reads it once
per step. The prompt is fed eagerly (the model's own pass) into the step's cache rows; then every
token is one call of the step. So `torch.compile(fullgraph=True)` traces it without a break (the CI
tests hold it to that, and `torch.export.export` too), and on CUDA it can be replayed as a graph.

A step's shape (`StepShape`: rows, cache length bucket, sampling or not, candidates, captures, edits)
is its graph: compiled once per shape, never per step or per length reached. A run the step cannot
take (beam search, speculative decoding, a KV policy, a precision copy, an encoder-decoder...)
decodes eagerly and says why (`why_eager`, `GenerationResult.decoding`).

Where a new shape is prepared. A script (`generate_all`, the CLI) waits for its first run's compile: the
decoder prepares the shape inline. A server's scheduler (`batch.Scheduler`) sets `aside`: its torch thread
never compiles inside a step; the shape is built and compiled on the process's one compile worker (a thread
of its own, one shape at a time, so no compile storm), its runs decode eagerly meanwhile and say so
(`PREPARING`), and later runs take the step once it is ready. A failure is remembered (eager, says why,
never traced again). On the CPU, Inductor compiles there whole. On CUDA a graph's capture must not race the
torch thread's kernels (a capture in global mode on a side stream fails when another thread launches on the
legacy default stream), so there the worker builds the step and, for Inductor, compiles it (its first call,
on the worker's stream), while the capture itself stays on the torch thread: a step captured by hand
(`CudaGraphStep`) is captured on the shape's first `take`, before the run's row is live (an idle step, about
a step's time); Inductor's reduce-overhead records its graphs in the calls that follow, as it did before.

A model keeps at most `max_steps` shapes (`MAX_STEPS`), each counted in bytes (`held`: its caches, rows and
a graph's static inputs and outputs) in the server's holdings and its admission budget. Beyond the bound a
new shape decodes eagerly and says why: nothing is evicted, because an evicted step's compiled graph stays
in dynamo's cache (its memory is not given back) and a shape that comes back would compile again, so a
crowd cycling through more shapes than the bound would keep the worker compiling.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from playground.generation import sampler
from playground.generation.config import GenerationConfig
from playground.models.kv_cache import KVCache
from playground.models.kv_pool import KVPool, bucket
from playground.models.static import Capture, EditKey, Edits, StaticRows, capturable, edit_keys, untaken_edit

ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # the row counts a batch of captured steps is padded up to
# Every step (any model, any shape) runs one code object, `DecodeStep.forward`, whose compiled graphs dynamo
# caches together, at most `recompile_limit` of them (8 by default, an error under fullgraph): a server with a
# few models and shapes needs more.
RECOMPILE_LIMIT = 256


def _raise_recompile_limits() -> None:
    """Dynamo reads its limits per thread (a value set on one thread is not seen on another, measured with torch
    2.13), while the cache they bound is the process's: set them on every thread that calls a compiled step."""
    config = torch._dynamo.config
    if config.recompile_limit < RECOMPILE_LIMIT:
        config.recompile_limit = RECOMPILE_LIMIT
    if config.accumulated_recompile_limit < RECOMPILE_LIMIT:
        config.accumulated_recompile_limit = RECOMPILE_LIMIT
MAX_STEPS = 16  # steps a model keeps (each holds its rows' caches: rows × length positions per layer): two shapes at
# every row bucket (`ROW_BUCKETS`: seven), a class's page runs and another setting beside them
PREPARING = "this step shape is being compiled aside, on the compile worker: eager until it is ready"
log = logging.getLogger("playground.captured")


def row_bucket(rows: int) -> int:
    """The smallest bucket that holds `rows` (a graph per bucket, not per row count)."""
    for size in ROW_BUCKETS:
        if rows <= size:
            return size
    raise ValueError(f"at most {ROW_BUCKETS[-1]} rows decode in one captured step, not {rows}")


@dataclasses.dataclass(frozen=True)
class StepShape:
    """What a step's graph depends on; everything else (tokens, positions, knobs, edit values) is a tensor."""

    rows: int
    length: int  # cache positions per row (a power of two: `kv_pool.bucket`)
    sampling: bool  # some row may sample (the greedy graph skips the warpers)
    candidates: int  # top candidates told per step (0: none)
    capture: Capture = Capture()
    edits: tuple[EditKey, ...] = ()
    long_rope: bool = False  # longrope's long table: the prompt already reaches past the original context


class Layout:
    """Where each number a step tells sits in its float32 output row (token ids are exact in float32)."""

    def __init__(self, shape: StepShape, heads: int, layers: int, d_model: int) -> None:
        C, S, L = shape.candidates, len(sampler.STAGES), shape.length
        sizes: dict[str, tuple[int, ...]] = {"token": (), "numerator": (), "denominator": ()}
        if C:
            sizes.update(ids=(C,), raw=(C,), probs=(S, C), finite=(S, C))
        if shape.capture.layers:
            sizes["attention"] = (len(shape.capture.layers), heads, L)
        if shape.capture.residual:
            sizes["residual"] = (layers + 1, d_model)
        self.fields: dict[str, tuple[int, int, tuple[int, ...]]] = {}  # name -> (offset, size, dims)
        at = 0
        for name, dims in sizes.items():
            self.fields[name] = (at, math.prod(dims), dims)
            at += math.prod(dims)
        self.width = at

    def pack(self, pieces: dict[str, torch.Tensor], rows: int) -> torch.Tensor:
        """(rows, width): each field's tensor (rows, *dims), zeros for a field not given."""
        parts = []
        for name, (_, n, _) in self.fields.items():
            t = pieces.get(name)
            parts.append(torch.zeros((rows, n), dtype=torch.float32, device=pieces["token"].device) if t is None
                         else t.reshape(rows, n).to(torch.float32))
        return torch.cat(parts, dim=1)

    def block(self, told: np.ndarray, name: str) -> np.ndarray:
        """Field `name` of every row of a step's output `told` (rows, width): a view (rows, *dims)."""
        at, n, dims = self.fields[name]
        return told[:, at : at + n].reshape(told.shape[0], *dims)


class DecodeStep(nn.Module):
    """The decode step of `model` for `shape.rows` rows of `shape.length` cache positions (see the module
    docstring). `start` gives a run one row, the eager prefill fills it (`first` chooses its first token),
    then each call of the module advances every row by one token and returns the (rows, width) output."""

    def __init__(self, model: nn.Module, shape: StepShape) -> None:
        super().__init__()
        c, dtype, device = model.config, model.dtype, model.device
        R, L = shape.rows, shape.length
        self.model, self.shape = model, shape
        self.layout = Layout(shape, c.n_heads, c.n_layers, c.d_model)
        windows = [kind.window for kind in model.layer_kinds]
        self.pool = KVPool(L)  # the rows' caches: the eager prefill writes them through KVCache views
        self.pool.reserve(R, kv_heads=c.n_kv_heads, head_dim=c.head_dim, windows=windows, dtype=dtype, device=device)
        self.rings = [w is not None and w < L for w in windows]  # those layers keep a ring of `w` slots
        for i, (k, v) in enumerate(zip(self.pool.keys, self.pool.values)):
            self.register_buffer(f"key_{i}", k, persistent=False)
            self.register_buffer(f"value_{i}", v, persistent=False)
        self.register_buffer("tokens", torch.zeros((R, 1), dtype=torch.long, device=device), persistent=False)
        self.register_buffer("positions", torch.zeros(R, dtype=torch.long, device=device), persistent=False)
        self.register_buffer("live", torch.zeros(R, dtype=torch.long, device=device), persistent=False)  # 1: a run's row
        self.register_buffer("seen", torch.zeros((R, c.vocab_size), dtype=torch.bool, device=device), persistent=False)
        idle = sampler.RowKnobs().values(c.vocab_size)  # greedy, no stage: what a row no run holds computes
        for name, dtype in sampler.KNOB_DTYPES.items():
            self.register_buffer(f"knob_{name}", torch.full((R,), idle[name], dtype=dtype, device=device), persistent=False)
        self.edits = Edits(shape.edits, R, c.n_heads, c.head_dim, c.d_model, dtype, device)
        for name, t in self.edits.buffers.items():
            self.register_buffer(f"edit_{name}", t, persistent=False)
        self.caches: list[KVCache | None] = [None] * R

    # --- the step (what torch.compile and torch.export trace)

    def forward(self, noise: torch.Tensor | None = None) -> torch.Tensor:
        """noise (R, V): each sampling row's exponential draws (`sampler.draw_noise`), None for a greedy shape."""
        n = len(self.rings)
        batch = StaticRows(
            self.tokens, self.positions, [getattr(self, f"key_{i}") for i in range(n)],
            [getattr(self, f"value_{i}") for i in range(n)], self.rings, capture=self.shape.capture,
            edits=self.shape.edits, buffers=lambda name: getattr(self, f"edit_{name}"), length=self.shape.length,
            long_rope=self.shape.long_rope,
        )
        logits = self.model.run(batch)[0][:, 0].float()  # (R, V)
        knobs = {name: getattr(self, f"knob_{name}") for name in sampler.KNOB_DTYPES}
        out, token = self._tell(logits, self.seen, knobs, noise, batch)
        self.tokens.copy_(token[:, None])
        self.positions.add_(self.live)  # a row no run holds stays at position 0 (its own slot 0, read by nobody)
        self.seen.scatter_(1, token[:, None], True)
        return out

    def _tell(
        self, logits: torch.Tensor, seen: torch.Tensor, knobs: dict[str, torch.Tensor], noise: torch.Tensor | None,
        batch: StaticRows | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Choose each row's token and pack what the step tells: (out (R, width), token (R,))."""
        shape = self.shape
        stages = sampler.process(logits, seen, knobs, sampling=shape.sampling)
        token, numerator, denominator = sampler.choose(stages[-1], knobs["sample"], noise if shape.sampling else None)
        pieces = {"token": token, "numerator": numerator, "denominator": denominator}
        if shape.candidates:
            pieces.update(zip(("ids", "raw", "probs", "finite"), sampler.candidates(stages, token, shape.candidates)))
        if batch is not None and shape.capture.layers:
            pieces["attention"] = torch.stack([batch.attention[layer] for layer in shape.capture.layers], dim=1).float()
        if batch is not None and shape.capture.residual:
            pieces["residual"] = torch.stack(batch.residual, dim=1).float()
        return self.layout.pack(pieces, logits.shape[0]), token

    # --- a run's row

    def start(self, ids: list[int], max_tokens: int, knobs: sampler.RowKnobs, interventions: tuple = ()) -> tuple[int, KVCache]:
        """A row for a run whose decoder stream starts with `ids` and reaches `max_tokens` positions: its
        cache (for the eager prefill), its knobs, edits and seen tokens. Returns (row, cache)."""
        cache = self.model.new_cache(1, max_tokens, pool=self.pool)
        row = self.pool.row_of(cache)
        self.caches[row] = cache
        self._knobs(row, knobs)
        self.seen[row] = False
        self.seen[row, torch.tensor(ids, dtype=torch.long, device=self.seen.device)] = True
        self.edits.set_row(row, interventions, self.model.config.head_dim)
        return row, cache

    def first(self, row: int, logits: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """The prefill's logits (1, V) -> the row's first token chosen as every step chooses (eagerly), its
        output row (1, width); the row then feeds that token at the next position."""
        rows = slice(row, row + 1)
        knobs = {name: getattr(self, f"knob_{name}")[rows] for name in sampler.KNOB_DTYPES}
        out, token = self._tell(logits, self.seen[rows], knobs, noise, None)
        self.tokens[rows] = token[:, None]
        self.positions[row] = self.caches[row].length
        self.live[row] = 1
        self.seen[rows] = self.seen[rows].scatter(1, token[:, None], True)
        return out

    def release(self, row: int) -> None:
        """The run of `row` ended: the row idles at position 0 until another run starts in it."""
        if self.caches[row] is not None:
            self.pool.release(self.caches[row])
            self.caches[row] = None
        self.live[row] = 0
        self.positions[row] = 0
        self._knobs(row, sampler.RowKnobs())

    def _knobs(self, row: int, knobs: sampler.RowKnobs) -> None:
        for name, value in knobs.values(self.model.config.vocab_size).items():
            getattr(self, f"knob_{name}")[row] = value


BACKENDS = ("inductor", "cudagraph", "eager")


class CudaGraphStep:
    """A step replayed as one CUDA graph (`torch.cuda.CUDAGraph`, no compiler: what ZeroGPU allows): captured
    on its first call, after a warm-up whose effects on the rows' state are undone; each call copies the
    noise in and replays. The graph reads and writes the step's own buffers, so the eager prefill and
    `start` / `first` between calls are seen by the next replay."""

    def __init__(self, step: DecodeStep) -> None:
        self.step = step
        self.graph: torch.cuda.CUDAGraph | None = None
        self.noise: torch.Tensor | None = None
        self.out: torch.Tensor | None = None

    def __call__(self, noise: torch.Tensor | None = None) -> torch.Tensor:
        if self.graph is None:
            self._capture(noise)
        if noise is not None:
            self.noise.copy_(noise)
        self.graph.replay()
        return self.out

    def _capture(self, noise: torch.Tensor | None) -> None:
        step = self.step
        state = {name: t.clone() for name, t in ((n, getattr(step, n)) for n in ("tokens", "positions", "seen"))}
        self.noise = None if noise is None else noise.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (lazy inits, library handles) outside the capture
            step(self.noise)
        torch.cuda.current_stream().wait_stream(side)
        for name, t in state.items():  # the warm-up advanced the rows: back to where they were
            getattr(step, name).copy_(t)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = step(self.noise)
        for name, t in state.items():  # capturing records without running; keep the state as it was
            getattr(step, name).copy_(t)


class _Worker:
    """The process's one compile worker: jobs run one at a time, in order, on a daemon thread of its own
    (started by the first job), so preparing shapes never takes the torch thread nor more than one core's
    compile at a time."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="playground-compile", daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except BaseException:  # noqa: BLE001 - a job records its own failure; the worker must outlive any
                log.exception("a compile job failed")


_WORKER = _Worker()


def _hookless(model: nn.Module) -> nn.Module:
    """A twin of `model`'s module tree that shares every parameter, buffer and attribute but has hook tables
    of its own. A step traces its twin: dynamo bakes a module's hooks into the graph without guarding them,
    and an analysis installs reading hooks on the shared model (`analysis.steering`, `analysis.attribution`)
    while the worker may be tracing on its own thread; the step's edits are its buffers, never hooks."""
    twin = copy.copy(model)
    for name, value in vars(model).items():
        if name.endswith("_hooks") or name.endswith("_hooks_with_kwargs") or name == "_forward_hooks_always_called":
            setattr(twin, name, type(value)())
    twin._modules = {name: None if child is None else _hookless(child) for name, child in model._modules.items()}
    return twin


def _tensor_bytes(tensors: Any) -> int:
    """The bytes of the storages `tensors` hold, each storage once (views of a pool's buffers share it)."""
    seen: dict[tuple[torch.device, int], int] = {}
    for t in tensors:
        if t is not None:
            storage = t.untyped_storage()
            seen[(t.device, storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def step_bytes(step: DecodeStep, run: Callable[..., torch.Tensor]) -> int:
    """What a kept step holds: its own buffers (the rows' caches, tokens, positions, seen tokens, knobs, edits;
    not the model's, which the model's bytes count) and, for a step captured by hand, the graph's static noise
    and output."""
    return _tensor_bytes([*step.buffers(recurse=False), getattr(run, "noise", None), getattr(run, "out", None)])


class CapturedDecoder:
    """The captured steps of one model: made on first use per shape and kept, each compiled once.

    backend "inductor": torch.compile(fullgraph=True, mode=`mode`) (on CUDA, mode "reduce-overhead" replays
    CUDA graphs); "cudagraph": the step captured as a CUDA graph by hand (no compiler; CUDA only);
    "eager": the same step run uncompiled (tests, and a check of the step's own numbers).
    `aside`: prepare new shapes on the compile worker, never on the caller's thread (see the module
    docstring); a scheduler sets it. `max_steps`: the shapes kept; a new shape beyond them decodes eagerly."""

    def __init__(self, model: nn.Module, *, backend: str = "inductor", mode: str | None = None,
                 compile: bool | None = None, aside: bool = False, max_steps: int = MAX_STEPS) -> None:
        if compile is not None:  # compile=False: the uncompiled step
            backend = "inductor" if compile else "eager"
        if backend not in BACKENDS:
            raise ValueError(f"captured decoding backend {backend!r}: use one of {', '.join(BACKENDS)}")
        if backend == "cudagraph" and model.device.type != "cuda":
            raise ValueError("a CUDA graph needs the model on a CUDA device; use the inductor backend on the CPU")
        self.model, self.backend, self.mode = model, backend, mode
        self.aside, self.max_steps = aside, max_steps
        # the next step call launched before the host handles this one's rows (`shared_step`): on CUDA the device
        # computes while the host builds the events; on the CPU a call is computed when launched, nothing to gain
        self.overlap = model.device.type == "cuda"
        self._steps: dict[StepShape, tuple[DecodeStep, Callable[..., torch.Tensor]]] = {}
        self._bytes: dict[StepShape, int] = {}  # each kept step's `step_bytes`
        self._busy: set[StepShape] = set()
        self._preparing: set[StepShape] = set()  # being built and compiled (aside, or inline by a run)
        self._cold: set[StepShape] = set()  # built aside, captured by hand on the torch thread at first take
        self._failed: dict[StepShape, str] = {}  # shapes whose capture raised: why they decode eagerly
        self.captures, self.capture_seconds = 0, 0.0  # steps captured (compiled) so far, and the time they took
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # told whenever a preparation ends

    def build(self, shape: StepShape) -> tuple[DecodeStep, Callable[..., torch.Tensor]]:
        """A new step of `shape` and what runs it (compiled on its first call): (step, run)."""
        with torch.inference_mode(False), torch.no_grad():  # plain buffers: an exported step may use them too
            step = DecodeStep(_hookless(self.model), shape).eval()
        if self.backend == "inductor":
            # Several rows on the CPU: Inductor's freezing packs the weights for oneDNN, as the eager batch's
            # invariant kernels do (a copy of the weights per such graph); one row reads them as they are.
            freeze = shape.rows > 1 and self.model.device.type == "cpu" and self.mode is None
            options = {"freezing": True} if freeze else None
            compiled = torch.compile(step, fullgraph=True, dynamic=False, mode=self.mode, options=options)

            def run(*args: Any) -> torch.Tensor:
                _raise_recompile_limits()  # on the thread that calls: it may compile (or guard-fail and recompile)
                return compiled(*args)

            return step, run
        if self.backend == "cudagraph":
            return step, CudaGraphStep(step)
        return step, step

    def take(self, shape: StepShape) -> tuple[DecodeStep, Callable[..., torch.Tensor]] | str:
        """The step of `shape`, now held (until `give`), or why the caller decodes eagerly instead (a str): another
        holder has it, it is being prepared aside, the model keeps `max_steps` shapes already, or capturing this
        shape failed (a compiler's error: said once, never tried again)."""
        with self._lock:
            got: Any = self._claim(shape)
        if got is None:  # a new shape, inline: built and captured (compiled) outside the lock, on an idle step
            got = self._prepare(shape, warm=True)
        elif not isinstance(got, str) and shape in self._cold:  # built aside: captured here, no row live yet
            got = self._warm_cold(shape, got)
        return got

    def give(self, shape: StepShape) -> None:
        """The holder of `shape`'s step is done with it."""
        with self._lock:
            self._busy.discard(shape)

    def ready(self, shape: StepShape) -> bool:
        """Whether `take` would hand the step of `shape` over at once (kept, prepared, free)."""
        with self._lock:
            return shape in self._steps and shape not in self._busy and shape not in self._preparing

    def ahead(self, shape: StepShape) -> None:
        """Start preparing `shape` aside now, before a run asks for it (a group of rows about to outgrow its
        bucket); nothing when it is known already, beyond the kept shapes, or not prepared aside."""
        with self._lock:
            known = shape in self._steps or shape in self._preparing or shape in self._failed
            if not self.aside or known or len(self._steps) + len(self._preparing) >= self.max_steps:
                return
            self._preparing.add(shape)
        self._aside(shape)

    def _aside(self, shape: StepShape) -> None:
        """Build and compile `shape` on the compile worker (a graph captured by hand: at its first `take`)."""
        _WORKER.submit(lambda: self._prepare(shape, warm=self.backend != "cudagraph"))

    def _claim(self, shape: StepShape) -> tuple[DecodeStep, Callable[..., torch.Tensor]] | str | None:
        """(with the lock) The kept step, now busy; why not (a str); or None: prepare it inline, now."""
        if shape in self._failed:
            return self._failed[shape]
        if shape in self._preparing:
            return PREPARING
        if shape in self._busy:
            return "another run holds the captured step of this shape"
        if shape in self._steps:
            self._busy.add(shape)
            return self._steps[shape]
        if len(self._steps) + len(self._preparing) >= self.max_steps:
            return f"this model keeps {self.max_steps} captured step shapes already (the most it keeps): eager"
        self._preparing.add(shape)
        if self.aside:
            self._aside(shape)
            return PREPARING
        self._busy.add(shape)
        return None

    def _prepare(self, shape: StepShape, *, warm: bool) -> tuple[DecodeStep, Callable[..., torch.Tensor]] | str:
        """Build the step of `shape` and (`warm`) run it once while no row is live so that it compiles (or is
        captured) now, where a compiler's failure can still leave the run to the eager loop (`take`)."""
        started = time.perf_counter()
        try:
            step, run = self.build(shape)
            if warm:
                self._warm(step, run)
        except BaseException as error:  # noqa: BLE001 - a compiler's failure on one shape must not fail a run
            return self._fail(shape, error)
        with self._settled:
            if warm:
                self._count_capture(started)
            self._steps[shape] = (step, run)
            self._bytes[shape] = step_bytes(step, run)
            self._preparing.discard(shape)
            if not warm:
                self._cold.add(shape)
            self._settled.notify_all()
        return step, run

    def _warm(self, step: DecodeStep, run: Callable[..., torch.Tensor]) -> None:
        shape = step.shape
        noise = None  # made as a run makes it (outside inference mode), or the graph's guards would differ
        if shape.sampling:
            noise = torch.ones((shape.rows, self.model.config.vocab_size), device=self.model.device)
        with torch.inference_mode():
            state = {name: getattr(step, name).clone() for name in ("tokens", "seen")}
            run(noise)  # idle rows: each writes its own slot 0, which a run's prefill writes again
            for name, t in state.items():
                getattr(step, name).copy_(t)

    def _warm_cold(self, shape: StepShape, got: tuple[DecodeStep, Callable[..., torch.Tensor]]) -> Any:
        """A step built aside whose graph is captured by hand: captured now, on the torch thread."""
        started = time.perf_counter()
        try:
            self._warm(*got)
        except Exception as error:  # noqa: BLE001 - as in `_prepare`
            return self._fail(shape, error)
        with self._lock:
            self._count_capture(started)
            self._cold.discard(shape)
            self._bytes[shape] = step_bytes(*got)
        return got

    def _count_capture(self, started: float) -> None:
        """(with the lock) One more step captured (compiled), which began at perf_counter() `started`."""
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started

    def _fail(self, shape: StepShape, error: BaseException) -> str:
        reason = f"capturing this step failed ({type(error).__name__}): eager"
        with self._settled:
            self._busy.discard(shape)
            self._preparing.discard(shape)
            self._cold.discard(shape)
            self._steps.pop(shape, None)
            self._bytes.pop(shape, None)
            self._failed[shape] = reason
            self._settled.notify_all()
        return reason

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until no shape is being prepared (True), or `timeout` seconds passed (False)."""
        with self._settled:
            return self._settled.wait_for(lambda: not self._preparing, timeout)

    def held(self) -> tuple[int, int]:
        """(steps kept, the bytes they hold): what the holdings line and the scheduler's budget count."""
        with self._lock:
            return len(self._steps), sum(self._bytes.values())

    @property
    def shapes(self) -> list[StepShape]:
        with self._lock:
            return list(self._steps)


# What the captured step takes: the fields of GenerationConfig it honours (or that change nothing of a plain decode:
# the prompt's chat template, stop strings and truncation are the plan's and the tail's). A run that sets any other
# field away from its default decodes eagerly and says why: a setting added later is eager until the step learns it.
TAKES = frozenset({
    "max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "min_p", "seed", "top_candidates",
    "capture_attention", "attention_layers", "capture_prompt_attention", "capture_residual", "interventions",
    "chat", "stop_strings", "truncate_prompt",
    "weight_precision",  # the step decodes the model it was built for: a copy at another precision is caught first
    "length_penalty", "early_stopping", "draft_tokens",  # beam search's and drafting's: nothing without them
})
EAGER_BECAUSE = {  # the words for the settings the step leaves to the eager loop
    "num_beams": "beam search decodes eagerly",
    "draft": "speculative decoding checks drafts eagerly",
    "use_cache": "without a KV cache every step reads the whole sequence: eager",
    "cache_blend": "a blended prompt cache is written by passes of its own: eager",
    **dict.fromkeys(("kv_window", "kv_sink", "kv_heavy", "kv_dtype", "rope_scaling"),
                    "a KV-cache policy or RoPE scaling decodes eagerly"),
}
PRECISION_COPY = "a run at another weight precision decodes a copy of the model, eagerly"
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(GenerationConfig)}


def why_eager(p: Any) -> str | None:
    """Why the run of plan `p` cannot decode through its model's captured steps (None: it can; the model
    must have them: `load_model(..., compile=True)`)."""
    lm = p.lm
    decoder = getattr(lm, "captured", None)
    if decoder is None:
        return "the model was loaded without compile=True"
    if getattr(lm.model, "shared_batch", False):
        return "the shared batch decodes its requests together, eagerly"
    if lm.model is not decoder.model:
        return PRECISION_COPY
    return why_not_taken(p)


def why_not_taken(p: Any) -> str | None:
    """Why the captured step cannot take the run of plan `p`, whatever its model holds (None: it can): the
    model's architecture, the run's settings and edits. A ZeroGPU worker's model has steps where the page's copy
    has none, and the GPU time a call asks for depends on whether the worker captures one (`app.zerogpu`)."""
    lm, cfg = p.lm, p.cfg
    reason = capturable(lm.model)
    if reason is not None:
        return reason
    for name, default in _DEFAULTS.items():
        if name not in TAKES and getattr(cfg, name) != default:
            return EAGER_BECAUSE.get(name, f"the captured step does not take {name}: eager")  # a KV policy too
    edit = untaken_edit(cfg.interventions)
    if edit is not None:
        return f"the captured step does not take the edit {edit}: eager"
    switch = _rope_switch(lm.model)
    if switch is not None and len(p.prefix_ids) <= switch <= p.max_length - 2:
        return "longrope switches to its long table during this run (the cache is encoded again): eager"
    try:
        sampler.RowKnobs.of(p.pipeline)
    except ValueError as error:
        return f"{error}: eager"
    return None


def eager_decoding(p: Any, reason: str) -> dict[str, Any]:
    """How a run that the captured step does not take decodes (`GenerationResult.decoding`, `/generate_text`'s
    `decoding`): eagerly, in its own rows (a beam search's beams) until a scheduler says how many shared its passes."""
    return {"captured": False, "rows": max(1, p.cfg.num_beams), "backend": "eager", "reason": reason}


def shape_of(p: Any, rows: int = 1) -> StepShape:
    cfg, c = p.cfg, p.lm.config
    layers = ()
    if cfg.capture_attention:
        layers = tuple(range(c.n_layers)) if cfg.attention_layers is None else tuple(dict.fromkeys(cfg.attention_layers))
    switch = _rope_switch(p.lm.model)
    return StepShape(rows=row_bucket(rows), length=bucket(p.max_length), sampling=p.pipeline.sampling,
                     candidates=min(cfg.top_candidates, c.vocab_size), capture=Capture(layers, cfg.capture_residual),
                     edits=edit_keys(cfg.interventions), long_rope=switch is not None and len(p.prefix_ids) > switch)


def _rope_switch(model: nn.Module) -> int | None:
    """The length after which longrope reads its long table (None: no such switch)."""
    return model.rope.switch_after if getattr(model, "rope", None) is not None else None
