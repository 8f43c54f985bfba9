"""One press, from settings to frames: the page's Generate, a link's runs, a branch and `/generate_text` alike.

    for frame in play(session, lookup, settings):        # the page: frames at the live screen's pace
        frame.run, frame.notes, frame.waiting, frame.error
    play_script(lookup, model, prompt, query, owner)      # the script API: the same run, read to its end

A press passes through the settings once (`start_run`): the prompt under the app's caps, the knobs moved into
the range the app and the model accept with a keyed note per change (`limits.lenient`, which also fits the
prompt and the new tokens to the context, once), then one plan (`generation.plan.assemble`, which checks
nothing of that again) and one `Run`. The notes a frame carries are the session's link notes (kept until the
visitor's next action) then the run's own, so a link's notes never vanish under a run's. No Gradio here.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from playground.app import experiments, frames, heap, serving, visitors, zerogpu
from playground.app.engine_stream import run_events
from playground.app.experiments.base import Action, Experiment, ForkRequest
from playground.app.limits import CAPS, lenient
from playground.app.notes import error_line, note, render_all
from playground.app.run import Run
from playground.app.session import Session, new_token
from playground.app.settings import UISettings, changed, from_query, generation_kwargs, parse_branches, plain
from playground.errors import PlaygroundError
from playground.generation import GenerationConfig, StepEvent, language_token_id
from playground.generation.batch import CaughtUp
from playground.generation.plan import Plan, assemble
from playground.generation.speculative import summary as speculation_summary
from playground.generation.stepper import stepper_class
from playground.notes import Note

MAX_PACE_SECONDS = 30.0  # slow motion never sleeps longer than this in one run (it holds a slot)
# The memory budgets are kept again each time a run has recorded this much more (a long run on a small model records
# ~80 KB a token): between two checks 30 running runs may pass a budget by at most 30 x this.
BUDGET_CHECK_BYTES = 2 * 1024**2
Lookup = Callable[[str, str, str], Any]  # (catalog name, dtype, owner) -> the loaded model
Parent = tuple[Run, int, list[int]]  # (run, step, token ids): continue `run` from `step` with these tokens


@dataclass(frozen=True)
class Origin:
    """Where a fork comes from: the run it forks, the experiment that makes it (its name; a link's replay names each
    experiment it asks for, joined by "+") and what the experiment measured on the way (kept on the new run)."""

    run: Run
    experiment: str
    results: dict[str, Any] = field(default_factory=dict)


@dataclass
class Frame:
    """What the page shows at one moment of a press."""

    run: Run | None  # None: the run could not start (`error` says why)
    notes: list[str]  # the notes box: the link's notes, then the run's (keyed notes, rendered at the edge)
    waiting: serving.Waiting | None = None  # no place in the batch yet: where in line
    error: str | None = None  # one line in the visitor's language, when the run could not start
    branches: list[tuple[int, list[int]]] = field(default_factory=list)  # the run's lineage (what its link replays)


# --- one pass over the settings -------------------------------------------------------------------


def decoding(lm: Any, settings: UISettings) -> dict[str, Any]:
    """GenerationConfig keywords for the settings: the mode's knobs and the target language's token."""
    kwargs = generation_kwargs(settings)
    if settings.target_lang:
        kwargs["forced_bos_token_id"] = language_token_id(lm.tokenizer, settings.target_lang)
    return kwargs


def prompt_tokens(lm: Any, settings: UISettings) -> tuple[list[int], list[Note]]:
    """The prompt's token ids under the app's caps, in characters then in tokens, with a note for each cut."""
    notes: list[Note] = []
    text = settings.prompt
    if not text.strip():
        raise PlaygroundError(note("empty_prompt"))
    if len(text) > CAPS.prompt_chars:
        text = text[: CAPS.prompt_chars]
        notes.append(note("prompt_cut", n=CAPS.prompt_chars))
    chat = settings.chat and lm.chat_template_available
    if settings.chat and not chat:
        notes.append(note("chat_unavailable"))
    ids = lm.tokenize(text, chat=chat)
    if len(ids) > CAPS.prompt_tokens:
        notes.append(note("prompt_tokens_cut", n=len(ids), dropped=len(ids) - CAPS.prompt_tokens, cap=CAPS.prompt_tokens))
        ids = ids[-CAPS.prompt_tokens:]
    return ids, notes


def link_defaults(settings: UISettings, named: Any, lm: Any) -> UISettings:
    """The settings of a link (or a script's query) for `lm`: a query that does not name `chat` gets the
    model's default, on for a model with a chat template (as the page's first load sets its box)."""
    if "chat" in named:
        return settings
    return dataclasses.replace(settings, chat=bool(lm.chat_template_available))


def start_run(session: Session, lm: Any, settings: UISettings, parent: Parent | None = None, *,
              origin: Origin | None = None, captures: bool = True, draft_lm: Any = None) -> tuple[Run, Plan]:
    """A new run of `session` (numbered, not yet added) and the engine's plan for it: the one validation pass.

    parent: (run, step, token ids): continue `run` from `step` with these tokens instead of its own.
    origin: the run an experiment forks (the new run records it, and what it changed).
    An empty seed in sampling draws one here (the run keeps it, so its link reproduces it).
    captures=False (the script API): no attention, residual or candidates recorded; the same tokens."""
    notes: list[Note] = []
    if parent is None:
        prompt_ids, notes = prompt_tokens(lm, settings)
        inherited: list[list[Any]] = []
        forced: list[int] = []
        branch_of = None
    else:
        base, step, forced = parent
        if settings.mode == "sample" and settings.seed is None:  # a branch samples with its run's seed, so
            settings = dataclasses.replace(settings, seed=base.cfg.seed)  # a link replays it exactly
        prompt_ids = list(base.prompt_ids)
        inherited = list(base.inherited) + [[lm.token_text(i), i, 1.0] for i in base.forced] + [
            [s.token_text, s.token_id, s.prob] for s in base.path[:step]]
        branch_of = (base.number, step)
    kwargs = decoding(lm, settings)
    if draft_lm is not None:  # a second model drafts (found by name in `play`)
        kwargs.update(draft=draft_lm, draft_tokens=settings.draft_tokens)
    if settings.mode == "sample" and settings.seed is None:
        kwargs["seed"] = secrets.randbelow(2**31)
        notes.append(note("seed_drawn", seed=kwargs["seed"]))
    forced_prefix = [int(i) for _, i, _ in inherited] + list(forced)
    done = lenient(GenerationConfig(**kwargs), lm, len(prompt_ids), forced_tokens=len(forced_prefix))
    if not prompt_ids:  # a prompt of no tokens starts from the model's start token (the lenient pass said so)
        prompt_ids = stepper_class(lm.kind).empty_prompt(lm.config)
    notes += done.notes
    view = session.view.fitted(lm.config, lm.kind)  # the live panel's choice, for this run's model
    if view.head != session.view.head:
        notes.append(note("live_head_reset", head=session.view.head))
    if view.layer != session.view.layer:
        notes.append(note("live_layer_reset", layer=session.view.layer))
    session.view = view
    live_layer = frames.resolve_layer(view.layer, lm.config.n_layers)
    # The live panel's layer, and the residual stream the logit lens and the residual norms read.
    cfg = done.cfg.replace(capture_attention=settings.attention, attention_layers=(live_layer,), capture_residual=True)
    if cfg.draft is not None and cfg.num_beams == 1:  # a verify pass checks several tokens at once: nothing recorded
        cfg = cfg.replace(capture_attention=False, attention_layers=None, capture_residual=False)
        notes.append(note("draft_no_captures"))
    if not captures:
        cfg = cfg.replace(capture_attention=False, attention_layers=None, capture_residual=False, top_candidates=0)
    if settings.pace_ms and settings.pace_ms / 1000.0 * cfg.max_new_tokens > MAX_PACE_SECONDS:
        notes.append(note("pace_capped", ms=int(1000 * MAX_PACE_SECONDS / cfg.max_new_tokens)))
    # a precision copy is built as a job, slice by slice on the torch thread (never on this worker)
    p = assemble(lm, prompt_ids, cfg, forced_prefix, done.fit, notes,
                 build=lambda steps: serving.call_sliced(steps, owner=session.key))
    run = Run(
        token=new_token(), number=session.next_number, owner=session.key, settings=settings, cfg=cfg, kind=lm.kind,
        prompt_ids=list(p.prompt_ids), prompt_texts=lm.token_texts(p.prompt_ids), prefix_ids=list(p.prefix_ids),
        live_layer=live_layer, notes=list(p.notes), branch_of=branch_of, inherited=inherited, forced=list(forced),
        forced_texts=lm.token_texts(forced),
        prefix_texts=lm.token_texts(p.prefix_ids[: len(p.prefix_ids) - len(forced_prefix)]),
    )
    session.next_number += 1
    _record_origin(run, parent, origin)
    return run, p


def _record_origin(run: Run, parent: Parent | None, origin: Origin | None) -> None:
    """Where `run` came from, set once here: a branch's parent, or the run an experiment forked."""
    if parent is not None:
        run.origin, run.experiment = parent[0].number, "branch"
        run.about = [note("history_branch", step=run.step_number(-len(run.forced)))]
    elif origin is not None:
        before = origin.run.settings
        run.origin, run.experiment = origin.run.number, origin.experiment
        run.changes = changed(run.settings, before)
        had = experiments.badge_of(origin.run)
        run.about = [words for words in experiments.badge_of(run) if words not in had]  # what it changed, as run
        run.results.update(origin.results)


