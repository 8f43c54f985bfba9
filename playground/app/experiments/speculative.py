"""Speculative decoding: fork a run with a drafter (prompt lookup, the model's own early layer, a second model of the
same vocabulary) and read each drafted token's check: q(x), p(x), min(1, p/q), the coin, and on a rejection the
residual max(0, p − q) it resampled from; the acceptance rate, tokens per pass of the model and the speed against
the run it forked from (the same request without a draft), measured again here: the first tokens of both, each
timed `noise.REPEATS` times interleaved, with their ranges, and what a verify pass of K + 1 positions costs in plain
decoding steps (why drafts can lose: a pass that yields 1.9 tokens but costs 1.7 steps gains almost nothing)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Generator
from typing import Any

import torch

from playground.app import noise
from playground.app.describe import inert
from playground.app.experiments.base import (
    Action,
    Experiment,
    Fork,
    ForkError,
    ForkRequest,
    Out,
    Row,
    Widget,
    Words,
)
from playground.app.fields import Field, check_draft_name
from playground.app.notes import note, render
from playground.app.run import Run
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t
from playground.generation.config import DRAFT_TOKENS, GenerationConfig, SettingsError
from playground.generation.drafters import rewindable_cache
from playground.generation.speculative import check_draft
from playground.notes import Note
from playground.viz import speculative as figures

# --- its settings -------------------------------------------------------------------------------------


def config(settings: Any) -> dict[str, Any]:
    """GenerationConfig's draft (a "model:<name>" draft is a loaded model, found by name when the run starts)."""
    if not settings.draft or settings.draft.startswith("model:"):
        return {}
    return {"draft": settings.draft, "draft_tokens": settings.draft_tokens}


def lenient(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    """K in its range, then a drafter this model cannot use dropped: the run decodes plainly (the same tokens)."""
    if not (DRAFT_TOKENS.typed(c.draft_tokens) and DRAFT_TOKENS.in_range(c.draft_tokens)):
        notes.append(note("draft_tokens_bad", value=repr(c.draft_tokens)))
        c.draft_tokens = 4
    try:
        check_draft(lm, c)
    except SettingsError as error:
        notes.append(note("draft_dropped", why=str(error)))
        c.draft = None


def drafter(draft: str) -> Note:
    """A draft setting in words."""
    if draft == "ngram":
        return note("spec_ngram")
    if draft.startswith("layer:"):
        return note("spec_layer", k=draft[len("layer:"):])
    return note("spec_model", name=draft[len("model:"):])


def badge(settings: Any) -> list[Note]:
    return [note("spec_words", drafter=drafter(settings.draft))] if settings.draft else []


def ran(run: Run) -> bool:
    """Whether `run` was drafted: a drafter it kept after the lenient pass (one that cannot run beside a cache policy,
    or a model that could not load, is dropped with a note), without beams (they decode without speculation), and
    once it has ended, the engine's checks in its events (the run's own record of drafting)."""
    if run.cfg.draft is None or run.beam:
        return False
    return run.running or not run.events or any(e.speculation for e in run.events)


def fork(req: ForkRequest) -> Fork:
    """The run again drafted by the chosen drafter, K tokens per pass."""
    draft = str(req.values.get("draft") or "").strip()
    try:
        check_draft_name(draft)
    except ValueError:
        draft = ""
    if not draft:
        raise ForkError(note("spec_choose"))
    tokens = int(min(DRAFT_TOKENS.high, max(DRAFT_TOKENS.low, int(req.values.get("draft_tokens") or 4))))
    return Fork({"draft": draft, "draft_tokens": tokens})


def draft_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("spec_off", lang), ""), ("ngram", "ngram"), *((f"layer:{k}", f"layer:{k}") for k in (1, 2, 4, 8, 12))]


# --- its numbers ----------------------------------------------------------------------------------------


