"""The causal lab: fork a run with an edit of the model (ablate a head or a layer's MLP, steer with a vector made from
two prompts, patch the residual from another prompt), see what the edit changed against the run it forked from
(divergence) and why a token won (direct logit attribution), read from the run on screen or, by the switch, its
origin; and the head sweep. Every result names the run it reads ("In run 2 (ablate head 23.4), step 6:"). The
numbers are `playground.app.lab`'s."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import numpy as np

from playground.analysis.divergence import HeadSweep
from playground.app import lab
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
from playground.app.fields import MAX_EDITS, Field, parse_edits
from playground.app.jobs import Progress
from playground.app.notes import note, render
from playground.app.run import Run
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t
from playground.generation.config import GenerationConfig
from playground.interventions import Ablate, Intervention, InterventionError, as_interventions, check, pack
from playground.notes import Note
from playground.viz import causal

# --- its settings -------------------------------------------------------------------------------------


def config(settings: Any) -> dict[str, Any]:
    return {"interventions": parse_edits(settings.edits)}


def lenient_edits(c: GenerationConfig, lm: Any, notes: list[Note]) -> None:
    """The run's edits must fit this model; unusable ones are dropped, never half-applied."""
    try:
        c.interventions = as_interventions(c.interventions)
        check(c.interventions, lm.config)
    except InterventionError as error:
        notes.append(note("edits_dropped", why=error.args[0] if error.args else str(error)))
        c.interventions = ()


def badge(settings: Any) -> list[Note]:
    """Each edit of the run in words."""
    try:
        return [lab.describe(iv) for iv in parse_edits(settings.edits)]
    except ValueError:
        return []


def with_edit(settings: Any, lm: Any, edit: Intervention) -> Fork:
    """The edits of `settings` and `edit` after them; refused when the model has no such part, or over the most a
    run carries."""
    try:
        check([edit], lm.config)
    except InterventionError as error:
        raise ForkError(note("edits_dropped", why=error.args[0] if error.args else str(error))) from None
    edits = parse_edits(settings.edits) + (edit,)
    if len(edits) > MAX_EDITS:
        raise ForkError(note("lab_too_many", n=MAX_EDITS))
    return Fork({"edits": pack(edits)})


def _whole(values: Any, name: str) -> int:
    return int(values.get(name) or 0)


def fork_head(req: ForkRequest) -> Fork:
    return with_edit(req.settings, req.lm, Ablate(_whole(req.values, "lab_layer"), head=_whole(req.values, "lab_head")))


def fork_mlp(req: ForkRequest) -> Fork:
    return with_edit(req.settings, req.lm, Ablate(_whole(req.values, "lab_layer"), component="mlp"))


def fork_steer(req: ForkRequest) -> Fork:
    """Measure the contrast vector (one pass of each prompt; its norm against the residual's), then fork with it."""
    v = req.values
    vector = lab.contrast(req.lm, str(v.get("lab_positive") or ""), str(v.get("lab_negative") or ""),
                          _whole(v, "lab_steer_layer"))
    scale = float(v.get("lab_scale") or 0.0)
    forked = with_edit(req.settings, req.lm, vector.steer(scale))
    return Fork(forked.changes, {"steer": lab.vector_summary(vector, scale)})


def fork_patch(req: ForkRequest) -> Fork:
    """Activation patching: the other prompt's residual after the block at the position (one pass), put into the
    run on screen."""
    v = req.values
    other = str(v.get("lab_patch_prompt") or "")
    patch = lab.patch_from_prompt(req.lm, req.run, other, _whole(v, "lab_patch_layer"), _whole(v, "lab_patch_position"))
    forked = with_edit(req.settings, req.lm, patch)
    return Fork(forked.changes, {"patch": lab.patch_summary(req.lm, req.run, patch, other)})


def read_run(run: Run, runs: Any, side: Any) -> Run:
    """The run the lab reads: the one on screen, or (the switch on "original") the run it forked from."""
    if side == "original" and run.settings.edits:
        return compared_with(run, runs) or run
    return run


