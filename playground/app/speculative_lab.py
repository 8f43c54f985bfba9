"""Speculative decoding in the app: fork a run with a drafter (prompt lookup, the model's own early layer, a second
model of the same vocabulary) and read each drafted token's check: q(x), p(x), min(1, p/q), the coin, and on a
rejection the residual max(0, p − q) it resampled from; the acceptance rate, tokens per pass of the model and the
speed against the same request without a draft. No Gradio, no threads."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from playground.app.run import Run
from playground.app.settings import UISettings, plain_variant, usable_draft
from playground.app.words import t
from playground.errors import PlaygroundError

if TYPE_CHECKING:
    from playground.app.session import Session


class SpeculativeLabError(PlaygroundError):
    """A fork the page cannot run; the message (in the visitor's language) says what to do."""


def drafter_words(draft: str, lang: str) -> str:
    """A draft setting in the visitor's words ('' for none)."""
    if not draft:
        return ""
    if draft == "ngram":
        return t("spec_ngram", lang)
    if draft.startswith("layer:"):
        return t("spec_layer", lang, k=draft[len("layer:"):])
    return t("spec_model", lang, name=draft[len("model:"):])


def fork_settings(session: Session, run: Run, draft: str, draft_tokens: int, lang: str) -> UISettings:
    """The settings of `run` (its seed, no branches) drafted by `draft`, `draft_tokens` per pass."""
    draft = str(draft or "").strip()
    if not draft or not usable_draft(draft):
        raise SpeculativeLabError(t("spec_choose", lang))
    base = session.run_settings(run)
    return dataclasses.replace(base, branches="", lang=lang, draft=draft,
                               draft_tokens=min(16, max(1, int(draft_tokens or 4))))


def plain_among(runs: Sequence[Run], run: Run) -> Run | None:
    """The newest finished run of the same request without a draft (a sampled run: the same seed)."""
    want = dataclasses.replace(plain_variant(run.settings), branches="", lang="en", pace_ms=0, seed=None)
    for other in reversed(runs):
        if other is run or other.running or not other.path or other.branch_of is not None or other.settings.draft:
            continue
        if other.prompt_ids != run.prompt_ids or (run.mode == "sample" and other.cfg.seed != run.cfg.seed):
            continue
        if dataclasses.replace(other.settings, branches="", lang="en", pace_ms=0, seed=None) == want:
            return other
    return None


def checks(lm: Any, run: Run) -> list[dict[str, Any]]:
    """One row per generated token: its step, what kind it is (accepted or rejected draft, bonus, plain), and for
    a drafted token the draft's text, q, p, min(1, p/q), the coin and the resampled token with its residual."""
    rows = []
    for step, event in enumerate(run.events):
        record = event.speculation or {}
        row = {"step": step, "kind": record.get("kind", "plain"), "pass": record.get("pass_index", step),
               "token": event.token_text, "so_far": dict(record.get("totals") or {})}
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


def speed(run: Run) -> float:
    """The run's measured decode rate (tokens/s), as the engine's clock reported it at its end."""
    return float(run.events[-1].timing.get("tokens_per_s", 0.0)) if run.events else 0.0