def checks(lm: Any, run: Run) -> list[dict[str, Any]]:
    """One row per generated token: its step (as people count it), what kind it is (accepted or rejected draft,
    bonus, plain), and for a drafted token the draft's text, q, p, min(1, p/q), the coin and the resampled token
    with its residual."""
    rows = []
    for step, event in enumerate(run.events):
        record = event.speculation or {}
        row = {"step": step, "step_no": run.step_number(step), "kind": record.get("kind", "plain"),
               "pass": record.get("pass_index", step), "token": event.token_text,
               "so_far": dict(record.get("totals") or {})}
        if record.get("draft_token") is not None:
            row.update(draft=lm.token_text(int(record["draft_token"])), q=float(record["q"]), p=float(record["p"]),
                       accept=float(record["accept_prob"]), coin=record.get("coin"), accepted=bool(record["accepted"]))
            if not record["accepted"]:
                row["resampled"] = lm.token_text(int(record["resampled_token"]))
                row["residual"] = [{"text": lm.token_text(int(r["token_id"])), "p": r["p"], "q": r["q"],
                                    "residual": r["residual"]} for r in record.get("residual_top") or []]
        rows.append(row)
    return rows


def totals(run: Run) -> dict[str, Any]:
    """Proposed, accepted and target passes at the run's end, the acceptance rate and tokens per pass."""
    last = run.events[-1].speculation if run.events and run.events[-1].speculation else {}
    sums = last.get("totals", {})
    proposed, accepted = int(sums.get("proposed", 0)), int(sums.get("accepted", 0))
    passes = int(sums.get("target_passes", 0)) or len(run.events)
    return {"proposed": proposed, "accepted": accepted, "passes": passes,
            "rate": accepted / proposed if proposed else 0.0, "per_pass": len(run.events) / passes if passes else 0.0}


SPEED_TOKENS = 32  # the speed is measured again over the first tokens of the run (each mode, every repeat)
CALLS = 4  # a verify pass or a plain step is timed as the mean of this many calls (one call is ~a millisecond)
_MEASURED: OrderedDict[str, dict[str, Any]] = OrderedDict()  # run token -> its measurement (runs never change)
_KEEP = 32


def _bare(cfg: GenerationConfig, tokens: int) -> GenerationConfig:
    return cfg.replace(max_new_tokens=tokens, capture_attention=False, attention_layers=None, capture_residual=False,
                       top_candidates=0)


def _verify_costs(lm: Any, prompt_ids: list[int], k: int, repeats: int) -> Generator[None, None, list[float]]:
    """What one verify pass over k + 1 positions costs in plain decoding steps (one position), on the prompt's
    cache: per repeat, the mean time of `CALLS` passes ÷ that of `CALLS` steps, the two interleaved."""
    model = lm.model
    device = model.embed.weight.device
    ids = torch.tensor(prompt_ids, dtype=torch.long, device=device)
    tail = ids[-(k + 1):].repeat(k + 1)[: k + 1]  # any k + 1 real tokens (a short prompt repeats)
    with torch.inference_mode():
        cache = rewindable_cache(model, lm.config.n_layers, 1, len(prompt_ids) + k + 2)
        model(ids[None], cache, None, last_only=True)
        base = cache.length

    def passes(n: int) -> Callable[[], float]:
        def measure() -> float:
            with torch.inference_mode():
                began = time.perf_counter()
                for _ in range(CALLS):
                    model(tail[None, :n], cache, None)
                    cache.rewind(base)
                return (time.perf_counter() - began) / CALLS
        return measure

    sides = {"step": passes(1), "verify": passes(k + 1)}
    sides["step"](), sides["verify"]()  # warm both shapes first
    yield
    took: dict[str, list[float]] = {"step": [], "verify": []}
    for _, name in noise.turns(list(sides), repeats):
        took[name].append(sides[name]())
        yield
    costs = [v / s for v, s in zip(took["verify"], took["step"])]  # each repeat's pair, taken side by side
    return costs


