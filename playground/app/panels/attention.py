"""All heads of a layer over the whole run: the grid of every head, one large map (a head, the mean, the max
or a KV group), the selected query's row, and every layer's heads summarised (entropy, mean distance)."""

from __future__ import annotations

import html
from collections import OrderedDict
from typing import Any

import numpy as np

from playground import viz
from playground.app.tab import Out, Row, Tab, Widget, Words, read
from playground.app.view import KEEP, Context, Drawn, Selection, Slot, View
from playground.app.words import t
from playground.errors import PlaygroundError
from playground.generation import full_attention
from playground.generation.budget import check_full_attention

MAX_MAP_TOKENS = 1200  # whole-run maps beyond this are not drawn (a heatmap of that size is unreadable anyway)
MAX_STATS_TOKENS = 512  # the per-layer head summary holds every layer's maps at once up to this length
# visitor -> (the layer this view last showed, the live panel's layer then): which of the two moved since
_SHOWN: OrderedDict[str, tuple[int, int]] = OrderedDict()
_KEEP = 4096
LAYER_START = 0  # where the page's layer slider starts


def last_layer(config: Any) -> int:
    """The layer slider's maximum for a model (at least 1: a slider needs a range)."""
    return max(1, config.n_layers - 1)


def last_head(config: Any) -> int:
    return max(1, config.n_heads - 1)


def scale_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("scale_linear", lang), "linear"), (t("scale_log", lang), "log")]


def view_choices(lang: str, grouped: bool) -> list[tuple[str, str]]:
    """The large attention view's choices; "mean per KV group" only where heads share K/V."""
    choices = [(t("view_head", lang), "head"), (t("view_mean", lang), "mean"), (t("view_max", lang), "max")]
    return choices + ([(t("view_group", lang), "group")] if grouped else [])


def kind_choices(lang: str, kinds: tuple[str, ...] = ("self",)) -> list[tuple[str, str]]:
    return [(t(f"kind_{k}", lang), k) for k in kinds]


def model_kinds(lm: Any, lang: str) -> list[tuple[str, str]]:
    """The kind choices of the visitor's model (a decoder's one before a model loads)."""
    return kind_choices(lang, kinds_of(lm) if lm is not None else ("self",))


def model_views(lm: Any, lang: str) -> list[tuple[str, str]]:
    """The large view's choices for the visitor's model: "mean per KV group" only where heads share K/V."""
    return view_choices(lang, grouped=lm is not None and lm.config.n_kv_heads < lm.config.n_heads)


def shown_layer(key: str, asked: int, live: int, n_layers: int) -> int:
    """The layer All heads shows (of `n_layers`): the live panel's while this tab's slider is where the page starts
    it (so the tab opens where the live screen looks), then whichever of the two the visitor moved last: this
    tab's slider, or the live panel's layer."""
    live = live if 0 <= live < n_layers else n_layers - 1  # -1: the last
    before = _SHOWN.get(key)
    if before is None:
        layer = live if asked == LAYER_START else asked
    elif asked != before[0]:
        layer = asked
    elif live != before[1]:
        layer = live
    else:
        layer = asked
    layer = min(max(layer, 0), n_layers - 1)
    _SHOWN[key] = (layer, live)
    _SHOWN.move_to_end(key)
    while len(_SHOWN) > _KEEP:
        _SHOWN.popitem(last=False)
    return layer


def kinds_of(run: Any) -> tuple[str, ...]:
    """The attention kinds of a run's (or a model's) kind, as the tab offers them, the first shown first."""
    return ("cross", "self", "encoder") if run.kind == "seq2seq" else ("self",)


