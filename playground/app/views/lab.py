"""The causal lab at the selected step: what the run's edit changed against its original (divergence), and
why the token won (direct logit attribution), read from the run on screen or, by the switch, its original.
Every result names the run it reads ("In run 2 (ablate head 23.4), step 6:")."""

from __future__ import annotations

from typing import Any

from playground.app import lab
from playground.app.views.base import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t
from playground.viz import causal


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run, lm = ctx.run, ctx.lm
    step = run.step(sel.step)
    original = lab.original_among(ctx.runs, run) if run.settings.edits else None
    div = lab.divergence_of(lm, original, run) if original is not None else None
    read = original if sel.side == "original" and original is not None else run
    read_step = read.step(step)
    attribution = lab.why(lm, read, read_step, sel.versus)
    c = lm.config
    return {
        "step": step, "step_no": run.step_number(step), "number": run.number, "edits": run.settings.edits,
        "original": None if original is None else original.number,
        "div": div, "original_texts": [s.token_text for s in original.path] if original is not None else [],
        "read": (read.number, read.settings.edits, read.step_number(read_step)), "side": "original" if read is original else "shown",
        "attr": attribution.to_dict(), "token": read.path[read_step].token_text,
        "other": lm.token_text(attribution.versus_id) if attribution.versus_id is not None else None,
        "n_layers": c.n_layers, "n_heads": c.n_heads, "prompt_tokens": len(run.prompt_ids),
    }


def run_choices(d: dict[str, Any], lang: str) -> list[tuple[str, str]]:
    """The switch between the run on screen and its original, each named by its number."""
    return [(t("lab_side_shown", lang, n=d["number"]), "shown"), (t("lab_side_original", lang, n=d["original"]), "original")]


def draw(d: dict[str, Any], lang: str) -> Drawn:
    number, edits, step = d["read"]
    label = lab.reads_words(number, edits, step, lang)
    out: Drawn = {
        "lab_div": HIDDEN, "lab_attr": shown(causal.attribution_figure(d["attr"], d["token"], d["other"])),
        "lab_attr_md": Slot(label + " " + causal.attribution_caption(d["attr"], d["token"])),
        "lab_layer": Slot(maximum=max(1, d["n_layers"] - 1)), "lab_steer_layer": Slot(maximum=max(1, d["n_layers"] - 1)),
        "lab_head": Slot(maximum=max(1, d["n_heads"] - 1)), "lab_patch_layer": Slot(maximum=max(1, d["n_layers"] - 1)),
        "lab_patch_position": Slot(maximum=max(1, d["prompt_tokens"] - 1)),
        "lab_run": HIDDEN if d["original"] is None else Slot(d["side"], visible=True, choices=run_choices(d, lang)),
    }
    if d["div"] is not None:
        out["lab_div"] = shown(causal.divergence_figure(d["div"].to_dict(), d["original_texts"]))
    return out


def caption(d: dict[str, Any], lang: str) -> str:
    """What the run on screen is (plain, or edited and compared with its original) and, at the step, what
    the edit changed."""
    if not d["edits"]:
        return t("lab_plain", lang)
    edit = lab.describe_edits(d["edits"], lang)
    label = lab.reads_words(d["number"], d["edits"], d["step_no"], lang)
    if d["original"] is None:
        return label + " " + t("lab_no_original", lang, edit=edit)
    texts, step = d["original_texts"], d["step"]
    token = texts[step] if step < len(texts) else ""
    return (label + " " + t("lab_edited", lang, edit=edit, n=d["original"]) + "\n\n"
            + lab.step_summary(d["div"], step, token, lang))


def idle(lang: str, words: str) -> Drawn:
    return {"lab_div": HIDDEN, "lab_attr_md": Slot(""), "lab_attr": HIDDEN, "lab_run": HIDDEN}


VIEW = View("lab", "lab", frozenset({"finished", "step", "edits"}),
            ("lab_md", "lab_div", "lab_attr_md", "lab_attr", "lab_layer", "lab_head", "lab_steer_layer", "lab_run",
             "lab_patch_layer", "lab_patch_position"),
            compute, draw, caption, idle, waits="lab_needs_run", busy="lab_after_run")