def measure_slices(lm: Any, run: Run, repeats: int = noise.REPEATS) -> Generator[None, None, dict[str, Any]]:
    """The speed with and without the draft over the run's first tokens (`repeats` runs each, interleaved) and a
    verify pass's cost in steps, one forward pass (or one timed step) per `next()`; remembered per run."""
    if run.token in _MEASURED:
        _MEASURED.move_to_end(run.token)
        return _MEASURED[run.token]
    tokens = max(2, min(SPEED_TOKENS, len(run.path)))
    drafted = _bare(run.cfg, tokens)
    prompt = list(run.prompt_ids)
    rates = yield from noise.decode_rates(prompt, {"draft": (lm, drafted), "plain": (lm, drafted.replace(draft=None))},
                                          repeats)
    costs = yield from _verify_costs(lm, prompt, run.settings.draft_tokens, repeats)
    out = {"tokens": tokens, **rates, "cost": noise.spread(costs), "load": noise.machine_load()}
    _MEASURED[run.token] = out
    while len(_MEASURED) > _KEEP:
        _MEASURED.popitem(last=False)
    return out


# --- its view ---------------------------------------------------------------------------------------------


def compute(ctx: Context, sel: Selection) -> Generator[None, None, dict[str, Any]]:
    """In slices: the speed and the verify pass's cost are measured again (one forward pass each)."""
    run = ctx.run
    out: dict[str, Any] = {"number": run.number, "draft": None, "drafters": list(ctx.drafters)}
    if not ran(run):  # asked for and dropped (its note says why): the run decoded one token per pass
        return out
    measured = yield from measure_slices(ctx.lm, run)
    rows = checks(ctx.lm, run)
    step = run.step(sel.step)
    rejected = [r for r in rows if r.get("accepted") is False]
    picked = next((r for r in rows if r["step"] == step), None)
    return {**out, "draft": run.settings.draft, "k": run.settings.draft_tokens, "rows": rows,
            "before": run.steps_before,
            "totals": totals(run), "sample": run.mode == "sample", "measured": measured,
            "picked": picked, "residual": picked if picked in rejected else (rejected[0] if rejected else None)}


def draw(d: dict[str, Any], lang: str) -> Drawn:
    """The checks and a rejection's residual; the drafter list with the visitor's loaded models of the same
    vocabulary."""
    out: Drawn = {"spec_checks": HIDDEN, "spec_residual": HIDDEN,
                  "draft": Slot(choices=draft_choices(lang) + [(f"model:{n}", f"model:{n}") for n in d["drafters"]])}
    if d["draft"] is None:
        return out
    if any("draft" in r for r in d["rows"]):
        out["spec_checks"] = shown(figures.checks_figure(d["rows"], lang=lang, before=d["before"]))
    if d["residual"] is not None and d["residual"].get("residual"):
        out["spec_residual"] = shown(figures.residual_figure(d["residual"], lang=lang, before=d["before"]))
    return out


def _tok(text: str) -> str:
    return inert(text.replace("\n", "↵")) or "∅"


def _step_words(r: dict[str, Any], lang: str) -> str:
    """What the drafter did at the selected step."""
    if "draft" in r:
        coin = t("spec_coin", lang, coin=r["coin"]) if r.get("coin") is not None else t("spec_no_coin", lang)
        verdict = t("spec_kept", lang) if r["accepted"] else t("spec_rejected", lang, token=_tok(r.get("resampled",
                                                                                                       "")))
        return t("spec_step", lang, step=r["step_no"], draft=_tok(r["draft"]), q=r["q"], p=r["p"], accept=r["accept"],
                 coin=coin, verdict=verdict)
    kind = r["kind"] if r["kind"] in ("bonus", "prefill") else "plain"
    return t(f"spec_step_{kind}", lang, step=r["step_no"])


