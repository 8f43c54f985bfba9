"""Positional encoding: the model's own scheme over the positions shown (and RoPE's relative property on this
run's q and k at the selected step), beside the schemes the tutorials compare."""

from __future__ import annotations

from typing import Any

from playground import analysis, viz
from playground.analysis.positional import positional_data
from playground.app.tab import Out, Row, Tab, Widget, read
from playground.app.view import HIDDEN, Context, Drawn, Selection, Slot, View, shown
from playground.app.words import t
from playground.models.positional import positional_layout
from playground.viz import positional_compare as v_pe


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    lm, run = ctx.lm, ctx.run
    shift = None
    if (lm.config.positional == "rope" and run is not None and run.path and not run.running
            and run.settings.model == ctx.model):
        cache = run.analysis_cache(lm)
        shift = analysis.rope_shift_scores(lm, cache.result, run.step(sel.step), lm.config.n_layers - 1, 0, cache=cache)
    picked = read(TAB.view_widgets(), sel.values)
    length = picked["pe_length"]
    data = positional_data(lm, length, float(picked["pe_base"]))
    pair = None
    if data["scheme"] == "rope":
        pair = int(min(max(picked["pe_pair"], 0), len(data["inv_freq"]) - 1))
    return {"data": data, "schemes": analysis.pe_schemes(lm, length), "shift": shift, "pair": pair,
            "layout": positional_layout(lm.config), "max_positions": lm.config.max_positions}


def draw(d: dict[str, Any], lang: str) -> Drawn:
    data = d["data"]
    scheme = data["scheme"]
    out: Drawn = {f"pe{i}": HIDDEN for i in range(1, 5)}
    out["pe5"] = shown(v_pe.pe_schemes_figure(d["schemes"], lang=lang))
    out["pe_pair"] = HIDDEN
    if scheme == "sinusoidal":
        tab, cmp = data["table"], data["compare_table"]
        out.update(pe1=shown(viz.pe_heatmap(tab, lang=lang)), pe2=shown(viz.pe_waves(tab, lang=lang)),
                   pe3=shown(viz.pe_similarity(tab, lang=lang)),
                   pe4=shown(viz.pe_base_comparison(tab, cmp, t("base_label", lang, base=f"{data['base']:g}"),
                                                    t("base_label", lang,
                                                      base=f"{data['compare_base']:g}"), lang=lang)))
    elif scheme == "rope":
        f = data["inv_freq"]
        out.update(pe1=shown(viz.rope_frequencies(f, context_length=data["context"], lang=lang)),
                   pe2=shown(viz.rope_rotation(f, d["pair"], data["length"],
                                               lang=lang)), pe3=shown(v_pe.rope_base_comparison(data, lang=lang)),
                   pe_pair=Slot(visible=True, maximum=max(1, len(f) - 1)))
        if d["shift"] is not None and d["shift"].get("available"):
            out["pe4"] = shown(v_pe.rope_shift_figure(d["shift"], lang=lang))
    elif scheme == "learned":
        tab = data["table"]
        out.update(pe1=shown(viz.learned_table_heatmap(tab, lang=lang)), pe2=shown(viz.cosine_similarity_matrix(tab,
                                                                                                                lang=lang)))
    elif scheme == "relative":
        out["pe1"] = shown(viz.relative_bias_plot(data["bias"], data["distances"], lang=lang))
    return out


def _rope_layout_text(layout: dict[str, Any], lang: str) -> str:
    """Which dimensions rotate, which layers use no positions, which base each kind of layer uses."""
    parts = []
    if layout.get("pass_through_dims"):
        parts.append(t("pe_partial", lang, rotary=layout["rotary_dims"], head=layout["head_dim"],
                       rest=len(layout["pass_through_dims"])))
    if layout.get("nope_layers"):
        parts.append(t("pe_nope", lang, layers=", ".join(str(i) for i in layout["nope_layers"])))
    tables = layout.get("tables") or {}
    if len(tables) > 1:
        parts.append(t("pe_bases", lang, bases="; ".join(
            f"{name}: {table['base']:g} ({len(table['layers'])} layers)" for name, table in tables.items())))
    return (" " + " ".join(parts)) if parts else ""


def caption(d: dict[str, Any], lang: str) -> str:
    data = d["data"]
    scheme = data["scheme"]
    schemes = "\n\n" + v_pe.pe_schemes_caption(d["schemes"], lang=lang)
    if scheme == "sinusoidal":
        tab = data["table"]
        md = t("pe_sinusoidal", lang, base=f"{data['base']:g}", d=tab.shape[1], other=f"{data['compare_base']:g}")
    elif scheme == "rope":
        md = t("pe_rope", lang, d=data["head_dim"], pairs=len(data["inv_freq"])) + _rope_layout_text(d["layout"], lang)
        md += "\n\n" + v_pe.rope_base_caption(data, lang=lang)
        if d["shift"] is not None and d["shift"].get("available"):
            md += "\n\n" + v_pe.rope_shift_caption(d["shift"], lang=lang)
        else:
            md += "\n\n" + t("pe_shift_needs_run", lang)
    elif scheme == "learned":
        tab = data["table"]
        md = t("pe_learned", lang, shown=tab.shape[0], total=d["max_positions"], d=tab.shape[1])
    elif scheme == "relative":
        md = t("pe_relative", lang, table=data["table_name"])
    else:
        md = data.get("missing") or t("pe_none", lang)
    return md + schemes


def idle(lang: str, words: str) -> Drawn:
    return {"pe_md": Slot()}  # no model yet: the panel waits for the first load


VIEW = View("positional", "positional", frozenset({"model", "step", "controls"}),
            ("pe_md", "pe1", "pe2", "pe3", "pe4", "pe5", "pe_pair"), compute, draw, caption, idle)

TAB = Tab(tab="positional", elem_id="pe-tab", section="inside", order=20, view=VIEW, layout=(
    Out("pe_md", "markdown", "pe-md"),
    Row((Widget("pe_length", "slider", "pe_length", "pe-length", default=64, low=8, high=2048, step=8, view=True,
                reads="count"),
         Widget("pe_base", "number", "pe_base", "pe-base", default=1000, low=2, view=True, reads="real", on="submit"),
         Widget("pe_pair", "slider", "pe_pair", "pe-pair", default=0, low=0, high=31, visible=False, view=True,
                reads="whole"))),
    *(Out(f"pe{i}", "plot", f"pe-plot-{i}", visible=True) for i in range(1, 6))))
