"""Batched decoding: every running generation of one model advances in one forward pass per step.

    scheduler = Scheduler(lm)
    ticket = scheduler.submit(plan(lm, prompt, cfg))
    while scheduler.busy():
        scheduler.step()             # one forward pass for every running request
    events = ticket.drain()

Each request runs the engine's own loop (`run_plan`: greedy, sampling or beam search, its sampler
stages, seed, stopping, captures and cache), unchanged, in a greenlet on the calling thread. Its
model is a stand-in: a forward pass there becomes a *segment* (`models.rows.Segment`: its token ids,
its own KV cache, its own start position, its own recorder) and the greenlet waits for the next step,
where the segments of all requests go through the model's own batched pass (`DecoderLM.forward_rows`).
This module only schedules: it decides who steps together, feeds prompts in chunks, and gives each
request's caches rows of its pools (`models.kv_pool`, one per kind and width), so that the model
attends the new tokens of a layer in one call. A beam search is one segment of `num_beams` rows. A
prompt longer than `CHUNK` tokens is fed `CHUNK` tokens per step (chunked prefill), so a newcomer
never holds the others up for long.

Results never depend on the batch: beside others, the weight products go through the prepacked
oneDNN path (`models/kernels.py`), where a row's output is bitwise the same whatever the other rows;
a row's attention reads its own keys padded to a width of its own length (`kv_pool.key_width`); the
rest is row-wise or per segment. So a request gets bitwise the same logits, tokens, probabilities and
captures beside any others. A step with one request alone runs the model's own forward pass instead
(`x @ W`: for one row the fastest kernel, a third faster than the prepacked one on 2 cores), so a
visitor alone decodes as fast as the command line with generate_all's numbers; the two paths agree to
float32 rounding (probabilities within 1e-5, the same tokens), which is how a request compares beside
others and alone.

Seq2seq models batch their decoder passes the same way (`EncoderDecoderLM.decode_rows`): each segment
carries its encoder output, whose cross-attention K/V join a pool of their own once projected, and
cross-attention reads each segment's own source. The encoder runs once per request, alone in its turn
(a source is a prompt's prefill). Everything here must run on one thread (the server's torch thread).
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import greenlet
import torch

from playground.checkpoints.limits import Limits
from playground.generation import captured
from playground.generation.batch_history import DECODE, OWN, PREFILL, Entry, Pass, StepHistory
from playground.generation.budget import estimate_request, peak_bytes
from playground.generation.device_memory import admission_budget
from playground.generation.engine import run_plan
from playground.generation.events import StepEvent
from playground.generation.fair import by_visitor_then_tab
from playground.generation.plan import Plan
from playground.generation.prefix_cache import BLOCK, Feed, PrefixStore
from playground.generation.shared_step import Seat, Seating, Steps
from playground.models.edits import edited
from playground.models.kv_cache import KVCache, Seq2SeqCache
from playground.models.kv_policy import KVPolicy, PolicyCache
from playground.models.kv_pool import KVPool, bucket
from playground.models.recorder import Recorder
from playground.models.rows import Segment

CHUNK = BLOCK  # prompt tokens a request feeds per step; fixed, never chosen from the others (prefix blocks too)


class CaughtUp:
    """What a paced reader (`Ticket.stream(due=...)`) gets after the events queued when it woke: it holds every event
    computed so far (a page draws its frame now)."""

    def __repr__(self) -> str:
        return "CAUGHT_UP"


CAUGHT_UP = CaughtUp()

_TURN = object()  # a request asks for its turn at an unbatched pass (a seq2seq encoder, a KV policy's request)
_WAIT = object()  # a request waits a step without a pass (for a prefix block another request is computing)


class _BatchedModel:
    """The model as a scheduled request sees it: a forward pass waits for the next batch.

    A request with interventions (the causal lab's edits) joins the batch like any other: its segments
    carry its edits, which the pass applies to its rows only (`models.edits`; `applies_own_edits` tells
    `models.edits.edited` to leave them to us). Its prompt is never shared through the prefix store (its
    keys are its edits'). A request with a KV policy or its own RoPE table (`models.kv_policy.PolicyCache`)
    runs each pass alone in its turn: its cache is not rows of a pool and its table travels with that
    cache, so nobody else sees it."""

    applies_own_edits = True
    shared_batch = True  # its requests decode together, eagerly (never through a model's captured step)

    def __init__(self, model: torch.nn.Module, edits: tuple = (), ticket: Ticket | None = None) -> None:
        self._model = model
        self._edits = tuple(edits)
        self._ticket = ticket

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def alone(self, fn: Callable[[torch.nn.Module], Any]) -> Any:
        """`fn(model)` in this request's turn, alone: passes of the model itself, outside the batch (a CacheBlend
        prompt's chunks and blend pass, which are no rows of the pool)."""
        return self._turn(fn)(self._model)

    def new_cache(self, batch: int, max_tokens: int, policy: KVPolicy | None = None) -> KVCache | Seq2SeqCache | PolicyCache:
        """The request's cache as rows of the scheduler's pool, so its decoding rows attend beside others'.
        A run with its own KV policy or RoPE table (`policy`) keeps a cache of its own and takes its own turn."""
        if policy is not None:
            return self._model.new_cache(batch, max_tokens, policy=policy)
        ticket = self._ticket
        if ticket is None or ticket.scheduler is None:
            return self._model.new_cache(batch, max_tokens)
        return ticket.scheduler._new_cache(ticket, batch, max_tokens)

    def __call__(
        self, input_ids: torch.Tensor, cache: KVCache | None = None, recorder: Recorder | None = None,
        *, last_only: bool = False,
    ) -> torch.Tensor:
        if isinstance(cache, PolicyCache):
            return _in_turns(self._turn(self._model), input_ids, cache, recorder, last_only=last_only)
        scheduler = greenlet.getcurrent().parent
        T = input_ids.shape[1]
        feed = None
        if cache is None and recorder is None and last_only and T > CHUNK and not self._model.reencodes_at(0, T):
            # A step without the cache recomputes every position's keys and values; it does so here in
            # chunks over a scratch cache dropped after the step (the same work, in slices no longer than a
            # prompt's chunk), so a long cache-less run never holds the others' turn for a whole pass.
            # (No prefix store: a cache-less step recomputes everything, as it says.)
            cache = self._model.new_cache(input_ids.shape[0], T)
        elif cache is not None and self._chunks(recorder, last_only):
            feed = self._feed(cache, input_ids)
        if cache is not None and self._chunks(recorder, last_only):
            input_ids = _fill(scheduler, input_ids, cache, feed, self._edits)
        if feed is not None and recorder is None and last_only:
            # Nothing recorded of the last pass (a script's run): the whole prompt may come from the store. The
            # page's runs record the last position's residual stream (and attention row) at step 0, which a tail
            # does not hold: they restore full blocks only and run their last chunk.
            return _last(scheduler, input_ids, cache, feed)
        start = cache.length if cache is not None else 0
        return scheduler.switch(Segment(input_ids, cache, recorder, start, "last" if last_only else "all",
                                        edits=self._edits))

    def _chunks(self, recorder: Recorder | None, last_only: bool) -> bool:
        """Whether a pass with a cache may be fed in chunks: nothing recorded, or only what its last position
        gives (the page's live attention row and residual stream; never the prompt's whole maps or internals)."""
        if recorder is None:
            return True
        cfg = self._ticket.plan.cfg if self._ticket is not None else None
        return last_only and cfg is not None and not cfg.capture_prompt_attention and not recorder.internals_layers

    def _feed(self, cache: Any, input_ids: torch.Tensor) -> Feed | None:
        """The prefill's walk along the scheduler's prefix store, where its blocks may be shared: a prompt's
        first pass (an empty cache of one row, a plain KVCache), on a model whose rotary tables cannot switch
        within the cache (longrope re-encodes everything with other factors past its original context)."""
        ticket = self._ticket
        store = ticket.scheduler.prefix if ticket is not None and ticket.scheduler is not None else None
        if store is None or type(cache) is not KVCache or cache.length or input_ids.shape[0] != 1 or self._edits:
            return None
        if self._model is not ticket.scheduler.lm.model:  # a precision copy's keys are its own: never the store's
            return None
        if self._model.reencodes_at(0, cache.max_tokens):
            return None
        ticket.feed = Feed(store, ticket)
        return ticket.feed

    def _turn(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def in_turn(*args: Any, **kwargs: Any) -> Any:
            greenlet.getcurrent().parent.switch(_TURN)
            with edited(self._model, self._edits):  # no switch inside: the scope is this pass's only
                return fn(*args, **kwargs)
        return in_turn

    @property
    def encode(self) -> Callable[..., Any]:
        return self._turn(self._model.encode)  # once per request, alone: the source's own pass

    def decode(
        self, input_ids: torch.Tensor, encoder_out: torch.Tensor, attention_mask: torch.Tensor | None = None,
        cache: Any = None, recorder: Recorder | None = None, *, last_only: bool = False,
    ) -> torch.Tensor:
        if attention_mask is not None:  # a padded batch of sources (the engine never sends one): alone
            return self._turn(self._model.decode)(input_ids, encoder_out, attention_mask, cache, recorder,
                                                  last_only=last_only)
        start = cache.length if cache is not None else 0
        segment = Segment(input_ids, cache, recorder, start, "last" if last_only else "all", encoder_out=encoder_out,
                          edits=self._edits)
        return greenlet.getcurrent().parent.switch(segment)


def _fill(
    scheduler: greenlet.greenlet, input_ids: torch.Tensor, cache: KVCache, feed: Feed | None, edits: tuple = (),
) -> torch.Tensor:
    """Chunked prefill: every chunk but the last only fills the cache (a pass each, under the request's `edits`, or
    a block restored from the prefix store by `feed`). Returns the last chunk, whose pass gives the logits."""
    while input_ids.shape[1] > CHUNK:
        chunk, input_ids = input_ids[:, :CHUNK], input_ids[:, CHUNK:]
        said = feed.next(cache, chunk[0].tolist()) if feed is not None else "compute"
        while said == "wait":  # another run computes this very block now: read it next step
            scheduler.switch(_WAIT)
            said = feed.next(cache, chunk[0].tolist())
        if said == "compute":
            scheduler.switch(Segment(chunk, cache, None, cache.length, "none", edits=edits))
            if feed is not None:
                feed.keep(cache)
    return input_ids


def _last(scheduler: greenlet.greenlet, input_ids: torch.Tensor, cache: KVCache, feed: Feed) -> torch.Tensor:
    """The prompt's last chunk: restored from the store's tail with the logits its pass gave (no pass at all), or
    waited for (another live run computes it now) or computed, then kept as a tail."""
    said = feed.last(cache, input_ids[0].tolist())
    while said == "wait":
        scheduler.switch(_WAIT)
        said = feed.last(cache, input_ids[0].tolist())
    if said == "restored":
        assert feed.logits is not None
        return feed.logits
    logits = scheduler.switch(Segment(input_ids, cache, None, cache.length, "last"))
    feed.keep_last(cache, logits)
    return logits


def _in_turns(
    own: Callable[..., torch.Tensor], input_ids: torch.Tensor, cache: Any, recorder: Recorder | None, *, last_only: bool,
) -> torch.Tensor:
    """A pass that runs alone (`own`: in its turn), its prompt fed in CHUNK-token turns as the batch feeds
    everyone's: the others step between them, so a long prompt with a KV policy or a drafter's never
    holds the torch thread for a whole pass. Whole where the chunks would change the numbers: a recorded
    pass, one whose every logit is read, a heavy-hitter policy (its evictions follow the whole prompt's
    attention)."""
    T = input_ids.shape[1]
    if cache is not None and recorder is None and last_only and not _scores_keys(cache):
        while T > CHUNK:
            own(input_ids[:, :CHUNK], cache, None, last_only=True)
            input_ids, T = input_ids[:, CHUNK:], T - CHUNK
    return own(input_ids, cache, recorder, last_only=last_only)


def _scores_keys(cache: Any) -> bool:
    """Whether a cache evicts by the attention its keys receive (a heavy-hitter policy)."""
    return isinstance(cache, PolicyCache) and any(cache.wants_weights(layer) for layer in range(len(cache.kinds)))


class _Drafting:
    """A model drafter as a scheduled request runs it: each of its passes (and each CHUNK of a long feed) in a
    turn of its own, so drafting 16 tokens is 16 turns between the batch's steps, never 16 passes inside one
    (the drafter's module otherwise: its config, device, dtype)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def __call__(self, input_ids: torch.Tensor, cache: Any = None, recorder: Recorder | None = None, *,
                 last_only: bool = False) -> torch.Tensor:
        return _in_turns(self._turn, input_ids, cache, recorder, last_only=last_only)

    def _turn(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        greenlet.getcurrent().parent.switch(_TURN)
        return self._module(*args, **kwargs)


def _wait_for_row(seat: Seat) -> Any:
    """A captured run asks for its row of its group's next step call (the scheduler makes it, `Scheduler._advance`)."""
    return greenlet.getcurrent().parent.switch(seat)


_END = object()


class _Identity:
    """An owner that cannot be hashed (a dataclass with `eq`, e.g. a `Session`), keyed by identity for the turns."""

    __slots__ = ("owner",)

    def __init__(self, owner: Any) -> None:
        self.owner = owner

    def __hash__(self) -> int:
        return id(self.owner)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.owner is self.owner


def _owner_key(owner: Any) -> Hashable:
    return owner if isinstance(owner, Hashable) else _Identity(owner)


class Ticket:
    """One request in a scheduler: its events as they come, then the end (or its error)."""

    def __init__(self, p: Plan, stop: threading.Event, owner: Any, memory: int = 0, tag: Any = None) -> None:
        self.plan, self.outer_stop, self.owner, self.memory = p, stop, owner, memory
        self.tag = tag if tag is not None else id(self)  # its label in the scheduler's history (opaque)
        self.seen = False  # recorded in a step already (its first record is its join)
        self.stop = threading.Event()  # the run's own: set by the caller's Event or by `cancel`
        self.rows = max(1, p.cfg.num_beams)
        self.events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.pending: list[StepEvent] = []  # made in the current step, not yet told
        self.glet: greenlet.greenlet | None = None
        self.waiting: Any = None  # a Segment for the next batch, _TURN, or None (not started)
        self.started = False  # admitted into the batch
        self.first_event = False
        self.produced = 0  # events so far (tokens, or beam steps)
        self.arrived = threading.Event()  # set by the first event or the end: the request is no longer waiting
        self.ended = threading.Event()  # set by the end: wakes a reader that waits for its next frame (`stream`)
        self.done = False
        self.scheduler: Scheduler | None = None
        self.caches: list[KVCache | Seq2SeqCache] = []  # its caches, rows of the scheduler's pools
        self.prefill_noted = False  # its prompt's prefix-cache hits are in the history
        self.feed: Feed | None = None  # its prompt's walk along the prefix store (None: no store, or not shared)
        self.cached_tokens = 0  # prompt tokens whose keys and values came from the prefix store (once it began)
        self.peak_rows = 0  # the most rows of any pass this request was in (its `decoding` says it)
        self.seat: Seat | None = None  # its row of a captured step (freed with the request, whatever ends it)
        self._ran: Plan | None = None  # the plan its events came from (the batch's proxy of `plan`, or `plan`)

    def live(self) -> bool:
        """Still running (a prefix block it is computing will come)."""
        return not self.done and not self.stop.is_set()

    def _body(self) -> None:
        steps = self.scheduler.steps if self.scheduler is not None else None
        reason = captured.why_eager(self.plan) if steps is not None else None
        if steps is not None and reason is None:
            # the model's captured step (load_model(compile=True)) decodes this run in a row of its shape's group,
            # beside every other run of that shape (one step call for all, `_advance`); its prompt is fed in a turn
            # of its own, reading and filling the model's prefix store as the batch's own chunks do
            self.plan.prefix = self.scheduler.prefix
            self.plan.steps = Seating(steps, _wait_for_row, self._batched)
            greenlet.getcurrent().parent.switch(_TURN)
            events = run_plan(self.plan, self.stop)
            self._ran = self.plan
        else:
            proxied = self._batched(self.plan)
            events = run_plan(proxied, self.stop)
            if reason is not None:  # a model with captured steps: why this run is not in one (not "the batch's")
                proxied.decoding = captured.eager_decoding(self.plan, reason)
            self._ran = proxied
        for event in events:
            if not self.first_event:  # the prompt is in: what the prefix store gave it (either path)
                self.cached_tokens = int(event.cache.get("reused_tokens", 0))
            self.first_event = True
            self.produced += 1
            self.pending.append(event)  # told at the step's end, once the step is in the history

    def _batched(self, p: Plan) -> Plan:
        """`p` through the shared batch: its passes are segments of the scheduler's steps (or turns of their own)."""
        proxied = dataclasses.replace(p, lm=dataclasses.replace(p.lm, model=_BatchedModel(p.lm.model, p.cfg.interventions, self)))
        if p.draft is not None and p.draft.module is not None:
            proxied.draft = dataclasses.replace(p.draft, module=_Drafting(p.draft.module))
        return proxied

    def tell(self) -> None:
        """Hand the events of the step just ended to the consumer."""
        if self.pending:
            for event in self.pending:
                self.events.put(event)
            self.pending.clear()
            self.arrived.set()

    def cancel(self) -> None:
        """End the run before its next forward pass (its consumer went away)."""
        self.stop.set()

    def finish(self, error: BaseException | None = None) -> None:
        self.done = True
        told = self._ran.decoding if self._ran is not None else None
        if told is not None:  # how it decoded, with the rows its passes really had (others' rows beside its own)
            self.plan.decoding = {**told, "rows": max(told["rows"], self.peak_rows)}
        if self.scheduler is not None:
            self.scheduler._release(self)
        self.events.put(error if error is not None else _END)
        self.arrived.set()
        self.ended.set()

    @property
    def steps_left(self) -> int:
        """Steps it may still take (its budget; an end token may come sooner)."""
        return max(0, self.plan.cfg.max_new_tokens - self.produced)

    def stream(
        self, timeout: float | None = None, due: Callable[[], float] | None = None,
    ) -> Iterator[StepEvent | CaughtUp]:
        """The events as the scheduler produces them (blocking); raises the run's error, if any.

        `due()`: when the reader next wants events (`time.monotonic()`, a page's next frame). With nothing queued it
        sleeps until then, or until the run ends, and takes what came meanwhile, then CAUGHT_UP: it is woken once a
        frame, not once a step (a class's readers woken at every step take the GIL from the torch thread in turn)."""
        fresh = False  # events yielded since the last CAUGHT_UP
        while True:
            if due is not None and self.events.empty():
                if fresh:
                    fresh = False
                    yield CAUGHT_UP
                    continue
                wait = due() - time.monotonic()
                if wait > 0:
                    self.ended.wait(wait)
            item = self.events.get(timeout=timeout)
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            fresh = True
            yield item

    def take(self) -> list[StepEvent]:
        """The events produced so far and not yet taken, without waiting; raises the run's error, if any."""
        taken = []
        while True:
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return taken
            if item is _END:
                self.events.put(_END)  # the end stays for the next reader
                return taken
            if isinstance(item, BaseException):
                raise item
            taken.append(item)

    def drain(self) -> list[StepEvent]:
        """Every event so far, for a finished ticket."""
        return list(self.stream(timeout=0))


class Scheduler:
    """The running requests of one model and the ones waiting to join.

    max_rows caps the rows decoding at once (a beam search takes num_beams); per_owner caps the
    requests one owner (a visitor) has running; max_prefills caps the prompts being fed at once; the
    running requests' memory peaks (generation.budget) must fit in the budget beside the model and
    its prepacked copy. A request that fits none of these alone still runs when nothing else does.
    A step with one request runs the model's own forward pass (the single-request kernels) unless
    `invariant_alone`; two or more share the model's batched pass (`forward_rows`, or `decode_rows` for
    an encoder-decoder) through the batch-invariant kernels.
    `submit` may be called from any thread; `step` runs on the one thread that does the work.
    """

    def __init__(
        self, lm: Any, *, max_rows: int = 16, per_owner: int = 1, max_prefills: int = 2, memory_budget: int | None = None,
        invariant_alone: bool = False, history: StepHistory | None = None, prefix: PrefixStore | None = None,
        visitor_of: Callable[[Any], Any] | None = None,
    ) -> None:
        self.lm = lm
        self.prefix = prefix  # the model's prefix store (kept by the caller across schedulers), or None
        # the visitor (an address or an account) an owner (a tab, a script's client) belongs to: places are offered
        # by visitor in turn, then by tab (`fair.by_visitor_then_tab`); by default each owner is its own visitor
        self.visitor_of: Callable[[Any], Any] = visitor_of or (lambda owner: owner)
        self._served: dict[tuple[str, Any], int] = {}  # ("tab" | "visitor", key) -> admissions counted when last served
        self._admitted = 0
        # what each step did, for the page's lesson on the shared batch (kept by the caller across schedulers)
        self.history = history if history is not None else StepHistory()
        self._weight_bytes: dict[int, int] = {}  # per model of a pass: its weights' bytes, counted once
        self._passes: list[tuple[list[Ticket], list[Entry], int]] = []  # this step's, recorded at its end
        self._ending: list[tuple[Ticket, BaseException | None]] = []  # requests done in this step, told at its end
        self.invariant_alone = invariant_alone
        self.max_rows, self.per_owner, self.max_prefills = max_rows, per_owner, max_prefills
        limits = lm.limits or Limits.default()
        # what the running requests' peaks may take: on the CPU the budget less the model twice (its weights
        # and their prepacked copy); on CUDA the GPU's free memory (generation.device_memory)
        budget = limits.memory_budget_bytes if memory_budget is None else memory_budget
        self.memory_left = admission_budget(lm, budget)
        self.steps: Steps | None = None  # the captured steps' groups: every run of a shape in one call per step
        if getattr(lm, "captured", None) is not None:
            lm.captured.aside = True  # a new step shape compiles on the compile worker, never inside a step here
            self.steps = Steps(lm.captured)
        self.waiting: collections.deque[Ticket] = collections.deque()
        self.running: list[Ticket] = []
        self.step_seconds: float | None = None  # a moving average of recent steps (for the expected wait)
        self._lock = threading.Lock()
        # the running requests' K/V by kind, width (kv_pool.bucket) and model (a precision variant's apart)
        self.pools: dict[tuple[str, int, int], KVPool] = {}

    def submit(self, p: Plan, stop: threading.Event | None = None, owner: Any = None, tag: Any = None) -> Ticket:
        parts = estimate_request(p.lm.config, p.lm.dtype.itemsize, p.memory_request())  # the plan's own estimate
        # a pool's rows round a cache up (a power of two, at least 64 positions): up to twice its K/V
        memory = peak_bytes(parts)[0] + parts.get("kv_cache", 0) + parts.get("cross_cache", 0)
        ticket = Ticket(p, stop if stop is not None else threading.Event(), owner if owner is not None else object(),
                        memory, tag)
        ticket.scheduler = self
        with self._lock:
            self.waiting.append(ticket)
        return ticket

    def busy(self) -> bool:
        with self._lock:
            return bool(self.running or self.waiting)

    def active(self) -> int:
        """Requests running or waiting."""
        with self._lock:
            return len(self.running) + len(self.waiting)

    def queue_position(self, ticket: Ticket) -> int:
        """0 once running; otherwise how many wait ahead of it, plus one."""
        with self._lock:
            return next((i + 1 for i, t in enumerate(self._in_turn()) if t is ticket), 0)

    def _in_turn(self) -> list[Ticket]:
        """The waiting requests in the order places are offered: visitors in turn, then their tabs in turn."""
        return by_visitor_then_tab(list(self.waiting), lambda t: _owner_key(t.owner), self._visitor_of_key, self._served)

    def _visitor_of_key(self, key: Hashable) -> Hashable:
        owner = key.owner if isinstance(key, _Identity) else key
        visitor = self.visitor_of(owner)
        return visitor if isinstance(visitor, Hashable) else _Identity(visitor)

    def _serve(self, ticket: Ticket) -> None:
        """`ticket` joins the batch: its tab and its visitor go to the back of the turns. Only the owners waiting or
        running are remembered."""
        self._admitted += 1
        key = _owner_key(ticket.owner)
        self._served[("tab", key)] = self._served[("visitor", self._visitor_of_key(key))] = self._admitted
        here = {_owner_key(t.owner) for t in (*self.waiting, *self.running)}
        here |= {self._visitor_of_key(key) for key in here}
        self._served = {key: n for key, n in self._served.items() if key[1] in here}

    def expected_wait(self, ticket: Ticket) -> float | None:
        """Seconds until a waiting request may start, at most: the running requests free their rows after
        their remaining budgets of steps, each request ahead in line takes the first row free and holds
        it for its own budget, at the recent step time. None before any step was timed."""
        if self.step_seconds is None:
            return None if self.queue_position(ticket) else 0.0
        with self._lock:
            if ticket not in self.waiting:
                return 0.0
            free = [0] * max(0, self.max_rows - self.rows())
            ahead = list(itertools.takewhile(lambda t: t is not ticket, self._in_turn()))
            rows = free + [t.steps_left for t in self.running] or [0]
        heapq.heapify(rows)
        for t in ahead:  # each takes the row that frees first (a beam search counted as one row)
            heapq.heappush(rows, heapq.heappop(rows) + t.plan.cfg.max_new_tokens)
        return rows[0] * self.step_seconds

    def rows(self) -> int:
        return sum(t.rows for t in self.running)

    def _admit(self) -> None:
        with self._lock:
            for t in self.running + list(self.waiting):
                if t.outer_stop.is_set():
                    t.stop.set()
            for t in [t for t in self.waiting if t.stop.is_set()]:
                self.waiting.remove(t)
                t.finish()
            rows, memory = self.rows(), sum(t.memory for t in self.running)
            memory += self._step_bytes()  # the model's kept captured steps take the same budget
            memory += self.prefix.bytes if self.prefix is not None else 0  # and its kept prefix blocks
            feeding = sum(not t.first_event for t in self.running)
            for t in self._in_turn():
                mine = sum(r.owner == t.owner for r in self.running)  # an owner is a visitor's key (app.visitors)
                fits = (rows + t.rows <= self.max_rows and memory + t.memory <= self.memory_left) or not self.running
                if mine < self.per_owner and fits and feeding < self.max_prefills:
                    self.waiting.remove(t)
                    self.running.append(t)
                    self._serve(t)
                    rows, memory, feeding = rows + t.rows, memory + t.memory, feeding + 1

    def _step_bytes(self) -> int:
        captured = getattr(self.lm, "captured", None)
        return captured.held()[1] if captured is not None else 0

    def _new_cache(self, ticket: Ticket, batch: int, max_tokens: int) -> KVCache | Seq2SeqCache:
        """A cache for `ticket` in the pool of its width: one-token rows of a pool attend in one call."""
        model = ticket.plan.lm.model  # a precision variant's rows pool apart from the loaded model's
        cache = model.new_cache(batch, max_tokens, pool=self._pool("self", max_tokens, model))
        if isinstance(cache, Seq2SeqCache):  # the source's K/V join a pool once projected
            cache.cross_pool = lambda tokens: self._pool("cross", tokens, model)
        ticket.caches.append(cache)
        return cache

    def _pool(self, kind: str, tokens: int, model: torch.nn.Module) -> KVPool:
        """The pool of `kind` ("self" or "cross") of `model` whose width covers `tokens` positions."""
        key = (kind, bucket(tokens), id(model))
        if key not in self.pools:
            self.pools[key] = KVPool(key[1])
        return self.pools[key]

    def _release(self, ticket: Ticket) -> None:
        """A finished request's rows go back to their pools; an empty pool is dropped (its memory freed)."""
        if ticket.seat is not None:
            ticket.seat.leave()
        for cache in ticket.caches:
            parts = (cache.self_cache, cache.cross) if isinstance(cache, Seq2SeqCache) else (cache,)
            for kv in parts:
                if kv is not None:
                    kv.pool.release(kv)
        ticket.caches.clear()
        for key, pool in list(self.pools.items()):
            if not pool.live:
                del self.pools[key]

    def fail_all(self, error: BaseException) -> None:
        """Every running and waiting request ends with `error`."""
        with self._lock:
            tickets, self.running, self.waiting = self.running + list(self.waiting), [], collections.deque()
        for t in tickets:
            if not t.done:
                t.finish(error)

    def _resume(self, t: Ticket, value: Any = None) -> None:
        try:
            if t.glet is None:
                t.glet = greenlet.greenlet(t._body)
                t.waiting = t.glet.switch()
            else:
                t.waiting = t.glet.switch(value)
        except Exception as error:  # the run's own error goes to its consumer, not to the others
            self._end(t, error)
            return
        if t.glet.dead:
            self._end(t)

    def _end(self, t: Ticket, error: BaseException | None = None) -> None:
        """The request is done; its consumer hears the end with the step's events, once the step is recorded."""
        t.done = True
        self._ending.append((t, error))

    def step(self) -> None:
        """Admit who may join, then one forward pass for every running request."""
        began = time.perf_counter()
        self._passes, self._ending = [], []
        try:
            self._step()
            took = time.perf_counter() - began
            self.step_seconds = took if self.step_seconds is None else 0.8 * self.step_seconds + 0.2 * took
            self._record(took)
        finally:  # what a consumer sees of a step (its events, a run's end) is in the history first
            for t in [*self.running, *(t for t, _ in self._ending)]:
                t.tell()
            for t, error in self._ending:
                t.finish(error)

    def _note(self, tickets: list[Ticket], entries: list[Entry], model: torch.nn.Module) -> None:
        """One pass of this step, for the history (its entries' joins and leaves are settled at the step's end)."""
        key = id(model)
        if key not in self._weight_bytes:
            self._weight_bytes[key] = _weight_bytes(model)
        self._passes.append((tickets, entries, self._weight_bytes[key]))

    def _record(self, seconds: float) -> None:
        passes = []
        for tickets, entries, weight_bytes in self._passes:
            settled = []
            for t, e in zip(tickets, entries):
                settled.append(e._replace(joined=not t.seen, left=t.done))
                t.seen = True
                self._note_prefill(t)
            passes.append(Pass(weight_bytes, tuple(settled)))
        for t, _ in self._ending:  # a run restored whole that ended with its first token took no pass at all
            self._note_prefill(t)
        self._passes = []
        self.history.record(seconds, tuple(passes))

    def _note_prefill(self, t: Ticket) -> None:
        if t.first_event and not t.prefill_noted:  # its prompt is in: what the prefix store gave it
            t.prefill_noted = True
            prompt = len(t.plan.prompt_ids)  # a branch's forced tokens follow it and may be restored with it
            self.history.note_prefill(t.tag, prompt, min(t.cached_tokens, prompt))

    def _step(self) -> None:
        self._admit()
        with torch.inference_mode():
            for t in self.running:
                if t.waiting is None or t.waiting is _TURN or t.waiting is _WAIT:  # newcomers start; turns; waits
                    turn = t.waiting is _TURN
                    self._resume(t)
                    if turn:  # its pass ran alone, inside the resume
                        self._note([t], [Entry(t.tag, t.rows, 0, OWN, False)], t.plan.lm.model)
                        t.peak_rows = max(t.peak_rows, t.rows)
            ready = [t for t in self.running if not t.done and isinstance(t.waiting, Segment)]
            # A request runs on its plan's model: the scheduler's, or a precision variant of it
            # (weight_precision). Requests of one model share a pass; another model's get a pass of their own.
            groups: dict[int, list[Ticket]] = {}
            for t in ready:
                groups.setdefault(id(t.plan.lm.model), []).append(t)
            for batch in groups.values():
                self._note(batch, [_entry(t) for t in batch], batch[0].plan.lm.model)
                rows = sum(t.rows for t in batch)
                for t in batch:
                    t.peak_rows = max(t.peak_rows, rows)
                try:
                    outs = self._forward([t.waiting for t in batch], batch[0].plan.lm.model, alone=len(ready) == 1)
                except Exception as error:  # e.g. out of memory: every request in this pass fails alike
                    outs = None
                    for t in batch:
                        self._end(t, error)
                if outs is not None:
                    for t, out in zip(batch, outs):
                        self._resume(t, out)
            self._advance([t for t in self.running if not t.done and isinstance(t.waiting, Seat)])
        with self._lock:
            self.running = [t for t in self.running if not t.done]

    def _advance(self, seated: list[Ticket]) -> None:
        """One call of each captured step group for its runs waiting on it (every row of the group in one call)."""
        groups: dict[int, list[Ticket]] = {}
        for t in seated:
            t.seat = t.waiting
            groups.setdefault(id(t.seat.group), []).append(t)
        for batch in groups.values():
            try:
                told = batch[0].seat.group.advance()
            except Exception as error:  # e.g. out of memory: every run of this call fails alike
                self._note(batch, [Entry(t.tag, 1, 1, DECODE, True) for t in batch], batch[0].plan.lm.model)
                for t in batch:
                    self._end(t, error)
                continue
            # the runs this call told (with the device a call ahead, one that joined since waits for the next)
            heard = [t for t in batch if t.seat in told]
            self._note(heard, [Entry(t.tag, 1, 1, DECODE, True) for t in heard], batch[0].plan.lm.model)
            for t in heard:
                self._resume(t, told[t.seat])

    def _forward(self, segments: list[Segment], model: torch.nn.Module, *, alone: bool) -> list[torch.Tensor | None]:
        if alone and not self.invariant_alone:
            # Alone: the model's own forward pass with the single-request kernels (`x @ W`, fastest for one
            # row), so a visitor alone decodes as fast as the command line, with generate_all's numbers.
            s = segments[0]
            with edited(model, s.edits):
                if s.encoder_out is not None:
                    logits = model.decode(s.ids, s.encoder_out, None, s.cache, s.recorder, last_only=s.logits != "all")
                else:
                    logits = model(s.ids, s.cache, s.recorder, last_only=s.logits != "all")
            return [None if s.logits == "none" else logits]
        model.prepare_invariant()  # the batch-invariant kernels' weight layouts, once per model
        if segments[0].encoder_out is not None:
            return model.decode_rows(segments)
        return model.forward_rows(segments)


def _entry(t: Ticket) -> Entry:
    """The ticket's share of the coming pass: a prompt chunk (or a first pass) or one decoding token per row."""
    s: Segment = t.waiting
    rows, length = s.ids.shape[0], s.ids.shape[1]
    kind = DECODE if length == 1 and s.start > 0 else PREFILL
    return Entry(t.tag, rows, rows * length, kind, s.logits != "none")


def _weight_bytes(model: torch.nn.Module) -> int:
    """The bytes of a model's weights (parameters and buffers, each storage once): what one pass reads."""
    seen, total = set(), 0
    for tensor in (*model.parameters(), *model.buffers()):
        key = (tensor.device, tensor.data_ptr())
        if key not in seen:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
    return total


PREFIX_SHARE = 8  # the prefix store may take an eighth of what the running requests may take ...
PREFIX_MAX = 256 * 2**20  # ... and at most this


def prefix_store(lm: Any, memory_budget: int | None = None) -> PrefixStore:
    """A prefix store for model `lm`, its budget a share of the running requests' (counted in it too)."""
    limits = lm.limits or Limits.default()
    budget = limits.memory_budget_bytes if memory_budget is None else memory_budget
    return PrefixStore(max(0, min(PREFIX_MAX, admission_budget(lm, budget) // PREFIX_SHARE)))


def run_alone(
    p: Plan, stop: threading.Event | None = None, *, invariant: bool = False, prefix: PrefixStore | None = None,
) -> list[StepEvent]:
    """A plan's events through a scheduler of its own: what that request gives alone (with `invariant`,
    through the batch-invariant kernels: bitwise what it gives beside any others; with `prefix`, reading and
    filling that prefix store)."""
    scheduler = Scheduler(p.lm, invariant_alone=invariant, prefix=prefix)
    ticket = scheduler.submit(p, stop)
    while scheduler.busy():
        scheduler.step()
    return ticket.drain()