def caption(d: dict[str, Any], lang: str) -> str:
    if d["draft"] is None:
        return t("spec_plain", lang, n=d["number"])
    s = d["totals"]
    lines = [t("spec_head", lang, n=d["number"], drafter=render(drafter(d["draft"]), lang), k=d["k"],
               accepted=s["accepted"], proposed=s["proposed"], rate=s["rate"], per_pass=s["per_pass"],
               passes=s["passes"], tokens=len(d["rows"])),
             t("spec_rule_sample" if d["sample"] else "spec_rule_greedy", lang)]
    lines += _speed_words(d, lang)
    r = d["picked"]
    if r is not None:
        lines.append(_step_words(r, lang))
        so_far = r["so_far"]
        if so_far.get("proposed"):  # the running acceptance rate at the selected step
            lines.append(t("spec_so_far", lang, step=r["step_no"], accepted=so_far["accepted"],
                           proposed=so_far["proposed"], rate=so_far["accepted"] / so_far["proposed"],
                           passes=so_far["target_passes"]))
    return ("" if lang == "zh" else " ").join(lines)


def _speed_words(d: dict[str, Any], lang: str) -> list[str]:
    """The speed measured again, with and without the draft, their ranges and whether they differ beyond the
    noise; then what a verify pass cost in steps, beside the tokens a pass yielded (why drafts can lose)."""
    m, per_pass = d["measured"], d["totals"]["per_pass"]
    a, b, cost = m["draft"], m["plain"], m["cost"]
    lines = [t("spec_speed_repeated", lang, n=int(a["n"]), tokens=m["tokens"], tps=a["median"], lo=a["min"],
               hi=a["max"], plain=b["median"], plain_lo=b["min"], plain_hi=b["max"],
               ratio=a["median"] / b["median"] if b["median"] else 0.0),
             noise.verdict(a, b, m["load"], lang),
             t("spec_verify_cost", lang, positions=d["k"] + 1, cost=cost["median"], lo=cost["min"], hi=cost["max"],
               rate=d["totals"]["rate"], per_pass=per_pass,
               bound=(d["k"] + 1) / cost["median"] if cost["median"] else 0.0)]
    return lines


def idle(lang: str, words: str) -> Drawn:
    return {"spec_checks": HIDDEN, "spec_residual": HIDDEN}


VIEW = View("speculative", "speculative", frozenset({"finished", "step", "drafters"}),
            ("spec_md", "spec_checks", "spec_residual", "draft"), compute, draw, caption, idle,
            waits="spec_needs_run", busy="spec_after_run")

EXPERIMENT = Experiment(
    name="speculative", tab="speculative", elem_id="spec-tab", order=40,
    fields=(Field("draft", "text", "", check=check_draft_name, widget=False),  # "", ngram, layer:K, model:<name>
            Field("draft_tokens", "whole", 4, DRAFT_TOKENS.low, DRAFT_TOKENS.high, widget=False)),
    layout=(
        Words("spec_intro", ("spec_intro",), "spec-intro"),
        Row((Widget("draft", "dropdown", "spec_pick", "draft", default="", info="spec_pick_info", choices=draft_choices,
                    field="draft", custom=True, min_width=240),
             Widget("draft_tokens", "slider", "spec_tokens", "draft-tokens", default=4, low=DRAFT_TOKENS.low,
                    high=DRAFT_TOKENS.high, field="draft_tokens", min_width=240))),
        Action("spec_fork", "fork", "spec_fork", "spec-fork-btn", inputs=("draft", "draft_tokens"), run=fork),
        Out("spec_md", "markdown", "spec-md", words="spec_needs_run"),
        Out("spec_checks", "plot", "spec-checks-plot"),
        Out("spec_residual", "plot", "spec-residual-plot"),
    ),
    view=VIEW, badge=badge, config=config, lenient=lenient, needs_run="spec_needs_run", ran=ran,
)
