"""The lessons on a run, as a registry: for each, what it needs, how it computes, draws and captions.

Each lesson is an analysis in `playground.analysis` (pure functions over a recorded run) drawn by its
figure builder in `playground.viz`. `show` picks the lesson, checks what it needs, and returns the
caption, the figures and the state of the lesson's controls as plain data; the page's adapter turns
that into widget updates. No Gradio here; `show` runs the model's numbers, so call it on the torch
thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from playground import analysis
from playground.app import batch_lesson, lab, noise
from playground.app.run import Run
from playground.app.words import t
from playground.viz import anatomy as v_anatomy
from playground.viz import attention_steps as v_steps
from playground.viz import causal as v_causal
from playground.viz import kv_lesson as v_kv
from playground.viz import logit_lens as v_lens
from playground.viz import patterns as v_patterns
from playground.viz import sdpa as v_sdpa
from playground.viz import training as v_train


@dataclass(frozen=True)
class Inputs:
    """What the lesson's controls hold (already whole numbers where they are counts)."""

    layer: int = 0
    head: int = 0
    kind: str = "self"
    preset: str = ""
    attention: str = ""
    dtype: str = ""
    batch: int = 1
    tokens: int = 0


@dataclass(frozen=True)
class Context:
    """What a lesson computes from: the model, the finished run (if any) at the selected step."""

    lm: Any
    lang: str = "en"
    run: Run | None = None
    step: int | None = None
    result: Any = None  # the run as a GenerationResult (analysis' input)
    cache: Any = None  # the run's shared whole-sequence pass
    sdpa: dict[str, Any] | None = None  # the session's SDPA measurement of this model, when taken

    @property
    def before(self) -> int:
        """The tokens the run continues after (a branch's): its figures and captions count steps after them."""
        return self.run.steps_before if self.run is not None else 0


@dataclass
class Controls:
    """The lesson's controls, as data: the adapter makes widget updates of them."""

    layer_max: int = 1
    head_max: int = 1
    layer_head: bool = False  # layer and head sliders shown
    kinds: list[str] = field(default_factory=lambda: ["self"])
    kind_shown: bool = False
    presets: list[tuple[str, str]] | None = None  # the KV calculator's (label, preset); None: leave it as it is
    preset: str | None = None


@dataclass
class Shown:
    caption: str
    figures: list[Any] = field(default_factory=list)
    controls: Controls = field(default_factory=Controls)


@dataclass(frozen=True)
class Lesson:
    name: str
    needs_run: bool  # a finished run to read
    follows_step: bool  # recomputed when the selected step changes
    compute: Callable[[Context, Inputs], Any]
    draw: Callable[[Any, Context], list[Any]]  # its figures, in ctx.lang, steps counted after ctx.before
    caption: Callable[[Any, Context], str]
    layer_head: bool = False  # offers the layer and head sliders
    kind: bool = False  # offers the attention-kind choice (seq2seq models)


def _kinds(lm: Any) -> list[str]:
    return ["cross", "self", "encoder"] if lm.kind == "seq2seq" else ["self"]


def _steps(ctx: Context, i: Inputs) -> Any:
    return analysis.attention_steps(ctx.lm, ctx.result, ctx.step, i.layer, i.head, i.kind, cache=ctx.cache)


def _lens(ctx: Context, i: Inputs) -> dict[str, Any] | None:
    result, step = ctx.result, ctx.step
    if result.path[step].capture.residual is None:  # a drafted run, or one whose arrays the memory budget freed
        return None
    entries = analysis.logit_lens(ctx.lm, result, step, cache=ctx.cache)
    strip = analysis.logit_lens_ranks(ctx.lm, result, analysis.strip_steps(len(result.token_ids), step),
                                      cache=ctx.cache, around=step, max_flops=analysis.STRIP_FLOPS)
    return {"entries": entries, "strip": strip, "step": step, "text": result.path[step].token_text}


