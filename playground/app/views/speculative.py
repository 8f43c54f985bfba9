"""Speculative decoding, token by token: the run on screen's drafted tokens with q(x), p(x), min(1, p/q) and the
coin, the residual max(0, p − q) a rejection resampled from (at the selected step, else the first rejection), the
acceptance rate, tokens per pass of the model and the speed against the same request without a draft."""

from __future__ import annotations

from typing import Any

from playground.app import speculative_lab
from playground.app.describe import inert
from playground.app.views.base import HIDDEN, Context, Drawn, Selection, View, shown
from playground.app.words import t
from playground.viz import speculative as figures


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run = ctx.run
    if not run.settings.draft or run.mode == "beam":
        return {"number": run.number, "draft": None}
    plain = speculative_lab.plain_among(ctx.runs, run)
    rows = speculative_lab.checks(ctx.lm, run)
    step = run.step(sel.step)
    rejected = [r for r in rows if r.get("accepted") is False]
    picked = next((r for r in rows if r["step"] == step), None)
    return {"number": run.number, "draft": run.settings.draft, "k": run.settings.draft_tokens, "rows": rows,
            "totals": speculative_lab.totals(run), "speed": speculative_lab.speed(run), "sample": run.mode == "sample",
            "plain": None if plain is None else (plain.number, speculative_lab.speed(plain)),
            "picked": picked, "residual": picked if picked in rejected else (rejected[0] if rejected else None)}


def draw(d: dict[str, Any], lang: str) -> Drawn:
    if d["draft"] is None:
        return {"spec_checks": HIDDEN, "spec_residual": HIDDEN}
    out: Drawn = {"spec_checks": HIDDEN, "spec_residual": HIDDEN}
    if any("draft" in r for r in d["rows"]):
        out["spec_checks"] = shown(figures.checks_figure(d["rows"]))
    if d["residual"] is not None and d["residual"].get("residual"):
        out["spec_residual"] = shown(figures.residual_figure(d["residual"]))
    return out


def _tok(text: str) -> str:
    return inert(text.replace("\n", "↵")) or "∅"


def caption(d: dict[str, Any], lang: str) -> str:
    if d["draft"] is None:
        return t("spec_plain", lang, n=d["number"])
    s = d["totals"]
    lines = [t("spec_head", lang, n=d["number"], drafter=speculative_lab.drafter_words(d["draft"], lang), k=d["k"],
               accepted=s["accepted"], proposed=s["proposed"], rate=s["rate"], per_pass=s["per_pass"],
               passes=s["passes"], tokens=len(d["rows"])),
             t("spec_rule_sample" if d["sample"] else "spec_rule_greedy", lang)]
    if d["plain"] is None:
        lines.append(t("spec_no_plain", lang, tps=d["speed"]))
    else:
        number, plain_tps = d["plain"]
        lines.append(t("spec_speed", lang, tps=d["speed"], plain=plain_tps, m=number,
                       ratio=d["speed"] / plain_tps if plain_tps else 0.0))
    r = d["picked"]
    if r is not None and "draft" in r:
        coin = t("spec_coin", lang, coin=r["coin"]) if r.get("coin") is not None else t("spec_no_coin", lang)
        verdict = (t("spec_kept", lang) if r["accepted"]
                   else t("spec_rejected", lang, token=_tok(r.get("resampled", ""))))
        lines.append(t("spec_step", lang, step=r["step"] + 1, draft=_tok(r["draft"]), q=r["q"], p=r["p"],
                       accept=r["accept"], coin=coin, verdict=verdict))
    elif r is not None:
        lines.append(t(f"spec_step_{r['kind']}" if r["kind"] in ("bonus", "prefill") else "spec_step_plain", lang,
                       step=r["step"] + 1))
    if r is not None and r["so_far"].get("proposed"):  # the running acceptance rate at the selected step
        so_far = r["so_far"]
        lines.append(t("spec_so_far", lang, step=r["step"] + 1, accepted=so_far["accepted"],
                       proposed=so_far["proposed"], rate=so_far["accepted"] / so_far["proposed"],
                       passes=so_far["target_passes"]))
    return ("" if lang == "zh" else " ").join(lines)


def idle(lang: str, words: str) -> Drawn:
    return {"spec_checks": HIDDEN, "spec_residual": HIDDEN}


VIEW = View("speculative", "speculative", frozenset({"finished", "step"}), ("spec_md", "spec_checks", "spec_residual"),
            compute, draw, caption, idle, waits="spec_needs_run", busy="spec_after_run")
