"""The cache-reuse lab: reuse keys and values instead of computing them, on the run on screen.

* Prefix reuse: a second prompt that keeps the run's beginning and changes its last line (or sentence) is prefilled twice, whole
  and with the run's cached K/V for the shared positions: the positions reused, the time saved, the same tokens.
* CacheBlend: the prompt split into chunks (paragraphs, or every N tokens), each chunk's K/V computed alone and its
  keys rotated to where the chunk sits; what is lost (each layer's K/V deviation, the answer's KL and top-1
  agreement with the full prefill), and r % of the positions recomputed (those whose K/V deviate most at layer 1),
  r from 0 (naive reuse) to 100 (the full prefill, bitwise). The maths: `playground.models.cache_blend`; the measures:
  `playground.analysis.cache_blend`.
* Two forks: the run again with the second prompt, as a branch beside it (the prefix cache of the server reuses the
  shared blocks); and the run again decoding from its prompt's CacheBlend cache at the chosen chunks and r (the
  run setting `cache_blend`, which a link replays), compared with the run it came from.

A model without RoPE gets a line saying why its cached keys cannot be moved."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from playground.analysis import cache_blend as cb
from playground.app.experiments.base import (
    Action,
    Experiment,
    Fork,
    ForkError,
    ForkRequest,
    JobRequest,
    Out,
    Row,
    Widget,
    Words,
    compared_with,
)
from playground.app.fields import Field
from playground.app.jobs import Progress
from playground.app.notes import note, render
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t
from playground.models import cache_blend as blending
from playground.notes import Note
from playground.viz import reuse as figures

RS = (0, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100)
STEPS = 8  # the answer's tokens along which KL and top-1 agreement are measured (teacher-forced)
MAX_TOKENS = 512  # a longer prompt is refused in one line (each r is a pass over it)
# a fork's second prompt: the tokens it shares with the run it forked from (its badge; it changes nothing else)
SHARED = Field("reuse_shared", "whole", 0, 0, 1_000_000, widget=False)


def _check_blend(text: str) -> None:
    """A link's `cache_blend` ("paragraphs@15", "tokens:16@40"; empty: off), refused in one line otherwise."""
    if text:
        try:
            blending.parse_blend(text)
        except ValueError:
            raise ValueError(note("reuse_blend_bad", value=repr(text))) from None


# the run's prompt cache from CacheBlend at these chunks and r (empty: the plain prefill)
BLEND = Field("cache_blend", "text", "", check=_check_blend, widget=False)


def chunk_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("reuse_chunks_paragraphs", lang), "paragraphs"), (t("reuse_chunks_n", lang, n=16), "tokens:16"),
            (t("reuse_chunks_n", lang, n=32), "tokens:32")]


def _check(lm: Any, run: Any, moves: bool = True) -> None:
    """Refuse a model whose cached keys cannot be moved (CacheBlend), or (prefix reuse, `moves` False) whose cache
    cannot be reused at all: an encoder-decoder, or sliding-window layers that keep only their last positions."""
    why = blending.why_not_movable(lm)
    if why is not None and (moves or why in ("seq2seq", "window")):
        raise ForkError(note("reuse_cannot", why=note(f"reuse_why_{why}")))
    if len(run.prompt_ids) > MAX_TOKENS:
        raise ForkError(note("reuse_too_long", n=len(run.prompt_ids), most=MAX_TOKENS))


def shared_length(a: list[int], b: list[int]) -> int:
    """How many first ids two sequences share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def second_prompt(prompt: str, ending: str) -> str:
    """The run's prompt up to its last line break (else its last sentence), then `ending`."""
    body = prompt.rstrip()
    cut = body.rfind("\n")
    if cut >= 0:
        return body[:cut + 1] + ending
    cut = max(body.rfind(mark) for mark in (". ", "? ", "! ", "。", "？", "！"))
    return body[:cut + 1].rstrip() + " " + ending if cut >= 0 else body + " " + ending