def layer_stats(run: Any, lm: Any, kind: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(entropy, mean distance), each (L, h), of every layer's heads over the whole run: one pass of
    the engine, kept by the run; None when all layers' maps would be too big to hold at once."""
    if kind not in run.head_stats:
        if len(run.prefix_ids) + len(run.path) > MAX_STATS_TOKENS:
            return None
        try:
            check_full_attention(lm, len(run.prompt_ids), len(run.stream_ids))
        except PlaygroundError:
            return None
        every = full_attention(lm, run.prompt_ids, run.stream_ids)  # kind -> (L, h, T, S)
        for k, maps in every.items():
            run.head_stats[k] = (viz.attention_entropy(maps), viz.mean_attention_distance(maps))
    return run.head_stats[kind]


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    """The layer's maps with the selection clamped to the model: layer and head inside it, the query row the
    selected step's unless one was picked."""
    run, c = ctx.run, ctx.lm.config
    picked = read(TAB.view_widgets(), sel.values)
    kinds = kinds_of(run)
    kind = picked["att_kind"] if picked["att_kind"] in kinds else kinds[0]
    n_layers = c.n_encoder_layers if kind == "encoder" else c.n_layers
    layer = shown_layer(ctx.key, picked["att_layer"], ctx.live_layer, n_layers)
    if len(run.prefix_ids) + len(run.path) > MAX_MAP_TOKENS:
        return {"too_long": True}
    maps = run.attention_maps(ctx.lm, kind, layer)  # (h, T, S)
    h, T, S = maps.shape
    head = int(min(max(picked["att_head"], 0), h - 1))
    query = picked["att_query"]
    if query is None:
        query = len(run.prefix_ids) - 1 + run.step(sel.step) if kind != "encoder" else T - 1
    query = int(min(max(query, 0), T - 1))
    groups = c.n_heads // c.n_kv_heads
    q_labels, k_labels = run.labels(kind)
    stats = layer_stats(run, ctx.lm, kind)
    if stats is None:  # this layer's alone
        stats = viz.attention_entropy(maps[None]), viz.mean_attention_distance(maps[None])
    window = None
    if kind != "encoder" and run.kind == "decoder":
        window = c.layer_kinds()[layer].window  # this layer's own mask: each query sees its last `window` keys
    return {"too_long": False, "kind": kind, "layer": layer, "head": head, "query": query, "asked": (picked["att_layer"], picked["att_head"]), "view": picked["att_view"], "scale": picked["att_scale"],
            "sink": picked["att_sink"], "maps": maps, "groups": groups, "n_layers": n_layers,
            "q_labels": q_labels, "k_labels": k_labels, "stats": stats, "window": window}


def _large(d: dict[str, Any], lang: str) -> tuple[np.ndarray, str]:
    maps, groups, head = d["maps"], d["groups"], d["head"]
    if d["view"] == "mean":
        return viz.aggregate_heads(maps, "mean"), t("view_mean", lang)
    if d["view"] == "max":
        return viz.aggregate_heads(maps, "max"), t("view_max", lang)
    if d["view"] == "group" and groups > 1:
        return viz.group_by_kv_head(maps, groups)[head // groups], t("what_group", lang, group=head // groups)
    return maps[head], t("what_head", lang, head=head)


def draw(d: dict[str, Any], lang: str) -> Drawn:
    if d["too_long"]:
        return idle(lang, "")
    label, layer, query, scale, sink = t(f"kind_{d['kind']}", lang), d["layer"], d["query"], d["scale"], d["sink"]
    q_labels, k_labels, maps = d["q_labels"], d["k_labels"], d["maps"]
    groups = d["groups"]
    big, what = _large(d, lang)
    grid = viz.attention_heads_grid(maps, q_labels, k_labels, title=t("heads_grid_title", lang, label=label,
                                                                      layer=layer),
                                    kv_groups=groups if groups > 1 else 1, scale=scale, hide_first=sink, lang=lang)
    heat = viz.attention_heatmap(big, q_labels, k_labels, title=t("heat_title", lang, label=label, layer=layer,
                                                                  what=what),
                                 scale=scale, hide_first=sink, highlight_row=query, lang=lang)
    row = viz.attention_row(big[query], k_labels, title=t("row_title", lang, q=query,
                                                          token=html.escape(repr(q_labels[query])), layer=layer, what=what), lang=lang)
    h, T, _ = maps.shape
    # Sliders get a value back only when it had to change: writing a value the slider already holds could
    # overwrite a newer one typed or arrowed in while this ran.
    asked_layer, asked_head = d["asked"]
    return {"att_grid": Slot(grid), "att_heat": Slot(heat), "att_row": Slot(row),
            "att_summary": Slot(viz.head_summary(*d["stats"], title=t("summary_title", lang, label=label), lang=lang)),
            "att_layer": Slot(layer if asked_layer != layer else KEEP, maximum=max(1, d["n_layers"] - 1)),
            "att_head": Slot(d["head"] if asked_head != d["head"] else KEEP, maximum=max(1, h - 1)),
            "att_query": Slot(query, maximum=max(1, T - 1))}


def caption(d: dict[str, Any], lang: str) -> str:
    if d["too_long"]:
        return t("nothing_yet", lang)
    h, T, S = d["maps"].shape
    note = t("attention_note", lang, layers=d["n_layers"], heads=h, t=T, s=S)
    if d["groups"] > 1:
        note += t("gqa_note", lang, g=d["groups"])
    if d["window"] is not None:
        note += t("window_note", lang, layer=d["layer"], window=d["window"])
    return note


def idle(lang: str, words: str) -> Drawn:
    blank = viz.attention_heatmap(np.zeros((1, 1)), title=t("nothing_yet", lang), lang=lang)
    return {name: Slot(blank) for name in ("att_grid", "att_heat", "att_row", "att_summary")}


VIEW = View("attention", "attention", frozenset({"run", "step", "layer", "head", "query"}),
            ("att_note", "att_grid", "att_heat", "att_row", "att_summary", "att_layer", "att_head", "att_query"),
            compute, draw, caption, idle)

# The kind and view choices follow the model (a model load and the language switch set them).
TAB = Tab(tab="attention", elem_id="attention-tab", section="watch", order=20, view=VIEW, layout=(
    Words("attention_intro", ("attention_intro",), "attention-intro"),
    Row((Widget("att_kind", "radio", "attention_kind", "att-kind", default="self", choices=kind_choices, relabel=False,
                view=True, reads="text", of_model=model_kinds),
         Widget("att_view", "radio", "large_view", "att-view", default="head", relabel=False, view=True, reads="text",
                choices=lambda lang: view_choices(lang, grouped=True), of_model=model_views),
         Widget("att_scale", "radio", "colour_scale", "att-scale", default="linear", choices=scale_choices, view=True,
                reads="text"))),
    Row((Widget("att_layer", "slider", "layer", "att-layer", default=LAYER_START, high_of=last_layer, view=True,
                reads="whole"),
         Widget("att_head", "slider", "head", "att-head", default=0, high_of=last_head, view=True, reads="whole"),
         # the query row counts once moved (else the row follows the selected step)
         Widget("att_query", "slider", "query", "att-query", default=0, view=True, reads="whole", moved=True),
         Widget("att_sink", "checkbox", "hide_sink", "att-sink", default=False, view=True, reads="flag"))),
    Out("att_note", "markdown", "att-note", words="nothing_yet"),
    *(Out(name, "plot", name.replace("_", "-"), visible=True) for name in ("att_grid", "att_heat", "att_row",
                                                                            "att_summary"))))