def draft_model(session: Session, lookup: Lookup, settings: UISettings) -> tuple[Any, Note | None]:
    """The loaded model a "model:<name>" draft names (the visitor's catalog decides, as for the run's own model),
    and None; (None, None) for other drafts; (None, a note) when it cannot be loaded (the run then decodes
    without a draft)."""
    if not settings.draft.startswith("model:"):
        return None, None
    name = settings.draft[len("model:"):]
    try:
        return lookup(name, settings.dtype, session.key), None
    except Exception:  # noqa: BLE001 - whatever the name, the run goes on without a draft
        return None, note("draft_model_missing", name=name)


def fork_of(session: Session, run: Run, lm: Any, experiment: Experiment, action: Action,
            values: Mapping[str, Any], keep: bool = False) -> tuple[UISettings, Origin]:
    """The settings and the origin of `action`'s fork of `run` (an experiment's button pressed with the widgets'
    `values`). By default a lab forks the plain run (`fork_base`: what the other labs changed stays out, so going
    through the labs in order never stacks their changes); `keep` forks `run` as it is, with every change it has.
    The run's own settings (its seed, no branches) with what the experiment changes. Some forks measure first (a
    steering vector): call it on the torch thread. Raises PlaygroundError (a keyed note) for a refusal."""
    source, base = (run, session.run_settings(run)) if keep else fork_base(session, run, experiment)
    base = dataclasses.replace(base, branches="")
    forked = action.run(ForkRequest(run=source, settings=base, lm=lm, values=dict(values)))
    return dataclasses.replace(base, **forked.changes), Origin(source, experiment.name, forked.results)


