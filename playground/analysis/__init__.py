"""Pure functions over a recorded run and the loaded model: what the seeds teach, computed for real.

Each analysis returns plain data (numpy arrays, dicts); its figure builders and captions live in
`playground.viz` (one module per analysis, its words in the locale files, drawn in the language it is asked).
Keep one `RunCache` per run and pass it as `cache=` so a step change reuses the one whole-sequence pass.

    attention_steps(lm, result, step, layer, head, kind="self")   Q·Kᵀ → scale → mask → softmax → ·V → W_O
    logit_lens(lm, result, step, top_k=5), logit_lens_ranks(...)   every layer's next-token guess
    kv_step_costs, prefill_decode_shapes, run_lesson, time_cache   the KV-cache lesson
    kv_memory(layers, batch, kv_heads, tokens, head_dim, s), kv_what_if, presets
    positional_data, rope_shift_scores, pe_schemes                 positional encodings
    attention_patterns, own_pattern_weights                        attention masks and their cost
    sdpa_vs_explicit                                               fused SDPA vs the explicit softmax
    anatomy, residual_norms                                        the model as a diagram; pre- vs post-LN
    training_view                                                  the stored recipe and loss curves
    attribute, attribute_step                                      why this token: direct logit attribution
    divergence, divergence_of_runs, head_sweep, sweep_step         what an edit (playground.interventions) changed
    contrast_vector, token_vector, run_vector, mean_ablation       steering vectors and mean activations
"""

from playground.analysis.anatomy import anatomy, residual_norms
from playground.analysis.attention_steps import attention_matrix, attention_steps
from playground.analysis.attribution import Attribution, attribute, attribute_step
from playground.analysis.divergence import Divergence, HeadSweep, divergence, divergence_of_runs, head_sweep, sweep_step
from playground.analysis.kv_lesson import kv_step_costs, prefill_decode_shapes, run_lesson, time_cache
from playground.analysis.kv_memory import kv_memory, kv_what_if, presets
from playground.analysis.logit_lens import (
    STRIP_FLOPS,
    STRIP_STEPS,
    lens_logits,
    logit_lens,
    logit_lens_ranks,
    strip_steps,
)
from playground.analysis.patterns import attention_patterns, own_pattern_weights
from playground.analysis.positional import pe_schemes, positional_data, rope_shift_scores
from playground.analysis.recorded import RunCache
from playground.analysis.sdpa import sdpa_vs_explicit
from playground.analysis.steering import SteeringVector, contrast_vector, mean_ablation, run_vector, token_vector
from playground.analysis.training import training_view

# What a run must record for every analysis: GenerationConfig(**RUN_FLAGS). Only the logit lens, its rank
# strip and the residual norms need it; the rest read the run's tokens and cache stats, or make their own
# whole-sequence pass (attention internals) through `RunCache`.
RUN_FLAGS = {"capture_residual": True}

__all__ = [
    "Attribution", "Divergence", "HeadSweep", "SteeringVector", "attribute", "attribute_step", "contrast_vector",
    "divergence", "divergence_of_runs", "head_sweep", "mean_ablation", "run_vector", "sweep_step", "token_vector",
    "RUN_FLAGS", "STRIP_FLOPS", "STRIP_STEPS", "RunCache", "anatomy", "attention_matrix", "attention_patterns",
    "attention_steps", "kv_memory", "kv_step_costs", "kv_what_if", "lens_logits", "logit_lens", "logit_lens_ranks",
    "own_pattern_weights", "pe_schemes", "positional_data", "prefill_decode_shapes", "presets", "residual_norms",
    "rope_shift_scores", "run_lesson", "sdpa_vs_explicit", "strip_steps", "time_cache", "training_view",
]
