"""The deeper views under the live screen: they follow the selected step, and only the open one is drawn.

Tabs: candidates & beams (the sampler funnel, beam tree and table), all heads of a layer (whole
run, from the engine's whole-sequence attention), the KV cache (growth and a timed rerun without
it), positional encoding, the model card. Figures come from `playground.viz`; numbers from the
engine and `playground.analysis`; nothing here runs the model itself.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
import numpy as np

from playground import analysis, viz
from playground.analysis.positional import positional_data
from playground.app import cache_rerun, describe, serving
from playground.app.run import Run
from playground.app.session import Session, Sessions
from playground.app.words import t
from playground.errors import PlaygroundError
from playground.generation import full_attention
from playground.generation.budget import check_full_attention
from playground.models.positional import positional_layout
from playground.ui.gradio_internals import event_data
from playground.ui.jobs import Followed
from playground.ui.models import Models, one_line, session_key
from playground.viz import positional_compare as v_pe

DEEP_TABS = ("inspector", "attention", "cache", "positional", "lessons", "lab", "card")
DEEP_OUTPUTS = ("caption", "funnel", "beam_tree", "beam_table", "att_note", "att_grid", "att_heat", "att_row",
                "att_summary", "att_layer", "att_head", "att_query", "kv", "growth")
ATTENTION_OUTPUTS = ("att_note", "att_grid", "att_heat", "att_row", "att_summary", "att_layer", "att_head", "att_query")
MAX_MAP_TOKENS = 1200  # whole-run maps beyond this are not drawn (a heatmap of that size is unreadable anyway)
MAX_STATS_TOKENS = 512  # the per-layer head summary holds every layer's maps at once up to this length


def in_session_language(method: Callable) -> Callable:
    """Build a panel's figures in the session's language (the figure builders read `viz.language`)."""

    @functools.wraps(method)
    def wrapper(self, session: Session, *args: Any, **kwargs: Any) -> Any:
        with viz.language(session.lang):
            return method(self, session, *args, **kwargs)

    return wrapper


class Panels:
    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions

    # --- which step, which tab -------------------------------------------------------------------

    def select_step(self, evt: gr.EventData, kind: str, view: str, scale: str, layer: float, head: float,
                    sink: bool, request: gr.Request | None = None) -> tuple:
        """A token was clicked (or ← / →) in the live screen: the open deep view moves to that step."""
        session = self.sessions.get(session_key(request))
        run = session.current  # the step itself came first, by the page's direct call (select_step)
        if run is None or event_data(evt).get("run") != run.token:
            return (gr.skip(),) * len(DEEP_OUTPUTS)
        return self._deep(session, kind, view, scale, layer, head, sink)

    def tab_selected(self, evt: gr.SelectData, kind: str, view: str, scale: str, layer: float, head: float,
                     sink: bool, request: gr.Request | None = None) -> tuple:
        session = self.sessions.get(session_key(request))
        tab = evt.value if isinstance(evt.value, str) else None
        ids = dict(zip((t(f"tab_{k}", lang) for lang in ("en", "zh") for k in DEEP_TABS), DEEP_TABS * 2))
        session.deep_tab = ids.get(tab, DEEP_TABS[evt.index] if isinstance(evt.index, int) and evt.index < len(DEEP_TABS)
                                   else session.deep_tab)
        return self._deep(session, kind, view, scale, layer, head, sink)

    def after_run(self, kind: str, view: str, scale: str, layer: float, head: float, sink: bool,
                  request: gr.Request | None = None) -> tuple:
        """A run ended: the open deep view shows its last step."""
        session = self.sessions.get(session_key(request))
        return self._deep(session, kind, view, scale, layer, head, sink)

    def redraw(self, kind: str, view: str, scale: str, layer: float, head: float, sink: bool,
               request: gr.Request | None = None) -> tuple:
        """The open deep view again, as it is (after the language changed)."""
        return self._deep(self.sessions.get(session_key(request)), kind, view, scale, layer, head, sink)

    def _deep(self, session: Session, kind, view, scale, layer, head, sink) -> tuple:
        out = dict.fromkeys(DEEP_OUTPUTS, gr.skip())
        run = session.current
        if session.deep_tab == "inspector":
            out.update(zip(("caption", "funnel", "beam_tree", "beam_table"), self.inspector(session, run)))
        elif session.deep_tab == "attention":
            out.update(zip(ATTENTION_OUTPUTS, self._attention(session, run, kind, view, scale, layer, head, None, sink)))
        elif session.deep_tab == "cache":
            out.update(zip(("kv", "growth"), self.cache(session, run)))
        return tuple(out[k] for k in DEEP_OUTPUTS)

    # --- candidates and beams ---------------------------------------------------------------------

    @in_session_language
    def inspector(self, session: Session, run: Run | None) -> tuple:
        lang = session.lang
        if run is None or not run.path:
            hidden = gr.update(visible=False)
            return t("nothing_yet", lang), viz.candidate_funnel([]), hidden, hidden
        step = run.step(session.selected_step)
        token = run.path[step]
        funnel = viz.candidate_funnel(describe.funnel_items(token), title=t("funnel_title", lang, step=step + 1))
        if not run.beam:
            hidden = gr.update(visible=False)
            return describe.step_caption(token, lang), funnel, hidden, hidden
        beams = describe.beam_steps(run.events[: step + 1])
        tree = viz.beam_tree(beams, final=run.final.text if run.final is not None else None)
        return (describe.step_caption(token, lang), funnel, gr.update(value=tree, visible=True),
                gr.update(value=viz.beam_table(beams), visible=True))

    # --- all heads ---------------------------------------------------------------------------------

    def attention(self, kind: str, view: str, scale: str, layer: float, head: float, query: float | None,
                  sink: bool, request: gr.Request | None = None) -> tuple:
        """A control of the All-heads tab changed."""
        session = self.sessions.get(session_key(request))
        return self._attention(session, session.current, kind, view, scale, layer, head, query, sink)

    @in_session_language
    def _attention(self, session: Session, run: Run | None, kind: str, view: str, scale: str, layer: float,
                   head: float, query: float | None, sink: bool) -> tuple:
        lang = session.lang
        blank = viz.attention_heatmap(np.zeros((1, 1)), title=t("nothing_yet", lang))
        skip3 = (gr.skip(),) * 3
        if run is None or not run.path:
            return (t("nothing_yet", lang), blank, blank, blank, blank) + skip3
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        c = lm.config
        kinds = ("cross", "self", "encoder") if run.kind == "seq2seq" else ("self",)
        kind = kind if kind in kinds else kinds[0]
        n_layers = c.n_encoder_layers if kind == "encoder" else c.n_layers
        asked = (layer, head)
        layer = int(min(max(layer or 0, 0), n_layers - 1))
        if len(run.prefix_ids) + len(run.path) > MAX_MAP_TOKENS:
            return (t("nothing_yet", lang), blank, blank, blank, blank) + skip3
        try:
            maps = serving.call_job(run.attention_maps, lm, kind, layer, owner=session.key)
        except Exception as exc:  # noqa: BLE001
            return (describe.inert(one_line(exc, lang, "attention")), blank, blank, blank, blank) + skip3
        h, T, S = maps.shape
        head = int(min(max(head or 0, 0), h - 1))
        q_labels, k_labels = run.labels(kind)
        first_q = len(run.prefix_ids) - 1
        if query is None:
            query = first_q + run.step(session.selected_step) if kind != "encoder" else T - 1
        query = int(min(max(query, 0), T - 1))
        groups = c.n_heads // c.n_kv_heads
        label = t(f"kind_{kind}", lang)
        shown = maps
        grid = viz.attention_heads_grid(shown, q_labels, k_labels, title=t("heads_grid_title", lang, label=label, layer=layer),
                                        kv_groups=groups if groups > 1 else 1, scale=scale, hide_first=sink)
        if view == "mean":
            big, what = viz.aggregate_heads(maps, "mean"), t("view_mean", lang)
        elif view == "max":
            big, what = viz.aggregate_heads(maps, "max"), t("view_max", lang)
        elif view == "group" and groups > 1:
            big, what = viz.group_by_kv_head(maps, groups)[head // groups], t("what_group", lang, group=head // groups)
        else:
            big, what = maps[head], t("what_head", lang, head=head)
        heat = viz.attention_heatmap(big, q_labels, k_labels, title=t("heat_title", lang, label=label, layer=layer, what=what),
                                     scale=scale, hide_first=sink, highlight_row=query)
        row = viz.attention_row(big[query], k_labels, title=t("row_title", lang, q=query, token=html.escape(repr(q_labels[query])),
                                                                layer=layer, what=what))
        # every layer where the whole run's maps fit; else this one
        stats = serving.call_job(self._layer_stats, run, lm, kind, owner=session.key)
        if stats is None:
            stats = viz.attention_entropy(maps[None]), viz.mean_attention_distance(maps[None])
        summary = viz.head_summary(*stats, title=t("summary_title", lang, label=label))
        note = t("attention_note", lang, layers=n_layers, heads=h, t=T, s=S) + (
            t("gqa_note", lang, g=groups) if groups > 1 else "")
        if kind != "encoder" and run.kind == "decoder":
            layer_kind = c.layer_kinds()[layer]
            if layer_kind.window is not None:  # this layer's own mask: each query sees its last `window` keys
                note += t("window_note", lang, layer=layer, window=layer_kind.window)
        # Sliders get a value back only when it had to change: writing a value the slider already holds
        # could overwrite a newer one typed or arrowed in while this ran.
        layer_update = gr.update(maximum=max(1, n_layers - 1), **({} if asked[0] == layer else {"value": layer}))
        head_update = gr.update(maximum=max(1, h - 1), **({} if asked[1] == head else {"value": head}))
        return (note, grid, heat, row, summary, layer_update, head_update,
                gr.update(maximum=max(1, T - 1), value=query))

    def _layer_stats(self, run: Run, lm, kind: str) -> tuple[np.ndarray, np.ndarray] | None:
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

    # --- KV cache ----------------------------------------------------------------------------------

    @in_session_language
    def cache(self, session: Session, run: Run | None) -> tuple:
        lang = session.lang
        if run is None or not run.events:
            return t("cache_intro", lang), viz.cache_growth([], [], [], [])
        step = run.step(session.selected_step)
        event = run.events[min(step, len(run.events) - 1)]
        steps, used, allocated, mha = describe.growth_series(run.events)
        return describe.cache_markdown(event.cache, lang), viz.cache_growth(steps, used, allocated, mha)

    def rerun_without_cache(self, request: gr.Request | None = None) -> Iterator[tuple]:
        """The current run's request again with and without the cache, back to back, timed fresh (the
        live run's timings include pacing and painting): a job of bounded slices between the other
        visitors' steps, with its progress here and the page's Stop; long runs are timed in part."""
        session = self.sessions.get(session_key(request))
        lang = session.lang
        run = session.current
        if run is None or run.running:
            yield gr.skip(), t("generate_first", lang)
            return
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        knobs = run.cfg.replace(capture_attention=False, attention_layers=None, top_candidates=0)
        forced = run.stream_ids[: len(run.inherited) + len(run.forced)]
        work = cache_rerun.rerun_work(lm, run.prompt_ids, knobs, forced, len(run.path))
        job = Followed(session, work, lang, "rerun")
        def progress(p) -> str:
            if p.stage == "warmup":
                return t("rerun_warmup", lang)
            return t("rerun_progress", lang, mode=t(f"rerun_mode_{p.stage}", lang), done=p.done, total=p.total,
                     seconds=p.seconds)

        for line in job.lines(progress):
            yield gr.skip(), line
        if job.error or job.result is None:
            yield gr.skip(), job.error or t("rerun_stopped", lang)
            return
        result = job.result
        with viz.language(lang):
            fig = viz.timing_comparison(result.cached, result.uncached)
        note = t("rerun_note", lang, verdict=t("same_tokens" if result.same_tokens else "different_tokens", lang))
        if result.partial:
            note += " " + t("rerun_partial", lang, steps=result.steps, total=result.total_steps,
                            tflops=result.full_uncached_flops / 1e12, seconds=result.full_uncached_seconds)
        yield fig, note

    # --- positional encoding -----------------------------------------------------------------------

    def positional_if_open(self, length: float, compare_base: float, pair: float,
                           request: gr.Request | None = None) -> tuple:
        """A run ended or a tab opened: the PE panel redraws (for the run) when it is the open tab."""
        if self.sessions.get(session_key(request)).deep_tab != "positional":
            return (gr.skip(),) * len(PE_OUTPUTS)
        return self.positional(length, compare_base, pair, request)

    def positional(self, length: float, compare_base: float, pair: float, request: gr.Request | None = None) -> tuple:
        """The PE panel for the model this tab has loaded (nothing before the first successful load)."""
        session = self.sessions.get(session_key(request))
        if not session.model:
            return (gr.skip(),) * len(PE_OUTPUTS)
        try:
            lm = self.models.model_for(session.model, session.dtype, session.key)
            run = session.current
            shift = None
            if lm.config.positional == "rope" and run is not None and run.path and not run.running \
                    and run.settings.model == session.model:
                cache = serving.call_job(run.analysis_cache, lm, owner=session.key)
                result = cache.result
                step = run.step(session.selected_step)
                shift = serving.call_job(analysis.rope_shift_scores, lm, result, step, lm.config.n_layers - 1, 0,
                                         cache=cache, owner=session.key)
            return positional_outputs(lm, int(length or 64), float(compare_base or 1000.0), pair, session.lang, shift)
        except Exception as exc:  # noqa: BLE001
            return (describe.inert(one_line(exc, session.lang, "positional")),) + (gr.skip(),) * (len(PE_OUTPUTS) - 1)


PE_OUTPUTS = ("pe_md", "pe1", "pe2", "pe3", "pe4", "pe5", "pe_pair")


def _rope_layout_text(lm, lang: str) -> str:
    """Which dimensions rotate, which layers use no positions, which base each kind of layer uses."""
    layout = positional_layout(lm.config)
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


def positional_outputs(lm, length: int, compare_base: float, pair: float | None, lang: str = "en",
                       shift: dict | None = None) -> tuple:
    """(markdown, 5 figures, pair slider) for the model's own positional scheme, every plot over the
    positions shown; the last figure compares the schemes the seeds compare, this model's highlighted."""
    with viz.language(lang):
        return serving.call_job(_positional_outputs, lm, length, compare_base, pair, lang, shift)