def fork_base(session: Session, run: Run, experiment: Experiment) -> tuple[Run, UISettings]:
    """The run `experiment`'s fork of `run` starts from, and its settings: the nearest of `run`'s origins (itself
    first) that no other experiment changed; when that one has left the history, `run` with the other experiments'
    settings at their defaults."""
    seen: set[int] = set()
    r: Run | None = run
    while r is not None and r.number not in seen:
        if not experiments.others(r.settings, experiment):
            return r, session.run_settings(r)
        seen.add(r.number)
        r = session.run(r.origin) if r.origin is not None else None
    reset = {f.name: f.default for e in experiments.others(run.settings, experiment) for f in e.fields}
    return run, dataclasses.replace(session.run_settings(run), **reset)


# --- a press, frame by frame ----------------------------------------------------------------------


def play(session: Session, lookup: Lookup, settings: UISettings, parent: Parent | None = None, *,
         origin: Origin | None = None, captures: bool = True, pace: bool = True,
         keep_within_budget: Callable[[], Any] | None = None) -> Iterator[Frame]:
    """Frames of one run of `settings` in `session` (a branch when `parent` is given, an experiment's fork when
    `origin` is): the first at once (the run has started), then at the live screen's pace, the last when the run
    has ended (or failed). `keep_within_budget` (`Sessions.enforce_memory`) is called each time the run has
    recorded `BUDGET_CHECK_BYTES` more, and when it ends."""
    stops = session.stops  # a Stop pressed while this press starts (a model loading under load) ends it too
    try:  # the model is resolved here, never on the torch thread
        lm = lookup(settings.model, settings.dtype, session.key)
        drafter, missing = draft_model(session, lookup, settings)
        run, p = start_run(session, lm, settings, parent, origin=origin, captures=captures, draft_lm=drafter)
        if missing is not None:
            run.notes.insert(0, missing)
    except Exception as exc:  # noqa: BLE001 - one line in the live screen, no badges
        message = error_line(exc, settings.lang, "generate")
        yield Frame(None, session.link_notes + [message], error=message)
        return
    yield from _stream(session, lm, run, p, settings, pace=pace, keep_within_budget=keep_within_budget,
                       stops=stops)