def measure_blend(req: JobRequest) -> Iterator[Progress | dict[str, Any]]:
    """CacheBlend on the run's prompt: one pass per r (progress after each), then the measure."""
    lm, run = req.lm, req.run
    _check(lm, run)
    ids = list(run.prompt_ids)
    if len(ids) < 3:
        raise ForkError(note("reuse_too_short"))
    mode = str(req.values.get("reuse_chunks") or "paragraphs")
    starts = blending.chunk_starts(lm.token_texts(ids), mode if mode.startswith("tokens:") else "paragraphs")
    work = cb.blend_sweep(lm.model, ids, starts, RS, steps=STEPS)
    done = 0
    while True:
        try:
            next(work)
        except StopIteration as end:
            yield {**end.value, "mode": mode, "number": run.number}
            return
        done += 1
        yield Progress("r", done, len(RS))


def measure_prefix(req: JobRequest) -> Iterator[Progress | dict[str, Any]]:
    """Prefix reuse of the second prompt: one job of two prefills and their answers."""
    lm, run = req.lm, req.run
    _check(lm, run, moves=False)
    ending = str(req.values.get("reuse_ending") or "").strip()
    if not ending:
        raise ForkError(note("reuse_choose"))
    second = lm.tokenize(second_prompt(run.settings.prompt, ending), chat=run.settings.chat)
    yield Progress("prefill", 0, 1)
    out = cb.prefix_reuse(lm.model, list(run.prompt_ids), second, steps=STEPS)
    yield {**out, "number": run.number, "answer_text": "".join(lm.token_texts(out["answer"]))}


def fork(req: ForkRequest) -> Fork:
    """The run again with the second prompt (`second_prompt`), beside it; the server's prefix cache reuses the blocks
    they share."""
    ending = str(req.values.get("reuse_ending") or "").strip()
    if not ending:
        raise ForkError(note("reuse_choose"))
    text = second_prompt(req.settings.prompt, ending)
    ids, first = req.lm.tokenize(text, chat=req.settings.chat), list(req.run.prompt_ids)
    shared = shared_length(ids, first)
    return Fork({"prompt": text, "reuse_shared": max(1, min(shared, SHARED.high))})


def fork_blend(req: ForkRequest) -> Fork:
    """The run again, its prompt's keys and values (but the last token's) from CacheBlend at the chosen chunks and
    r: the cache a CacheBlend engine would decode from."""
    _check(req.lm, req.run)
    if len(req.run.prompt_ids) < 3:
        raise ForkError(note("reuse_too_short"))
    mode = str(req.values.get("reuse_chunks") or "paragraphs")
    mode = mode if mode in {value for _, value in chunk_choices("en")} else "paragraphs"
    r = int(min(100, max(0, round(float(req.values.get("reuse_r") or 0)))))
    return Fork({"cache_blend": f"{mode}@{r}"})


def config(settings: Any) -> dict[str, Any]:
    """GenerationConfig's cache_blend (none for the plain prefill)."""
    return {"cache_blend": settings.cache_blend} if settings.cache_blend else {}


def lenient(c: Any, lm: Any, notes: list[Note]) -> None:
    """A blend this model or this run cannot take is dropped with a note: the run prefills its prompt whole."""
    if c.cache_blend in (None, ""):  # off
        c.cache_blend = None
        return
    try:
        blending.parse_blend(c.cache_blend)
    except ValueError:
        notes.append(note("reuse_blend_bad", value=repr(c.cache_blend)))
        c.cache_blend = None
        return
    why = blending.why_not_movable(lm)
    if why is not None:
        notes.append(note("reuse_blend_dropped", why=note(f"reuse_why_{why}")))
    elif c.kv_policy or c.draft is not None or c.interventions or not c.use_cache:
        notes.append(note("reuse_blend_dropped", why=note("reuse_blend_alone")))
    else:
        return
    c.cache_blend = None


def blend_words(setting: str) -> Note:
    """A cache_blend setting in words: its chunks and r."""
    mode, r = blending.parse_blend(setting)
    chunks = note("reuse_chunks_paragraphs") if mode == "paragraphs" else note("reuse_chunks_n", n=int(mode[7:]))
    return note("reuse_blend_badge", chunks=chunks, r=r)


