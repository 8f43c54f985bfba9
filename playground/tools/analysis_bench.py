"""Benchmark: does every analysis stay interactive when the selected step changes?

    python -m playground.tools.analysis_bench [--model weights/SmolLM2-135M-Instruct] [--new-tokens 512]
                                        [--steps 8] [--threads 2] [--json out.json]

Records one run (greedy, `capture_residual=True`, exactly `--new-tokens` tokens), opens every analysis
once (the first open of the step-following analyses makes the run's one whole-sequence pass), then
changes the selected step several times and times, per analysis, what a step change recomputes:
the data, the figure(s), the caption and the figure's JSON (what the page receives). Prints median and
max per analysis. The target: under 1 s per step change on SmolLM2 with a 512-token run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from playground.analysis import (
    RunCache,
    anatomy,
    attention_patterns,
    attention_steps,
    kv_what_if,
    logit_lens,
    logit_lens_ranks,
    own_pattern_weights,
    pe_schemes,
    positional_data,
    presets,
    residual_norms,
    rope_shift_scores,
    run_lesson,
    strip_steps,
    training_view,
)
from playground.analysis.logit_lens import STRIP_FLOPS
from playground.generation import GenerationConfig, GenerationResult, generate_all
from playground.loaded import LoadedModel
from playground.viz import anatomy as v_anatomy
from playground.viz import attention_steps as v_steps
from playground.viz import kv_lesson as v_kv
from playground.viz import logit_lens as v_lens
from playground.viz import patterns as v_patterns
from playground.viz import positional_compare as v_pe
from playground.viz import training as v_train

DEFAULT_MODEL = "weights/SmolLM2-135M-Instruct"
PROMPT = "Explain, step by step and in plain words, how a transformer language model turns a prompt into text."


def record_run(lm: LoadedModel, new_tokens: int = 512, prompt: str = PROMPT) -> GenerationResult:
    """A greedy run of exactly `new_tokens` tokens (end-of-text ignored) with the residual stream recorded."""
    quiet = dataclasses.replace(lm, config=dataclasses.replace(lm.config, eos_token_id=None))
    cfg = GenerationConfig(max_new_tokens=new_tokens, capture_residual=True, top_candidates=5,
                           chat=lm.chat_template_available)
    return generate_all(quiet, prompt if lm.tokenizer is not None else [1, 2, 3], cfg)


def _json(*figures) -> None:
    for fig in figures:
        fig.to_json()  # what Gradio sends to the page


def step_views(lm: LoadedModel, result: GenerationResult, cache: RunCache, layer: int, head: int
               ) -> dict[str, Callable[[int], None]]:
    """What each step-following analysis recomputes when the selected step changes."""
    kind = "self"

    def steps(step: int) -> None:
        s = attention_steps(lm, result, step, layer, head, kind, cache=cache)
        _json(v_steps.attention_steps_figure(s), v_steps.heads_concat_figure(s))
        v_steps.attention_steps_caption(s)

    def lens(step: int) -> None:
        entries = logit_lens(lm, result, step, cache=cache)
        strip = logit_lens_ranks(lm, result, strip_steps(len(result.token_ids), step), cache=cache, around=step,
                                 max_flops=STRIP_FLOPS)
        _json(v_lens.logit_lens_figure(entries, step),
              v_lens.lens_rank_strip(strip["ranks"], strip["layer_names"], strip["steps"], strip["token_texts"], step))
        v_lens.logit_lens_caption(entries, step, result.path[step].token_text)

    def lesson(step: int) -> None:
        data = run_lesson(lm, result, step)
        _json(v_kv.kv_cost_chart(data["costs"]), v_kv.prefill_decode_figure(data["shapes"]))
        v_kv.kv_cost_caption(data["costs"]), v_kv.prefill_decode_caption(data["shapes"])

    def memory(step: int) -> None:
        name, preset = next(iter(presets(lm).items()))
        live = result.steps[step].cache
        w = kv_what_if(preset, tokens=live["tokens"], live=live)
        _json(v_kv.kv_memory_chart(w, name))
        v_kv.kv_memory_caption(w)

    def rope(step: int) -> None:
        shift = rope_shift_scores(lm, result, step, layer, head, cache=cache)
        if shift["available"]:
            _json(v_pe.rope_shift_figure(shift))
        v_pe.rope_shift_caption(shift)

    def residual(step: int) -> None:
        norms = residual_norms(result)
        _json(v_anatomy.residual_norm_figure(norms, step))

    views = {"attention step by step": steps, "logit lens + rank strip": lens, "KV-cache lesson": lesson,
             "KV memory what-if": memory, "residual norms": residual}
    if lm.config.positional == "rope":
        views["RoPE shift property"] = rope
    return views


def static_views(lm: LoadedModel, result: GenerationResult, cache: RunCache, layer: int, head: int
                 ) -> dict[str, Callable[[], None]]:
    """Analyses that do not follow the step (computed once when opened)."""

    def anat() -> None:
        _json(v_anatomy.anatomy_figure(anatomy(lm)))

    def positional() -> None:
        data = positional_data(lm, 512, 1000.0)
        schemes = pe_schemes(lm, 128)
        figs = [v_pe.pe_schemes_figure(schemes)]
        if data["scheme"] == "rope":
            figs.append(v_pe.rope_base_comparison(data))
        _json(*figs)

    def patterns() -> None:
        gallery = attention_patterns(lm, 64)
        own = own_pattern_weights(lm, result, layer, head, cache=cache)
        _json(v_patterns.pattern_gallery_figure(gallery), v_patterns.own_weights_figure(own))

    def training() -> None:
        _json(v_train.training_figure(training_view(lm)))

    return {"anatomy": anat, "positional encodings": positional, "attention patterns (+ real weights)": patterns,
            "training view": training}


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench(lm: LoadedModel, result: GenerationResult, *, steps: list[int] | None = None, layer: int | None = None,
          head: int = 0) -> dict[str, Any]:
    """Seconds per analysis: first open (cold: the whole-sequence pass, the first lens rows) and every
    later step change (warm), plus the step-independent analyses once."""
    n = len(result.token_ids)
    layer = lm.config.n_layers // 2 if layer is None else layer
    if steps is None:  # jumps across the run and small moves, as a person clicking around would
        steps = sorted({0, 1, n // 4, n // 2, n // 2 + 1, 3 * n // 4, n - 2, n - 1} & set(range(n)))
    cache = RunCache(lm, result)
    views = step_views(lm, result, cache, layer, head)
    first = steps[0]
    cold = {name: _timed(lambda fn=fn: fn(first)) for name, fn in views.items()}
    warm = {name: [_timed(lambda fn=fn, s=s: fn(s)) for s in steps[1:]] for name, fn in views.items()}
    once = {name: _timed(fn) for name, fn in static_views(lm, result, cache, layer, head).items()}
    # A layer change: free inside the chunk of layers one pass recorded, one more pass outside it.
    held = cache.held_layers
    outside = next((i for i in range(lm.config.n_layers) if i not in held), None)
    layer_change = {"same pass": _timed(lambda: attention_steps(lm, result, steps[-1], held[0], head, cache=cache))}
    if outside is not None:
        layer_change["new pass"] = _timed(lambda: attention_steps(lm, result, steps[-1], outside, head, cache=cache))
    return {"tokens": n, "prompt_tokens": len(result.prompt_ids), "steps": steps, "layer": layer, "head": head,
            "cold_s": cold, "step_change_s": warm, "static_s": once, "layer_change_s": layer_change,
            "layers_per_pass": len(held), "threads": torch.get_num_threads()}


def report(data: dict[str, Any]) -> str:
    lines = [f"run: {data['prompt_tokens']} prompt + {data['tokens']} generated tokens; layer {data['layer']}, "
             f"head {data['head']}; steps {data['steps']}; {data['threads']} threads",
             "", f"{'analysis (per step change)':<34} {'median s':>9} {'max s':>7} {'first open s':>13}"]
    for name, times in data["step_change_s"].items():
        lines.append(f"{name:<34} {statistics.median(times):>9.3f} {max(times):>7.3f} {data['cold_s'][name]:>13.3f}")
    lines += ["", f"{'analysis (opened once)':<34} {'s':>9}"]
    lines += [f"{name:<34} {s:>9.3f}" for name, s in data["static_s"].items()]
    lines += ["", f"layer change (attention data only; one pass records {data['layers_per_pass']} layers):"]
    lines += [f"  {name:<32} {s:>9.3f}" for name, s in data["layer_change_s"].items()]
    worst = max(max(t) for t in data["step_change_s"].values())
    lines += ["", f"slowest step change: {worst:.3f} s ({'under' if worst < 1 else 'OVER'} the 1 s target)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.tools.analysis_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8, help="step changes to time (spread over the run)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from playground.checkpoints.loader import load_model

    lm = load_model(args.model)
    t0 = time.perf_counter()
    result = record_run(lm, args.new_tokens)
    print(f"recorded {len(result.token_ids)} tokens in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    n = len(result.token_ids)
    picks = sorted({round(i * (n - 1) / max(1, args.steps)) for i in range(args.steps + 1)} | {1, n // 2 + 1})
    data = bench(lm, result, steps=[s for s in picks if 0 <= s < n])
    print(report(data))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