def sweep(req: JobRequest) -> Iterator[Progress | dict[str, Any]]:
    """Ablate every head of the layer alone at the selected step of the run the lab reads: one pass per slice, then
    what it found (kept on the run on screen for the view to draw)."""
    run = read_run(req.run, req.runs, req.values.get("lab_run"))
    step = run.step(req.step)
    for item in lab.sweep_work(req.lm, run, step, _whole(req.values, "lab_layer"), req.stop):
        if not isinstance(item, HeadSweep):
            yield item
            continue
        yield {"read": (run.number, run.settings.edits, run.step_number(step)), "sweep": item.to_dict(),
               "token": run.path[step].token_text, "done": int((~np.isnan(item.logprob_drop)).sum()),
               "best": int(item.order[0]), "drop": float(item.logprob_drop[item.order[0]]), "layer": item.layer}


# --- its view ---------------------------------------------------------------------------------------------


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run, lm = ctx.run, ctx.lm
    step = run.step(sel.step)
    original = compared_with(run, ctx.runs) if run.settings.edits else None
    div = lab.divergence_of(lm, original, run) if original is not None else None
    read = read_run(run, ctx.runs, sel.values.get("lab_run"))
    read_step = read.step(step)
    attribution = lab.why(lm, read, read_step, bool(sel.values.get("lab_versus")))
    own = attribution if read is run and not sel.values.get("lab_versus") else lab.why(lm, run, step, False)
    key = lab.key_head(own)
    c = lm.config
    added = [iv for iv in parse_edits(run.settings.edits)
             if original is None or iv not in parse_edits(original.settings.edits)]
    return {
        "step": step, "step_no": run.step_number(step), "number": run.number, "edits": run.settings.edits,
        "added": pack(tuple(added)) if added else "",
        "original": None if original is None else original.number,
        "div": div, "original_texts": [s.token_text for s in original.path] if original is not None else [],
        "read": (read.number, read.settings.edits, read.step_number(read_step)),
        "side": "original" if read is original else "shown",
        "attr": attribution.to_dict(), "token": read.path[read_step].token_text,
        "other": lm.token_text(attribution.versus_id) if attribution.versus_id is not None else None,
        "n_layers": c.n_layers, "n_heads": c.n_heads, "prompt_tokens": len(run.prompt_ids),
        "key": {"layer": key[0], "head": key[1], "adds": float(own.heads[key]), "token": run.path[step].token_text},
        "results": {k: run.results[k] for k in ("lab_sweep", "steer", "patch") if k in run.results},
    }


def key_words(d: dict[str, Any], lang: str) -> str:
    """The head that matters most at the step on screen, named with what it adds to the token's logit; its line
    carries the run, layer and head for the page's guided path, which sets the sliders to it."""
    from playground.app.tokens_view import shown as visible  # it imports the app's settings, which import this

    k = d["key"]
    words = lab.reads_words(d["number"], d["edits"], d["step_no"], lang) + ("" if lang == "zh" else " ") + t(
        "lab_key_head", lang, layer=k["layer"], head=k["head"], adds=k["adds"], token=visible(k["token"]))
    return (f'<p class="pg-key-head" data-run="{d["number"]}" data-layer="{k["layer"]}" data-head="{k["head"]}">'
            f'{html.escape(words)}</p>')


def run_choices(d: dict[str, Any], lang: str) -> list[tuple[str, str]]:
    """The switch between the run on screen and its original, each named by its number."""
    return [(t("lab_side_shown", lang, n=d["number"]), "shown"),
            (t("lab_side_original", lang, n=d["original"]), "original")]


