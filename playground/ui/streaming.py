"""Generation in the app: the stream behind the live screen, Stop, branches, and the script API.

The engine runs inside Gradio's worker thread; this generator collects its events and yields a
frame (the live screen's value, see `frames`) at most every FRAME_SECONDS, plus one for the first
token and one at the end. Nothing but that small value travels per frame, so the page keeps up
with the engine. A session runs one generation at a time: a new one stops the previous; Stop
also refuses runs still waiting in the queue (each press of Generate carries a ticket).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.app import serving
from playground.errors import PlaygroundError
from playground.generation import (
    GenerationConfig,
    language_token_id,
    plan,
    token_path,
)
from playground.generation.budget import check_full_attention
from playground.generation.stepper import full_attention
from playground.ui import frames, heap, torch_thread, views
from playground.ui.gradio_state import ScriptSessions
from playground.ui.i18n import t
from playground.ui.limits import CAPS, clamp_settings
from playground.ui.models import Models, one_line, session_key
from playground.ui.runs import LiveView, RunState, Session, Sessions, new_token
from playground.ui.settings import (
    FIELDS,
    UISettings,
    format_branches,
    from_query,
    from_widgets,
    generation_kwargs,
    parse_branches,
)

log = logging.getLogger("playground.ui")

FRAME_SECONDS = 0.08  # at most ~12 frames a second, however fast tokens arrive
MAX_PACE_SECONDS = 30.0  # slow motion never sleeps longer than this in one run (it holds a slot)
MAX_CACHED_MAPS = 2  # whole-run attention maps kept per run (one per layer asked for)
SCRIPT_OWNER = "script-api"  # generate_text callers own no uploads: they reach the shipped checkpoints only


class Streaming:
    """Generation handlers for the sessions of one app."""

    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions
        self.scripts = ScriptSessions(is_page=sessions.has)

    # --- Generate and branches -------------------------------------------------------------------
    # Outputs of both: live screen, notes, seed box, branches (hidden; it goes into links).

    def generate(self, request: gr.Request, ticket: float, *args: Any) -> Iterator[tuple]:
        """Stream a run of the widgets' settings; then the link's branches, if it had any.

        `request` comes first because Gradio injects it by position (it identifies the tab)."""
        values = args[: len(FIELDS)]
        settings = from_widgets(dict(zip(FIELDS, values)))
        session = self.sessions.get(session_key(request))
        session.lang = settings.lang
        if float(ticket or 0) and float(ticket) <= session.stopped_before:
            return  # Stop was pressed while this run waited in the queue
        try:
            branches = parse_branches(settings.branches)
        except ValueError:
            branches = []
        run = None
        for out in self._stream(session, settings, parent=None):
            run = out[-1]
            yield out[:-1]
        for step, ids in branches:  # a link with branches replays them after the run
            if run is None or run.finish_reason in ("stopped", "error") or step >= len(run.path):
                break
            for out in self._stream(session, run.settings, parent=(run, step, ids)):
                run = out[-1]
                yield out[:-1]

    def branch(self, evt: gr.EventData, request: gr.Request | None = None) -> Iterator[tuple]:
        """Continue a finished run from one of its steps with another token (picked or typed)."""
        data = getattr(evt, "_data", None) or {}
        session = self.sessions.get(session_key(request))
        run = next((r for r in session.runs if r.token == data.get("run")), None)
        step = data.get("step")
        if run is None or run.running or not isinstance(step, int) or not 0 <= step < len(run.path):
            return
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        if isinstance(data.get("token_id"), int):
            ids = [int(data["token_id"])]
        else:
            text = str(data.get("text", ""))[: CAPS.prompt_chars]
            try:
                ids = lm.tokenize(text)[:32] if text else []
            except PlaygroundError:
                ids = []
        if not ids:
            return
        for out in self._stream(session, run.settings, parent=(run, step, ids)):
            yield out[:-1]

    def _stream(self, session: Session, settings: UISettings, parent: tuple[RunState, int, list[int]] | None):
        """Yield (live, notes, seed, branches, run) frames for one run (a branch when `parent` is given)."""
        lang = settings.lang
        try:
            run, lm, p = self._start(session, settings, parent)
        except Exception as exc:  # noqa: BLE001 - one message in the live screen, no badges
            yield self._error_frame(session, settings, exc)
            return
        stop = threading.Event()
        if session.stop is not None:
            session.stop.set()  # one generation per session: a new run ends the previous one
        session.stop = stop
        session.selected_step = None
        session.add_run(run)
        meta = self.models.meta(lm, settings.model)
        notes_md = views.notes_markdown(run.notes, lang)
        seed = run.cfg.seed if run.cfg.do_sample else gr.skip()
        branches = format_branches(self._lineage_spec(session, run))
        pace = min(settings.pace_ms / 1000.0, MAX_PACE_SECONDS / max(1, run.cfg.max_new_tokens))
        last_frame = 0.0
        stream = serving.run_events(p, stop, owner=session)  # batched with every other visitor's run
        try:
            for event in stream:
                run.events.append(event)
                self._extend_path(run, lm)
                now = time.monotonic()
                if len(run.events) == 1 or event.finished or now - last_frame >= FRAME_SECONDS or pace:
                    last_frame = now
                    first = len(run.events) == 1
                    yield (self._value(session, run, meta), notes_md if first else gr.skip(),
                           seed if first else gr.skip(), branches if first else gr.skip(), run)
                if pace and not event.finished and stop.wait(pace):
                    pass  # Stop during the pause: the engine ends before its next step
        except Exception as exc:  # noqa: BLE001
            run.error = one_line(exc, lang, "generate")
        finally:
            stream.close()
            if session.stop is stop:
                session.stop = None
            heap.release()
        last = run.events[-1] if run.events else None
        if run.error:
            run.finish_reason = "error"
        elif last is not None and last.finished:
            run.finish_reason = last.finish_reason
        else:
            run.finish_reason = "stopped"
        if run.beam and last is not None and last.finished and last.beams:
            finished = [b for b in last.beams if b.finished]
            run.final = finished[0] if finished else last.beams[0]
            self._extend_path(run, lm, final=True)
        yield self._value(session, run, meta), notes_md, seed, branches, run

    def _start(self, session: Session, settings: UISettings, parent):
        """Everything decided before the first forward pass: the model, ids, clamped settings, plan."""
        lang = settings.lang
        notes: list[str] = []
        lm = self.models.model_for(settings.model, settings.dtype, session.key)
        if parent is None:
            prompt_ids, prompt_notes = prompt_tokens(lm, settings, lang)
            notes += prompt_notes
            inherited: list[list[Any]] = []
            forced: list[int] = []
            branch_of = None
        else:
            base, step, forced = parent
            prompt_ids = list(base.prompt_ids)
            inherited = list(base.inherited) + [[lm.token_text(i), i, 1.0] for i in base.forced] + [
                [s.token_text, s.token_id, s.prob] for s in base.path[:step]]
            branch_of = (base.number, step)
        kwargs = decoding(lm, settings)
        if settings.mode == "sample" and settings.seed is None:
            kwargs["seed"] = secrets.randbelow(2**31)
            notes.append(t("seed_drawn", lang, seed=kwargs["seed"]))
        cfg, clamp_notes = clamp_settings(GenerationConfig(**kwargs), lm, len(prompt_ids) + len(inherited) + len(forced))
        notes += clamp_notes
        view = session.view
        live_layer = frames.resolve_layer(view.layer, lm.config.n_layers)
        # The live panel's layer, and the residual stream the logit lens and the residual norms read.
        cfg = cfg.replace(capture_attention=settings.attention, attention_layers=(live_layer,), capture_residual=True)
        if settings.pace_ms and settings.pace_ms / 1000.0 * cfg.max_new_tokens > MAX_PACE_SECONDS:
            notes.append(t("pace_capped", lang, ms=int(1000 * MAX_PACE_SECONDS / cfg.max_new_tokens)))
        forced_prefix = [int(i) for _, i, _ in inherited] + list(forced)
        p = plan(lm, prompt_ids, cfg, forced_prefix)
        notes += [n for n in p.notes if n not in notes]
        run = RunState(
            token=new_token(), number=session.next_number, owner=session.key, settings=settings, cfg=cfg, kind=lm.kind,
            prompt_ids=list(p.prompt_ids), prompt_texts=lm.token_texts(p.prompt_ids), prefix_ids=list(p.prefix_ids),
            live_layer=live_layer, notes=notes, branch_of=branch_of, inherited=inherited, forced=list(forced),
            forced_texts=lm.token_texts(forced),
            prefix_texts=lm.token_texts(p.prefix_ids[: len(p.prefix_ids) - len(forced_prefix)]),
        )
        session.next_number += 1
        return run, lm, p

    def _error_frame(self, session: Session, settings: UISettings, exc: Exception) -> tuple:
        lang = settings.lang
        message = one_line(exc, lang, "generate")
        value = {"run": None, "lang": lang, "path": [], "status": {"state": "error", "error": message}, "error": message}
        return value, views.notes_markdown([message], lang), gr.skip(), gr.skip(), None

    # --- the displayed sequence ------------------------------------------------------------------

    def _extend_path(self, run: RunState, lm, final: bool = False) -> None:
        """Bring run.path (and its compact copy for the page) up to date with the newest event."""
        stages = frames.stage_names(run.events)
        if not run.beam:
            for event in run.events[len(run.path):]:
                step = token_path(lm, [event], None)[0]
                run.path.append(step)
                run.compact.append(frames.compact_step(step, event.cache, stages))
            return
        last = run.events[-1]
        best = run.final if final else _best_hypothesis(last)
        if best is None:
            return
        path = token_path(lm, run.events, best)
        keep = 0
        while keep < min(len(path), len(run.path)) and (path[keep].token_id, path[keep].source_beam) == (
                run.path[keep].token_id, run.path[keep].source_beam):
            keep += 1
        run.path[keep:] = path[keep:]
        run.compact[keep:] = [frames.compact_step(s, run.events[s.step].cache, stages) for s in path[keep:]]

    def _value(self, session: Session, run: RunState, meta: dict[str, Any]) -> dict[str, Any]:
        value = frames.live_value(run, session.view, meta, session.lang, self._branches(session, run))
        value["inherited"] = run.inherited
        value["forced_tokens"] = [[text, i] for text, i in zip(run.forced_texts, run.forced)]
        if run.kind == "seq2seq":
            start = run.prefix_ids[: len(run.prefix_ids) - len(run.inherited) - len(run.forced)]
            value["decoder_start"] = [[text, i] for text, i in zip(run.prefix_texts, start)]
        return value

    def _lineage_spec(self, session: Session, run: RunState) -> list[tuple[int, list[int]]]:
        """The chain of branches that leads to `run` (what a link must replay), oldest first."""
        chain = []
        while run is not None and run.branch_of is not None:
            parent_number, step = run.branch_of
            chain.append((step, list(run.forced)))
            run = session.run(parent_number)
        return list(reversed(chain))

    def _branches(self, session: Session, run: RunState) -> list[dict[str, Any]]:
        """The session's runs of the same prompt, each split where it leaves the current run."""
        family = [r for r in session.runs if r.prompt_ids == run.prompt_ids and r.settings.model == run.settings.model]
        if len(family) < 2:
            return []
        here = run.stream_ids
        out = []
        for r in family:
            texts = [x[0] for x in r.inherited] + r.forced_texts + [s.token_text for s in r.path]
            ids = r.stream_ids
            common = 0
            while common < min(len(ids), len(here)) and ids[common] == here[common]:
                common += 1
            if r is run and run.branch_of is not None:
                common = len(r.inherited)
            out.append({
                "number": r.number, "parent": r.branch_of[0] if r.branch_of else None,
                "step": r.branch_of[1] if r.branch_of else None, "current": r is run,
                "shared": "".join(texts[:common]), "diverges": "".join(texts[common:common + 1]),
                "rest": "".join(texts[common + 1:]),
            })
        return out

    def current_value(self, lang: str, request: gr.Request | None = None) -> dict[str, Any]:
        """The live screen's value for the session's current run (in `lang`), or an empty screen."""
        session = self.sessions.get(session_key(request))
        session.lang = lang
        run = session.current
        if run is None:
            return {"run": None, "lang": lang, "path": [], "status": {}}
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        return self._value(session, run, self.models.meta(lm, run.settings.model))

    # --- Stop ------------------------------------------------------------------------------------

    def stop(self, ticket: float, request: gr.Request | None = None) -> None:
        """End the running generation at its next step; runs queued before this press never start."""
        session = self.sessions.get(session_key(request))
        session.stopped_before = max(session.stopped_before, float(ticket or 0) or time.time() * 1000)
        if session.stop is not None:
            session.stop.set()

    # --- what the live screen's script asks for ---------------------------------------------------

    def attention_row(self, args: list[Any]) -> dict[str, Any]:
        """[run token, step, kind, layer, head] -> {"row": [...]}: one step's attention for a view, from
        what the run recorded, or recomputed once for the whole run through the engine."""
        try:
            token, step, kind, layer, head = args
            step, layer = int(step), int(layer)
        except (TypeError, ValueError):
            return {"row": None}
        run = self.sessions.run_by_token(token)
        if run is None or not 0 <= step < len(run.path) or kind not in ("self", "cross"):
            return {"row": None}
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        c = lm.config
        if not 0 <= layer < c.n_layers or head not in frames.head_choices(c.n_heads, c.n_kv_heads):
            return {"row": None}
        if kind == "cross" and run.kind != "seq2seq":
            return {"row": None}
        rows = frames.recorded_row(run.path[step], kind, layer)
        if rows is None:
            try:
                rows = self._row_from_maps(run, lm, kind, layer, step)
            except PlaygroundError as exc:  # over the memory budget: say so where the row would be
                return {"row": None, "error": one_line(exc)}
        return {"row": frames.rounded(frames.reduce_heads(rows, head, c.n_kv_heads)), "step": step}

    @torch_thread.runs_on_torch_thread
    def _row_from_maps(self, run: RunState, lm, kind: str, layer: int, step: int):
        maps = run.maps.get((kind, layer))
        stream = run.stream_ids
        query = len(run.prefix_ids) - 1 + step
        if maps is None:
            upto = stream if not run.running else stream[: len(run.inherited) + len(run.forced) + step]
            check_full_attention(lm, len(run.prompt_ids), len(upto), [layer])
            computed = full_attention(lm, run.prompt_ids, upto, layers=[layer])
            maps = computed[kind][0]  # (h, T, S)
            if not run.running:
                if len(run.maps) >= MAX_CACHED_MAPS:
                    run.maps.pop(next(iter(run.maps)))
                run.maps[(kind, layer)] = maps
        keys = query + 1 if kind == "self" else maps.shape[-1]
        return maps[:, query, :keys]

    def select_step(self, args: list[Any]) -> dict[str, Any]:
        """[run token, step]: the step the visitor is looking at (the deep views draw it)."""
        try:
            token, step = args
            step = int(step)
        except (TypeError, ValueError):
            return {}
        run = self.sessions.run_by_token(token)
        for session in self._sessions_of(token):
            if session.current is run and 0 <= step < len(run.path):
                session.selected_step = step
        return {}

    def set_view(self, args: list[Any]) -> dict[str, Any]:
        """[run token, kind, layer, head]: what the live attention panel shows (and records next run)."""
        try:
            token, kind, layer, head = args
            layer = int(layer)
        except (TypeError, ValueError):
            return {}
        for session in self._sessions_of(token):
            session.view = LiveView(kind=str(kind), layer=layer, head=str(head))
        return {}

    def _sessions_of(self, token: str) -> list[Session]:
        run = self.sessions.run_by_token(token)
        if run is None:
            return []
        return [s for s in self.sessions.all() if run in s.runs]

    # --- for scripts (gradio_client) -------------------------------------------------------------

    def generate_text(self, model: str, prompt: str, settings_query: str = "", request: gr.Request = None) -> dict:
        """Generate without streaming: `model` and `prompt`, the other settings as a link's query string
        (e.g. "mode=sample&temperature=0.8&seed=1"). Returns text, token_ids, finish_reason, notes."""
        try:
            return self._generate_text(model, prompt, settings_query)
        finally:
            if request is not None:  # a script's session: Gradio's copy of the page for it goes soon after
                self.scripts.end(session_key(request))
            heap.release()

    def _generate_text(self, model: str, prompt: str, settings_query: str) -> dict:
        from urllib.parse import parse_qsl

        params = dict(parse_qsl(str(settings_query).lstrip("?"), keep_blank_values=True))
        params.update(model=model, prompt=prompt)
        settings, notes = from_query(params, UISettings())
        try:
            lm = self.models.model_for(settings.model, settings.dtype, SCRIPT_OWNER)
            prompt_ids, prompt_notes = prompt_tokens(lm, settings, "en")
            notes += prompt_notes
            cfg, clamp_notes = clamp_settings(GenerationConfig(**decoding(lm, settings)), lm, len(prompt_ids))
            # in the shared batch beside the page's runs, read to the end as generate_all reads the engine's stream
            events = list(serving.run_events(plan(lm, prompt_ids, cfg.replace(top_candidates=0)), threading.Event()))
        except PlaygroundError as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        last = events[-1] if events else None
        return {"text": last.text if last else "", "token_ids": [int(i) for i in last.token_ids] if last else [],
                "finish_reason": last.finish_reason if last is not None and last.finished else "stopped",
                "notes": notes + clamp_notes}


