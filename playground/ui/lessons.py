"""The Lessons tab: the seeds' lessons drawn from the current run, following the selected step.

Each lesson is an analysis in `playground.analysis` (pure functions over a recorded run) drawn by
its figure builder in `playground.viz`. One `RunCache` per run keeps the whole-sequence pass the
step-following lessons share, so a step change recomputes only that step's numbers. Nothing here
runs the model itself.
"""

from __future__ import annotations

import html
from typing import Any

import gradio as gr

from playground import analysis, viz
from playground.app import torch_thread
from playground.app.run import Run
from playground.app.session import Session, Sessions
from playground.app.words import t
from playground.ui.lab import lab_lesson
from playground.ui.layout import LESSONS
from playground.ui.models import Models, one_line, session_key
from playground.viz import anatomy as v_anatomy
from playground.viz import attention_steps as v_steps
from playground.viz import kv_lesson as v_kv
from playground.viz import logit_lens as v_lens
from playground.viz import patterns as v_patterns
from playground.viz import sdpa as v_sdpa
from playground.viz import training as v_train

STEP_FOLLOWING = ("steps", "lens", "kv", "memory", "anatomy")
OUTPUTS = ("lesson_md", "lesson_plot1", "lesson_plot2", "lesson_layer", "lesson_head", "lesson_kind", "lesson_preset",
           "memory_row", "time_cache", "measure_sdpa")