def _lens_figures(d: dict[str, Any] | None, ctx: Context) -> list[Any]:
    if d is None:
        return []
    s = d["strip"]
    return [v_lens.logit_lens_figure(d["entries"], d["step"], lang=ctx.lang, before=ctx.before),
            v_lens.lens_rank_strip(s["ranks"], s["layer_names"], s["steps"], s["token_texts"], d["step"],
                                   lang=ctx.lang, before=ctx.before)]


def _kv(ctx: Context, i: Inputs) -> dict[str, Any]:
    return {**analysis.run_lesson(ctx.lm, ctx.result, ctx.step), "timing": ctx.run.results.get("time_cache")}


def _kv_caption(d: dict[str, Any], ctx: Context) -> str:
    caption = (v_kv.kv_cost_caption(d["costs"], lang=ctx.lang, before=ctx.before) + "\n\n"
               + v_kv.prefill_decode_caption(d["shapes"], lang=ctx.lang))
    if d["timing"] is not None:
        caption += "\n\n" + cache_timing_words(d["timing"], ctx.lang)
    return caption


def cache_timing_words(timing: dict[str, Any], lang: str) -> str:
    """The KV lesson's timing in words, then whether its decode times differ beyond the noise of its repeats and
    whether the machine was busy."""
    c, u = timing["cached"]["decode_ms"], timing["uncached"]["decode_ms"]
    return (v_kv.cache_timing_caption(timing, lang=lang) + ("" if lang == "zh" else " ")
            + noise.verdict(c, u, timing.get("load"), lang))


def sdpa_words(data: dict[str, Any], lang: str) -> str:
    """The SDPA measurement in words, then the lengths where the two paths' ranges overlap (inside the noise) and
    whether the machine was busy."""
    n = int(data["repeats"])
    within = [str(r["length"]) for r in data["rows"]
              if noise.overlap({"min": r["sdpa_ms_min"], "max": r["sdpa_ms_max"]},
                               {"min": r["explicit_ms_min"], "max": r["explicit_ms_max"]})]
    words = t("sdpa_noise_overlap", lang, n=n, lengths=", ".join(within)) if within else t("noise_clear", lang, n=n)
    return v_sdpa.sdpa_caption(data, lang=lang) + "\n\n" + words + noise.busy_words(data.get("load"), lang)


def _memory(ctx: Context, i: Inputs) -> dict[str, Any]:
    options = analysis.presets(ctx.lm)
    name = i.preset if i.preset in options else next(iter(options))
    live = ctx.result.steps[ctx.step].cache if ctx.result is not None else None
    what_if = analysis.kv_what_if(options[name], attention=i.attention or None, dtype=i.dtype or None,
                                  batch=i.batch or None, tokens=i.tokens or None, live=live)
    labels = [preset_label(key, ctx.lm if i == 0 else None, ctx.lang) for i, key in enumerate(options)]
    return {"what_if": what_if, "name": name, "presets": list(zip(labels, options)),
            "label": labels[list(options).index(name)]}


# The KV calculator's worked examples (analysis.WORKED_EXAMPLES' names) -> their words.
_PRESET_WORDS = {"LLaMA 3 8B as MHA, 8k tokens": "preset_llama3_8b_mha",
                 "LLaMA 3 70B, GQA-8, 8k tokens": "preset_llama3_70b_gqa8"}


def preset_label(name: str, lm: Any, lang: str) -> str:
    """What the preset dropdown shows for the preset `name` (`lm`: the loaded model, for its own preset)."""
    if lm is not None and name.startswith("this model"):
        return t("preset_this_model", lang, family=lm.config.family, millions=lm.parameter_count / 1e6)
    return t(_PRESET_WORDS[name], lang) if name in _PRESET_WORDS else name