def _positional_outputs(lm, length: int, compare_base: float, pair: float | None, lang: str,
                        shift: dict | None) -> tuple:
    data = positional_data(lm, length, compare_base)
    scheme = data["scheme"]
    hidden = gr.update(visible=False)

    def show(fig: Any) -> dict:
        return gr.update(value=fig, visible=True)

    schemes = analysis.pe_schemes(lm, length)
    compare = show(v_pe.pe_schemes_figure(schemes))
    caption = "\n\n" + v_pe.pe_schemes_caption(schemes)
    if scheme == "sinusoidal":
        tab, cmp = data["table"], data["compare_table"]
        md = t("pe_sinusoidal", lang, base=f"{data['base']:g}", d=tab.shape[1], other=f"{data['compare_base']:g}")
        return (md + caption, show(viz.pe_heatmap(tab)), show(viz.pe_waves(tab)), show(viz.pe_similarity(tab)),
                show(viz.pe_base_comparison(tab, cmp, t("base_label", lang, base=f"{data['base']:g}"),
                                                t("base_label", lang, base=f"{data['compare_base']:g}"))),
                compare, gr.update(visible=False))
    if scheme == "rope":
        f = data["inv_freq"]
        pair = int(min(max(pair or 0, 0), len(f) - 1))
        md = t("pe_rope", lang, d=data["head_dim"], pairs=len(f)) + _rope_layout_text(lm, lang)
        md += "\n\n" + v_pe.rope_base_caption(data)
        shift_fig = hidden
        if shift is not None and shift.get("available"):
            shift_fig = show(v_pe.rope_shift_figure(shift))
            md += "\n\n" + v_pe.rope_shift_caption(shift)
        else:
            md += "\n\n" + t("pe_shift_needs_run", lang)
        return (md + caption, show(viz.rope_frequencies(f, context_length=data["context"])),
                show(viz.rope_rotation(f, pair, data["length"])), show(v_pe.rope_base_comparison(data)), shift_fig,
                compare, gr.update(visible=True, maximum=max(1, len(f) - 1)))
    if scheme == "learned":
        tab = data["table"]
        md = t("pe_learned", lang, shown=tab.shape[0], total=lm.config.max_positions, d=tab.shape[1])
        return (md + caption, show(viz.learned_table_heatmap(tab)), show(viz.cosine_similarity_matrix(tab)), hidden,
                hidden, compare, gr.update(visible=False))
    if scheme == "relative":
        md = t("pe_relative", lang, table=data["table_name"])
        return (md + caption, show(viz.relative_bias_plot(data["bias"], data["distances"])), hidden, hidden, hidden,
                compare, gr.update(visible=False))
    md = data.get("missing") or t("pe_none", lang)
    return (md + caption, hidden, hidden, hidden, hidden, compare, gr.update(visible=False))