def draw(d: dict[str, Any], lang: str) -> Drawn:
    number, edits, step = d["read"]
    label = lab.reads_words(number, edits, step, lang)
    top = Slot(maximum=max(1, d["n_layers"] - 1))
    out: Drawn = {
        "lab_div": HIDDEN, "lab_attr": shown(causal.attribution_figure(d["attr"], d["token"], d["other"], lang=lang)),
        "lab_attr_md": Slot(label + " " + causal.attribution_caption(d["attr"], d["token"], lang=lang)),
        "lab_layer": top, "lab_steer_layer": top, "lab_patch_layer": top,
        "lab_head": Slot(maximum=max(1, d["n_heads"] - 1)),
        "lab_key_md": Slot(key_words(d, lang)),
        "lab_patch_position": Slot(maximum=max(1, d["prompt_tokens"] - 1)),
        "lab_run": HIDDEN if d["original"] is None else Slot(d["side"], visible=True, choices=run_choices(d, lang)),
        **_results(d["results"], lang),
    }
    if d["div"] is not None:
        out["lab_div"] = shown(causal.divergence_figure(d["div"].to_dict(), d["original_texts"], lang=lang))
    return out


def _results(results: dict[str, Any], lang: str) -> Drawn:
    """What was measured on this run: the steering vector or the patch that made it, its head sweep."""
    out: Drawn = {"lab_steer_md": Slot(""), "lab_patch_md": Slot(""), "lab_sweep_md": Slot(""),
                  "lab_sweep_plot": HIDDEN}
    for name in ("steer", "patch"):
        if name in results:
            out[f"lab_{name}_md"] = Slot(render(results[name], lang))
    found = results.get("lab_sweep")
    if found is not None:
        md = lab.reads_words(*found["read"], lang) + " " + t(
            "lab_sweep_done", lang, layer=found["layer"], step=found["read"][2], head=found["best"],
            token=found["token"], drop=found["drop"])
        total = len(found["sweep"]["logprob_drop"])
        if found["done"] < total:
            md += " " + t("lab_sweep_stopped", lang, done=found["done"], total=total)
        out["lab_sweep_md"] = Slot(md)
        out["lab_sweep_plot"] = shown(causal.head_sweep_figure(found["sweep"], found["token"], lang=lang))
    return out


def caption(d: dict[str, Any], lang: str) -> str:
    """What the run on screen is (plain, or edited and compared with the run it forked from) and, at the step, what
    the edit changed."""
    if not d["edits"]:
        return t("lab_plain", lang)
    label = lab.reads_words(d["number"], d["edits"], d["step_no"], lang)
    if d["original"] is None:
        return label + " " + t("lab_no_original", lang, edit=lab.describe_edits(d["edits"], lang))
    texts, step = d["original_texts"], d["step"]
    token = texts[step] if step < len(texts) else ""
    return (label + " " + t("lab_edited", lang, edit=lab.describe_edits(d["added"] or d["edits"], lang),
                            n=d["original"]) + "\n\n" + lab.step_summary(d["div"], step, token, lang))


def idle(lang: str, words: str) -> Drawn:
    return {"lab_div": HIDDEN, "lab_key_md": Slot(""), "lab_attr_md": Slot(""), "lab_attr": HIDDEN, "lab_run": HIDDEN,
            "lab_steer_md": Slot(""), "lab_patch_md": Slot(""), "lab_sweep_md": Slot(""), "lab_sweep_plot": HIDDEN}


VIEW = View("lab", "lab", frozenset({"finished", "step", "edits"}),
            ("lab_md", "lab_key_md", "lab_div", "lab_attr_md", "lab_attr", "lab_layer", "lab_head", "lab_steer_layer", "lab_run",
             "lab_patch_layer", "lab_patch_position", "lab_steer_md", "lab_patch_md", "lab_sweep_md",
             "lab_sweep_plot"),
            compute, draw, caption, idle, waits="lab_needs_run", busy="lab_after_run")


def _top_layer(config: Any) -> int:
    return max(1, config.n_layers - 1)


def _layer(name: str, label: str, elem_id: str, follows: str | None = None) -> Widget:
    return Widget(name, "slider", label, elem_id, default=0, follows=follows, high_of=_top_layer)