def _patterns(ctx: Context, i: Inputs) -> dict[str, Any]:
    own = analysis.own_pattern_weights(ctx.lm, ctx.result, i.layer, i.head, "encoder" if i.kind == "encoder" else "self",
                                       cache=ctx.cache)
    return {"gallery": analysis.attention_patterns(ctx.lm, 32), "own": own}


def _anatomy(ctx: Context, i: Inputs) -> dict[str, Any]:
    result, step = ctx.result, ctx.step
    recorded = result is not None and result.path[step].capture.residual is not None
    return {"parts": analysis.anatomy(ctx.lm), "norms": analysis.residual_norms(result) if recorded else None,
            "step": step}


def _anatomy_figures(d: dict[str, Any], ctx: Context) -> list[Any]:
    figures = [v_anatomy.anatomy_figure(d["parts"], lang=ctx.lang)]
    if d["norms"] is not None:
        figures.append(v_anatomy.residual_norm_figure(d["norms"], d["step"], lang=ctx.lang, before=ctx.before))
    return figures


def _anatomy_caption(d: dict[str, Any], ctx: Context) -> str:
    if d["norms"] is None:
        return t("lesson_anatomy", ctx.lang)
    return v_anatomy.residual_norm_caption(d["parts"], d["norms"], d["step"], lang=ctx.lang, before=ctx.before)


def _sdpa(ctx: Context, i: Inputs) -> dict[str, Any] | None:
    return ctx.sdpa


def _lab(ctx: Context, i: Inputs) -> dict[str, Any] | None:
    """Why the selected token won (direct logit attribution under the run's own edits), once there is a run."""
    if ctx.step is None:
        return None
    return {"data": lab.why(ctx.lm, ctx.run, ctx.step, versus=False).to_dict(), "token": ctx.run.path[ctx.step].token_text}


def _lab_caption(d: dict[str, Any] | None, ctx: Context) -> str:
    """The walk through one ablation and one steering (measured on SmolLM2), then this run's own why."""
    text = t("lesson_lab_text", ctx.lang)
    if d is None:
        return text + "\n\n" + t("lab_needs_run", ctx.lang)
    return text + "\n\n" + v_causal.attribution_caption(d["data"], d["token"], lang=ctx.lang)


LESSONS: dict[str, Lesson] = {lesson.name: lesson for lesson in (
    Lesson("steps", True, True, _steps,
           lambda s, ctx: [v_steps.attention_steps_figure(s, lang=ctx.lang, before=ctx.before),
                           v_steps.heads_concat_figure(s, lang=ctx.lang)],
           lambda s, ctx: v_steps.attention_steps_caption(s, lang=ctx.lang, before=ctx.before), layer_head=True,
           kind=True),
    Lesson("lens", True, True, _lens, _lens_figures,
           lambda d, ctx: t("lesson_lens_no_residual", ctx.lang) if d is None else v_lens.logit_lens_caption(
               d["entries"], d["step"], d["text"], lang=ctx.lang, before=ctx.before)),
    Lesson("kv", True, True, _kv,
           lambda d, ctx: [v_kv.kv_cost_chart(d["costs"], lang=ctx.lang),
                           v_kv.prefill_decode_figure(d["shapes"], lang=ctx.lang, before=ctx.before)],
           _kv_caption),
    Lesson("memory", True, True, _memory, lambda d, ctx: [v_kv.kv_memory_chart(d["what_if"], d["label"],
                                                                               lang=ctx.lang)],
           lambda d, ctx: v_kv.kv_memory_caption(d["what_if"], lang=ctx.lang)),
    Lesson("patterns", True, False, _patterns,
           lambda d, ctx: [v_patterns.pattern_gallery_figure(d["gallery"], lang=ctx.lang),
                           v_patterns.own_weights_figure(d["own"], lang=ctx.lang)],
           lambda d, ctx: v_patterns.pattern_gallery_caption(d["gallery"], lang=ctx.lang) + "\n\n"
           + v_patterns.own_weights_caption(d["own"], lang=ctx.lang), layer_head=True),
    Lesson("sdpa", False, False, _sdpa, lambda d, ctx: [] if d is None else [v_sdpa.sdpa_figure(d, lang=ctx.lang)],
           lambda d, ctx: t("lesson_sdpa_press", ctx.lang) if d is None else sdpa_words(d, ctx.lang)),
    Lesson("anatomy", True, True, _anatomy, _anatomy_figures, _anatomy_caption),
    Lesson("training", False, False, lambda ctx, i: analysis.training_view(ctx.lm),
           lambda v, ctx: [v_train.training_figure(v, lang=ctx.lang)] if v.get("available") else [],
           lambda v, ctx: v_train.training_caption(v, lang=ctx.lang)),
    Lesson("lab", False, True, _lab,
           lambda d, ctx: [] if d is None else [v_causal.attribution_figure(d["data"], d["token"], lang=ctx.lang)],
           _lab_caption),
    Lesson("serving", False, True, lambda c, i: batch_lesson.compute(c.run, c.step),
           lambda d, ctx: batch_lesson.figures(d, ctx.lang), lambda d, ctx: batch_lesson.caption(d, ctx.lang)),
)}