class Lessons:
    def __init__(self, models: Models, sessions: Sessions) -> None:
        self.models = models
        self.sessions = sessions

    def pick(self, lesson: str, layer: float, head: float, kind: str, preset: str, attention: str, dtype: str,
             batch: float, tokens: float, request: gr.Request | None = None) -> tuple:
        """A lesson was picked above the deep views: open the Lessons tab on it."""
        session = self.sessions.get(session_key(request))
        session.lesson = lesson if lesson in LESSONS else "steps"
        session.deep_tab = "lessons"
        return (gr.update(selected="lessons"), *self.draw(session, layer, head, kind, preset, attention, dtype, batch,
                                                         tokens))

    def redraw(self, layer: float, head: float, kind: str, preset: str, attention: str, dtype: str, batch: float,
               tokens: float, request: gr.Request | None = None) -> tuple:
        session = self.sessions.get(session_key(request))
        if session.deep_tab != "lessons":
            return (gr.skip(),) * len(OUTPUTS)
        return self.draw(session, layer, head, kind, preset, attention, dtype, batch, tokens)

    def draw(self, session: Session, layer: float, head: float, kind: str, preset: str, attention: str, dtype: str,
             batch: float, tokens: float) -> tuple:
        """(caption, figure, figure, layer, head, kind, preset) for the session's lesson and selected step."""
        lang = session.lang
        lesson = session.lesson
        run = session.current
        out: dict[str, Any] = dict.fromkeys(OUTPUTS, gr.skip())
        hidden = gr.update(visible=False)
        out["lesson_plot1"], out["lesson_plot2"] = hidden, hidden
        if not session.model:
            out["lesson_md"] = t("nothing_yet", lang)
            return tuple(out[k] for k in OUTPUTS)
        lm = self.models.model_for(session.model, session.dtype, session.key)
        needs_run = lesson in STEP_FOLLOWING or lesson == "patterns"
        if needs_run and (run is None or not run.path):
            out["lesson_md"] = t("lesson_needs_run", lang)
            return tuple(out[k] for k in OUTPUTS)
        if needs_run and run.running:
            out["lesson_md"] = t("lesson_after_run", lang)
            return tuple(out[k] for k in OUTPUTS)
        try:
            with viz.language(lang):  # the figures and captions speak the visitor's language
                caption, figures, controls = self._lesson(lesson, lm, run, session, int(layer or 0), int(head or 0),
                                                          kind, preset, attention, dtype, int(batch or 1),
                                                          int(tokens or 0))
        except Exception as exc:  # noqa: BLE001 - one line where the lesson would be
            out["lesson_md"] = html.escape(one_line(exc, lang, f"lesson {lesson}"))
            return tuple(out[k] for k in OUTPUTS)
        out["lesson_md"] = caption
        for key, fig in zip(("lesson_plot1", "lesson_plot2"), figures):
            out[key] = gr.update(value=fig, visible=True)
        out.update(controls)
        out["memory_row"] = gr.update(visible=lesson == "memory")
        out["time_cache"] = gr.update(visible=lesson == "kv")
        out["measure_sdpa"] = gr.update(visible=lesson == "sdpa")
        return tuple(out[k] for k in OUTPUTS)

    @torch_thread.runs_on_torch_thread
    def _lesson(self, lesson: str, lm, run: Run | None, session: Session, layer: int, head: int, kind: str,
                preset: str, attention: str, dtype: str, batch: int, tokens: int):
        c = lm.config
        step = None
        result = cache = None
        if run is not None and run.path and not run.running:
            step = run.step(session.selected_step)
            cache = run.analysis_cache(lm)
            result = cache.result
        kinds = ["cross", "self", "encoder"] if lm.kind == "seq2seq" else ["self"]
        kind = kind if kind in kinds else kinds[0]
        n_layers = c.n_encoder_layers if kind == "encoder" else c.n_layers
        heads = c.encoder_config().n_heads if kind == "encoder" else c.n_heads
        layer, head = min(max(layer, 0), n_layers - 1), min(max(head, 0), heads - 1)
        controls = {"lesson_layer": gr.update(maximum=max(1, n_layers - 1), visible=lesson in ("steps", "patterns")),
                    "lesson_head": gr.update(maximum=max(1, heads - 1), visible=lesson in ("steps", "patterns")),
                    "lesson_kind": gr.update(choices=[(t(f"kind_{k}", session.lang), k) for k in kinds],
                                             visible=lesson == "steps" and len(kinds) > 1)}
        if lesson == "steps":
            s = analysis.attention_steps(lm, result, step, layer, head, kind, cache=cache)
            return (v_steps.attention_steps_caption(s), [v_steps.attention_steps_figure(s), v_steps.heads_concat_figure(s)],
                    controls)
        if lesson == "lens":
            entries = analysis.logit_lens(lm, result, step, cache=cache)
            strip = analysis.logit_lens_ranks(lm, result, analysis.strip_steps(len(result.token_ids), step), cache=cache,
                                              around=step, max_flops=analysis.STRIP_FLOPS)
            return (v_lens.logit_lens_caption(entries, step, result.path[step].token_text),
                    [v_lens.logit_lens_figure(entries, step),
                     v_lens.lens_rank_strip(strip["ranks"], strip["layer_names"], strip["steps"], strip["token_texts"],
                                            step)], controls)
        if lesson == "kv":
            data = analysis.run_lesson(lm, result, step)
            caption = v_kv.kv_cost_caption(data["costs"]) + "\n\n" + v_kv.prefill_decode_caption(data["shapes"])
            if run.cache_timing is not None:
                caption += "\n\n" + v_kv.cache_timing_caption(run.cache_timing)
            return caption, [v_kv.kv_cost_chart(data["costs"]), v_kv.prefill_decode_figure(data["shapes"])], controls
        if lesson == "memory":
            options = analysis.presets(lm)
            name = preset if preset in options else next(iter(options))
            live = result.steps[step].cache if result is not None else None
            what_if = analysis.kv_what_if(options[name], attention=attention or None, dtype=dtype or None,
                                          batch=batch or None, tokens=tokens or None, live=live)
            controls["lesson_preset"] = gr.update(choices=list(options), value=name)
            return v_kv.kv_memory_caption(what_if), [v_kv.kv_memory_chart(what_if, name)], controls
        if lesson == "patterns":
            gallery = analysis.attention_patterns(lm, 32)
            own = analysis.own_pattern_weights(lm, result, layer, head, "encoder" if kind == "encoder" else "self",
                                               cache=cache)
            caption = v_patterns.pattern_gallery_caption(gallery) + "\n\n" + v_patterns.own_weights_caption(own)
            return caption, [v_patterns.pattern_gallery_figure(gallery), v_patterns.own_weights_figure(own)], controls
        if lesson == "sdpa":
            data = session.sdpa if session.sdpa is not None and session.sdpa.get("model") == session.model else None
            if data is None:
                return t("lesson_sdpa_press", session.lang), [], controls
            return v_sdpa.sdpa_caption(data), [v_sdpa.sdpa_figure(data)], controls
        if lesson == "anatomy":
            parts = analysis.anatomy(lm)
            figures = [v_anatomy.anatomy_figure(parts)]
            caption = ""
            if result is not None and result.path[step].capture.residual is not None:
                norms = analysis.residual_norms(result)
                figures.append(v_anatomy.residual_norm_figure(norms, step))
                caption = v_anatomy.residual_norm_caption(parts, norms, step)
            return caption or t("lesson_anatomy", session.lang), figures, controls
        if lesson == "lab":
            caption, figures = lab_lesson(lm, run, step, session.lang)
            return caption, figures, controls
        view = analysis.training_view(lm)
        return v_train.training_caption(view), [v_train.training_figure(view)] if view.get("available") else [], controls

    # --- measured on demand ------------------------------------------------------------------------

    def time_cache(self, request: gr.Request | None = None) -> str:
        """Time the current run's request with and without the cache (warm-up, repeats, medians)."""
        session = self.sessions.get(session_key(request))
        run = session.current
        if run is None or run.running or not run.path:
            return t("generate_first", session.lang)
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        run.cache_timing = torch_thread.call(analysis.time_cache, lm, run.prompt_ids,
                                             max_new_tokens=min(48, max(8, len(run.path))))
        with viz.language(session.lang):
            return v_kv.cache_timing_caption(run.cache_timing)

    def measure_sdpa(self, request: gr.Request | None = None) -> str:
        session = self.sessions.get(session_key(request))
        if not session.model:
            return t("nothing_yet", session.lang)
        lm = self.models.model_for(session.model, session.dtype, session.key)
        data = analysis.sdpa_vs_explicit(lm)
        session.sdpa = {**data, "model": session.model}
        with viz.language(session.lang):
            return v_sdpa.sdpa_caption(data)