def badge(settings: Any) -> list[Note]:
    """A second prompt forked here: how many of its first tokens it shares with the run it came from; a blended
    prompt cache: its chunks and r."""
    out = [note("reuse_badge", n=settings.reuse_shared)] if settings.reuse_shared else []
    return out + ([blend_words(settings.cache_blend)] if settings.cache_blend else [])


# --- its view ---------------------------------------------------------------------------------------------


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run, lm = ctx.run, ctx.lm
    return {"number": run.number, "why": blending.why_not_movable(lm), "texts": lm.token_texts(list(run.prompt_ids)),
            "r": float(sel.values.get("reuse_r") or 0), "blend": run.results.get("reuse_blend"),
            "prefix": run.results.get("reuse_prefix"), "fork": blended_fork(run, ctx.runs)}


def blended_fork(run: Any, runs: tuple[Any, ...]) -> dict[str, Any] | None:
    """A run decoded from a blended prompt cache: its setting, and how long it agrees with the run it came from."""
    if not run.cfg.cache_blend:
        return None
    origin = compared_with(run, runs)
    mine = [s.token_id for s in run.path]
    out = {"blend": blend_words(run.cfg.cache_blend), "tokens": len(mine), "origin": None, "same": 0, "whole": False}
    if origin is not None:
        theirs = [s.token_id for s in origin.path]
        out.update(origin=origin.number, same=shared_length(mine, theirs), whole=mine == theirs)
    return out


def _row(blend: dict[str, Any], r: float) -> dict[str, Any]:
    return min(blend["rows"], key=lambda row: abs(row["r"] - r))


def draw(d: dict[str, Any], lang: str) -> Drawn:
    out = idle(lang, "")
    b = d["blend"]
    if b is not None:
        row = _row(b, d["r"])
        out["reuse_quality"] = shown(figures.quality_figure(b["rows"], lang=lang))
        out["reuse_positions"] = shown(figures.positions_figure(b["check"], d["texts"], b["starts"], row["picked"],
                                                                row["r"], lang=lang))
        out["reuse_layers"] = shown(figures.layers_figure(b["deviation"], lang=lang))
        if b.get("rotation"):
            out["reuse_rotation"] = shown(figures.rotation_figure(b["rotation"], lang=lang))
    if d["prefix"] is not None:
        out["reuse_prefix_md"] = Slot(prefix_words(d["prefix"], lang))
    return out


def prefix_words(p: dict[str, Any], lang: str) -> str:
    saved = p["whole_seconds"] - p["reused_seconds"]
    return t("reuse_prefix_done", lang, n=p["number"], shared=p["shared"], tokens=p["tokens"],
             whole=1000 * p["whole_seconds"], reused=1000 * p["reused_seconds"], saved=1000 * saved,
             same=t("reuse_same" if p["same"] else "reuse_differ", lang), diff=p["max_logit_diff"])


def fork_words(f: dict[str, Any], n: int, lang: str) -> str:
    """What a blended run is, and how far it agrees with the run it forked from."""
    words = t("reuse_blend_run", lang, n=n, blend=render(f["blend"], lang))
    if f["origin"] is not None:
        key = "reuse_blend_whole" if f["whole"] else "reuse_blend_same"
        words += ("" if lang == "zh" else " ") + t(key, lang, origin=f["origin"], same=f["same"], tokens=f["tokens"])
    return words