def waiting(name: str, run: Run | None, lang: str) -> str | None:
    """Why the lesson cannot be shown yet (one line), or None when it can."""
    lesson = LESSONS.get(name, LESSONS["steps"])
    if lesson.needs_run and (run is None or not run.path):
        return t("lesson_needs_run", lang)
    if lesson.needs_run and run.running:
        return t("lesson_after_run", lang)
    return None


@dataclass
class Computed:
    """A lesson's numbers at the selected step, before they are drawn."""

    lesson: Lesson
    data: Any
    ctx: Context
    controls: Controls


def compute(name: str, lm: Any, run: Run | None, selected_step: int | None, inputs: Inputs, lang: str = "en",
            sdpa: dict[str, Any] | None = None) -> Computed:
    """The lesson `name`'s numbers on `run` at the selected step, its inputs clamped to the model (model work:
    call it on the torch thread)."""
    lesson = LESSONS.get(name, LESSONS["steps"])
    step = result = cache = None
    if run is not None and run.path and not run.running:
        step = run.step(selected_step)
        cache = run.analysis_cache(lm)
        result = cache.result
    c = lm.config
    kinds = _kinds(lm)
    kind = inputs.kind if inputs.kind in kinds else kinds[0]
    n_layers = c.n_encoder_layers if kind == "encoder" else c.n_layers
    heads = c.encoder_config().n_heads if kind == "encoder" else c.n_heads
    inputs = Inputs(min(max(inputs.layer, 0), n_layers - 1), min(max(inputs.head, 0), heads - 1), kind,
                    inputs.preset, inputs.attention, inputs.dtype, inputs.batch, inputs.tokens)
    controls = Controls(layer_max=max(1, n_layers - 1), head_max=max(1, heads - 1), layer_head=lesson.layer_head,
                        kinds=kinds, kind_shown=lesson.kind and len(kinds) > 1)
    ctx = Context(lm, lang, run, step, result, cache, sdpa)
    data = lesson.compute(ctx, inputs)
    if lesson.name == "memory":
        controls.presets, controls.preset = data["presets"], data["name"]
    return Computed(lesson, data, ctx, controls)


def draw(computed: Computed) -> Shown:
    """The caption, figures and controls of a computed lesson, in its visitor's language."""
    ctx = computed.ctx
    return Shown(computed.lesson.caption(computed.data, ctx), computed.lesson.draw(computed.data, ctx),
                 computed.controls)


def show(name: str, lm: Any, run: Run | None, selected_step: int | None, inputs: Inputs, lang: str = "en",
         sdpa: dict[str, Any] | None = None) -> Shown:
    """The lesson `name` on `run` at the selected step: caption, figures and its controls' state."""
    return draw(compute(name, lm, run, selected_step, inputs, lang, sdpa))