def decoding(lm, settings: UISettings) -> dict[str, Any]:
    """GenerationConfig keywords for the settings: the mode's knobs and the target language's token."""
    kwargs = generation_kwargs(settings)
    if settings.target_lang:
        kwargs["forced_bos_token_id"] = language_token_id(lm.tokenizer, settings.target_lang)
    return kwargs


def prompt_tokens(lm, settings: UISettings, lang: str) -> tuple[list[int], list[str]]:
    """The prompt's token ids under the app's caps, in characters then in tokens, with a note for each cut.

    The page and `generate_text` share it, so both refuse and cut the same way."""
    notes: list[str] = []
    text = settings.prompt
    if not text.strip():
        raise PlaygroundError(t("empty_prompt", lang).rstrip("."))
    if len(text) > CAPS.prompt_chars:
        text = text[: CAPS.prompt_chars]
        notes.append(t("prompt_cut", lang, n=CAPS.prompt_chars))
    chat = settings.chat and lm.chat_template_available
    if settings.chat and not chat:
        notes.append(t("chat_unavailable", lang))
    ids = lm.tokenize(text, chat=chat)
    if len(ids) > CAPS.prompt_tokens:
        notes.append(t("prompt_tokens_cut", lang, n=len(ids), dropped=len(ids) - CAPS.prompt_tokens,
                       cap=CAPS.prompt_tokens))
        ids = ids[-CAPS.prompt_tokens:]
    return ids, notes


def _best_hypothesis(event):
    """The hypothesis an event describes (its token_ids), with its beam path."""
    for b in event.beams or []:
        if b.token_ids == event.token_ids:
            return b
    return None