def caption(d: dict[str, Any], lang: str) -> str:
    if d["fork"] is not None:
        return fork_words(d["fork"], d["number"], lang)
    if d["why"] is not None:
        still = d["why"] not in ("seq2seq", "window")
        return t("reuse_cannot", lang, why=t(f"reuse_why_{d['why']}", lang)) + (
            ("" if lang == "zh" else " ") + t("reuse_prefix_still", lang) if still else "")
    b = d["blend"]
    if b is None:
        return t("reuse_ready", lang, n=d["number"], tokens=len(d["texts"]))
    row, naive, full = _row(b, d["r"]), b["rows"][0], b["rows"][-1]
    sep = "" if lang == "zh" else " "
    return sep.join([
        t("reuse_blend_done", lang, n=b["number"], tokens=b["tokens"], chunks=len(b["starts"]),
          full=1000 * b["full_seconds"], naive=1000 * b["naive_seconds"]),
        t("reuse_naive", lang, kl=naive["kl_mean"], top1=naive["top1"], steps=b["steps"]),
        t("reuse_at_r", lang, r=row["r"], k=len(row["picked"]), kl=row["kl_mean"], top1=row["top1"],
          share=row["share"], ms=1000 * row["seconds"]),
        t("reuse_full_equal", lang, kl=full["kl_mean"]),
    ])


def idle(lang: str, words: str) -> Drawn:
    return {"reuse_quality": HIDDEN, "reuse_positions": HIDDEN, "reuse_layers": HIDDEN, "reuse_rotation": HIDDEN,
            "reuse_prefix_md": Slot("")}


VIEW = View("reuse", "reuse", frozenset({"finished"}),
            ("reuse_md", "reuse_quality", "reuse_positions", "reuse_layers", "reuse_rotation", "reuse_prefix_md"),
            compute, draw, caption, idle, waits="reuse_needs_run", busy="reuse_after_run")

EXPERIMENT = Experiment(
    name="reuse", tab="reuse", elem_id="reuse-tab", order=50,
    fields=(SHARED, BLEND),
    layout=(
        Words("reuse_intro", ("reuse_intro", "reuse_rope"), "reuse-intro"),
        Row((Widget("reuse_chunks", "radio", "reuse_chunks", "reuse-chunks", default="paragraphs",
                    choices=chunk_choices, min_width=240),
             Widget("reuse_r", "slider", "reuse_r", "reuse-r", default=15, info="reuse_r_info", low=0, high=100,
                    step=5, view=True, min_width=240)), elem_id="reuse-controls"),
        Row((Action("reuse_blend", "job", "reuse_blend", "reuse-blend-btn", inputs=("reuse_chunks",),
                    run=measure_blend, out="reuse_job_md", progress="reuse_progress"),
             Action("reuse_stop", "stop", "reuse_stop", "reuse-stop", primary=False, min_width=80),
             Action("reuse_blend_fork", "fork", "reuse_blend_fork", "reuse-blend-fork-btn",
                    inputs=("reuse_chunks", "reuse_r"), run=fork_blend, primary=False)),
            elem_id="reuse-buttons"),
        Out("reuse_job_md", "markdown", "reuse-job-md"),
        Out("reuse_md", "markdown", "reuse-md", words="reuse_needs_run"),
        Out("reuse_quality", "plot", "reuse-quality-plot"),
        Out("reuse_positions", "plot", "reuse-positions-plot"),
        Out("reuse_layers", "plot", "reuse-layers-plot"),
        Out("reuse_rotation", "plot", "reuse-rotation-plot"),
        Words("reuse_prefix_title", ("reuse_prefix_title",), "reuse-prefix-title"),
        Widget("reuse_ending", "textbox", "reuse_ending", "reuse-ending", default=""),
        Row((Action("reuse_prefix", "job", "reuse_prefix", "reuse-prefix-btn", inputs=("reuse_ending",),
                    run=measure_prefix, out="reuse_prefix_job_md", progress="reuse_progress", primary=False),
             Action("reuse_fork", "fork", "reuse_fork", "reuse-fork-btn", inputs=("reuse_ending",), run=fork,
                    primary=False)), elem_id="reuse-prefix-buttons"),
        Out("reuse_prefix_job_md", "markdown", "reuse-prefix-job-md"),
        Out("reuse_prefix_md", "markdown", "reuse-prefix-md"),
    ),
    view=VIEW, badge=badge, config=config, lenient=lenient, needs_run="reuse_needs_run",
)