EXPERIMENT = Experiment(
    name="causal", tab="lab", elem_id="lab-tab", order=10,
    # the run's edits (interventions.pack); a link replays the run without them first, then this one beside it
    fields=(Field("edits", "text", "", check=parse_edits, widget=False, lenient=lenient_edits),),
    layout=(
        Words("lab_intro", ("lab_intro",), "lab-intro"),
        Out("lab_key_md", "html", "lab-key-head"),  # the head that adds most to the token on screen
        Row((_layer("lab_layer", "lab_layer", "lab-layer", follows="att_layer"),
             Widget("lab_head", "slider", "lab_head", "lab-head", default=0, follows="att_head",
                    high_of=lambda c: max(1, c.n_heads - 1)))),
        Row((Action("lab_ablate_head", "fork", "lab_ablate_head", "lab-ablate-head", inputs=("lab_layer", "lab_head"),
                    run=fork_head),
             Action("lab_ablate_mlp", "fork", "lab_ablate_mlp", "lab-ablate-mlp", inputs=("lab_layer",), run=fork_mlp,
                    primary=False)), elem_id="lab-buttons"),
        Out("lab_md", "markdown", "lab-divergence-md", words="lab_needs_run"),
        Out("lab_div", "plot", "lab-divergence-plot"),
        # an edited run's results read the run on screen or, switched, its original (shown once there is one)
        Widget("lab_run", "radio", "lab_run", "lab-run", default="shown", view=True, visible=False,
               choices=lambda lang: [("shown", "shown"), ("original", "original")]),
        Widget("lab_versus", "checkbox", "lab_versus", "lab-versus", default=False, view=True),
        Out("lab_attr_md", "markdown", "lab-attribution-md"),
        Out("lab_attr", "plot", "lab-attribution-plot"),
        Row((Action("lab_sweep", "job", "lab_sweep", "lab-sweep-btn", inputs=("lab_layer", "lab_run"), run=sweep,
                    out="lab_sweep_md", progress="lab_sweep_progress", primary=False),
             Action("lab_sweep_stop", "stop", "lab_sweep_stop", "lab-sweep-stop", primary=False, min_width=80)),
            elem_id="lab-sweep-buttons"),
        Out("lab_sweep_md", "markdown", "lab-sweep-md"),
        Out("lab_sweep_plot", "plot", "lab-sweep-plot"),
        Words("lab_steer_title", ("lab_steer_title",), "lab-steer-title"),
        Row((Widget("lab_positive", "textbox", "lab_positive", "lab-positive", default=""),
             Widget("lab_negative", "textbox", "lab_negative", "lab-negative", default=""))),
        Row((_layer("lab_steer_layer", "lab_layer", "lab-steer-layer"),
             Widget("lab_scale", "slider", "lab_scale", "lab-scale", default=4, low=-16, high=16, step=0.5))),
        Action("lab_steer", "fork", "lab_steer", "lab-steer-btn", out="lab_steer_md", run=fork_steer,
               inputs=("lab_positive", "lab_negative", "lab_steer_layer", "lab_scale")),
        Out("lab_steer_md", "markdown", "lab-steer-md"),
        # activation patching: another prompt's residual at one position and block, put into this run
        Words("lab_patch_title", ("lab_patch_title", "lab_patch_intro"), "lab-patch-title"),
        Widget("lab_patch_prompt", "textbox", "lab_patch_prompt", "lab-patch-prompt", default=""),
        Row((_layer("lab_patch_layer", "lab_patch_layer", "lab-patch-layer"),
             Widget("lab_patch_position", "slider", "lab_patch_position", "lab-patch-position", default=-1, low=-1,
                    high=1))),
        Action("lab_patch", "fork", "lab_patch", "lab-patch-btn", out="lab_patch_md", run=fork_patch,
               inputs=("lab_patch_prompt", "lab_patch_layer", "lab_patch_position")),
        Out("lab_patch_md", "markdown", "lab-patch-md"),
    ),
    view=VIEW, badge=badge, config=config, needs_run="lab_needs_run",
)
