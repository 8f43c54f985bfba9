"""Plotly figures and HTML for the playground: pure functions of numpy arrays and plain dicts.

No torch and no Gradio here; callers convert tensors with `.detach().cpu().numpy()`.
Every builder and caption takes the language as an argument (`lang="zh"`; English by default): every word it
writes itself (titles, axes, legends, colour bars, hovers, annotations, table headers, captions) is drawn in that
language, from the locale files. A builder that numbers a run's steps takes the tokens a branch continues after as
`before` (`playground.steps`). Titles passed in by the caller are drawn as given.
"""

from playground.viz._language import LANGUAGES
from playground.viz.attention import attention_heads_grid, attention_heatmap, attention_row, head_summary
from playground.viz.attention_stats import (
    aggregate_heads,
    attention_entropy,
    group_by_kv_head,
    mean_attention_distance,
)
from playground.viz.cache import cache_growth, format_bytes, kv_formula, timing_comparison
from playground.viz.causal import attribution_caption, attribution_figure, divergence_figure, head_sweep_figure
from playground.viz.positional import (
    cosine_similarity,
    cosine_similarity_matrix,
    learned_table_heatmap,
    pe_base_comparison,
    pe_heatmap,
    pe_similarity,
    pe_waves,
    relative_bias_plot,
    rope_frequencies,
    rope_relative_scores,
    rope_rotation,
    rope_score_curve,
)
from playground.viz.sampling import beam_table, beam_tree, candidate_funnel

__all__ = [
    "LANGUAGES",
    "aggregate_heads",
    "attention_entropy",
    "attention_heads_grid",
    "attention_heatmap",
    "attention_row",
    "attribution_caption",
    "attribution_figure",
    "beam_table",
    "beam_tree",
    "cache_growth",
    "candidate_funnel",
    "cosine_similarity",
    "cosine_similarity_matrix",
    "divergence_figure",
    "format_bytes",
    "group_by_kv_head",
    "head_summary",
    "head_sweep_figure",
    "kv_formula",
    "learned_table_heatmap",
    "mean_attention_distance",
    "pe_base_comparison",
    "pe_heatmap",
    "pe_similarity",
    "pe_waves",
    "relative_bias_plot",
    "rope_frequencies",
    "rope_relative_scores",
    "rope_rotation",
    "rope_score_curve",
    "timing_comparison",
]