def _stream(session: Session, lm: Any, run: Run, p: Plan, settings: UISettings, *, pace: bool,
            keep_within_budget: Callable[[], Any] | None, stops: int, visitor: str | None = None,
            ) -> Iterator[Frame]:
    stop = threading.Event()
    if session.stop is not None:
        session.stop.set()  # one generation per session: a new run ends the previous one
    session.stop = stop
    if session.stops != stops:  # Stop was pressed after this press began and before its flag was there
        stop.set()
    session.add_run(run)
    lineage = session.lineage(run)

    def frame(waiting: serving.Waiting | None = None) -> Frame:
        return Frame(run, session.link_notes + run.notes, waiting, branches=lineage)

    pause = min(settings.pace_ms / 1000.0, MAX_PACE_SECONDS / max(1, run.cfg.max_new_tokens)) if pace else 0.0
    pacing = _Pacing(run, pause)
    error = None
    checked = 0  # the run's recorded bytes when the budgets were last kept
    # batched with every other visitor's run; the run's token labels it in the batch's step history
    # (one running generation per visitor: the tab, or a script's client; app.visitors)
    stream = run_events(p, stop, owner=visitor or visitors.page(session.key), report_waiting=True, tag=run.token,
                        due=None if pause else pacing.due)
    try:
        yield frame()  # at once: the new run, started (the old run's "Done" stayed up until the first token)
        for event in stream:
            if isinstance(event, serving.Waiting):
                yield frame(event)
                continue
            if isinstance(event, zerogpu.Notice):  # ZeroGPU: the GPU refused (the run goes on on the CPU), or its time
                run.notes.append(note(event.key, **event.values))
                continue
            if not isinstance(event, CaughtUp):
                run.add_event(event, lm)
                if keep_within_budget is not None and run.recorded_bytes() >= checked + BUDGET_CHECK_BYTES:
                    keep_within_budget()  # while it runs: 30 long runs recording at once would pass the budgets
                    checked = run.recorded_bytes()
            if pacing.draws(event):
                yield frame()
            if pause and not isinstance(event, CaughtUp) and not event.finished:
                stop.wait(pause)  # Stop during the pause: the stream ends before the engine's next step
    except Exception as exc:  # noqa: BLE001
        error = error_line(exc, settings.lang, "generate")
    finally:
        stream.close()
        if session.stop is stop:
            session.stop = None
        heap.release()
    if stop.is_set() and error is None and not run.beam:
        seen = session.stop_seen  # what the page showed when Stop was pressed, when its script said (stop_at)
        _end_where_shown(run, min(pacing.shown, seen[1]) if seen and seen[0] == run.token else pacing.shown)
    run.finish(lm, error)
    if keep_within_budget is not None:
        keep_within_budget()
    yield frame()


class _Pacing:
    """When a run's page gets a frame: its first event and its last at once, then one frame per
    `frames.frame_seconds`. A paced stream (`due`) wakes the reader once a frame and says when it has caught up; slow
    motion (`pause`) reads every event, and draws the frame that is due among them (a pause shorter than a frame
    shows a few tokens a frame)."""

    def __init__(self, run: Run, pause: float) -> None:
        self.run, self.pause = run, pause
        self.last = 0.0  # when the last frame was drawn (time.monotonic)
        self.shown = 0  # the tokens of the frames drawn so far: what the page shows
        self.unshown = False  # events taken since the last frame

    def due(self) -> float:
        """The next frame's time (the stream does not wake the reader for each step before it)."""
        return self.last + frames.frame_seconds(serving.active_requests())

    def draws(self, event: StepEvent | CaughtUp) -> bool:
        """Whether a frame is drawn after `event` (taken into the run) or after the stream caught up."""
        if isinstance(event, CaughtUp):
            draw = self.unshown and time.monotonic() >= self.due()
        else:
            self.unshown = True
            draw = len(self.run.events) == 1 or event.finished or (bool(self.pause) and time.monotonic() >= self.due())
        if draw:
            self.last, self.shown, self.unshown = time.monotonic(), len(self.run.path), False
        return draw


def _end_where_shown(run: Run, shown: int) -> None:
    """A stopped run ends at the tokens its page showed when Stop was pressed (or, when the page did not say, at
    the last frame sent). The engine runs a frame and more ahead of the page (~80 ms and the frame's way: dozens
    of tokens of a tiny model), and those tokens were never on screen when Stop was pressed: kept, they would
    appear after the press. One event and one path entry per token outside beam search."""
    run.cut_to(shown)


def play_link(session: Session, lookup: Lookup, settings: UISettings, **kw: Any) -> Iterator[Frame]:
    """A link's runs: the plain run; then, when the link asks for experiments (an edit, a cache policy, another
    precision, a drafter), the run with them, forked from the plain one beside it; then the link's branches in order
    (each from the run before it). A branch list that does not parse was already a note of the page load; it is left
    out here."""
    try:
        branches = parse_branches(settings.branches)
    except ValueError:
        branches = []
    base = plain(settings)
    run = None
    for out in play(session, lookup, base, **kw):
        run = out.run
        yield out
    if base != settings:
        if run is None or run.finish_reason in ("stopped", "error"):
            return
        forked = Origin(run, "+".join(e.name for e in experiments.active(settings)))
        for out in play(session, lookup, settings, origin=forked, **kw):
            run = out.run
            yield out
    for step, ids in branches:
        if run is None or run.finish_reason in ("stopped", "error") or step >= len(run.path):
            return
        for out in play(session, lookup, run.settings, parent=(run, step, ids), **kw):
            run = out.run
            yield out


# --- the script API -------------------------------------------------------------------------------


def play_script(lookup: Lookup, model: str, prompt: str, query: str, owner: str, visitor: str | None = None,
                ) -> dict[str, Any]:
    """`/generate_text`: the page's press for a link's query (its chat default, caps, clamps, a drawn seed), in a
    session of its own, read to the end. Returns text, token_ids, finish_reason, the notes in the query's
    language and, for a drafted run, what speculation did (drafter, proposed, accepted, target passes); None
    otherwise. `visitor`: the caller (`app.visitors.client`: its address), who runs one generation at a time.
    Raises PlaygroundError (its first argument keyed when it can be) when the run cannot start."""
    params: Mapping[str, str] = dict(parse_qsl(str(query).lstrip("?"), keep_blank_values=True))
    params = {**params, "model": model, "prompt": ""}
    settings, link_notes = from_query(params, UISettings())
    settings = dataclasses.replace(settings, prompt=str(prompt))  # cut as the page's prompt box is (start_run)
    session = Session(key=owner, lang=settings.lang)
    session.link_notes = list(link_notes)
    lm = lookup(settings.model, settings.dtype, owner)
    drafter, missing = draft_model(session, lookup, settings)  # a "model:<name>" draft, as the page finds it
    run, p = start_run(session, lm, link_defaults(settings, params, lm), captures=False, draft_lm=drafter)
    if missing is not None:
        run.notes.insert(0, missing)
    for _ in _stream(session, lm, run, p, run.settings, pace=False, keep_within_budget=None, stops=session.stops,
                     visitor=visitor):
        pass
    if run.finish_reason == "error":
        raise PlaygroundError(run.error)
    last = run.events[-1] if run.events else None
    # the GPU time a run used is a line for the page: a script's result is the same wherever the run was computed
    notes = [n for n in run.notes if getattr(n, "key", None) != "zerogpu_used"]
    return {"text": last.text if last else "", "token_ids": [int(i) for i in last.token_ids] if last else [],
            "finish_reason": run.finish_reason,
            "notes": render_all(session.link_notes + notes, settings.lang),
            "speculation": speculation_summary(run.events, run.cfg), "usage": usage(p, last),
            "decoding": p.decoding}


def usage(p: Plan, last: Any) -> dict[str, int]:
    """OpenAI-style token counts of a finished run: the prompt's tokens, those of them whose keys and values came
    from the server's prefix cache (not computed by this run), and the tokens generated."""
    cached = int(last.cache.get("reused_tokens", 0)) if last is not None else 0
    # a branch's forced tokens follow the prompt in its decoder stream and may be restored with it: not prompt tokens
    cached = min(cached, len(p.prompt_ids))
    return {"prompt_tokens": len(p.prompt_ids), "cached_tokens": cached,
            "completion_tokens": len(last.token_ids) if last is not None else 0}
