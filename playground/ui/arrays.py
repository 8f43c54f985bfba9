"""Numbers the panels plot, taken from a loaded model as numpy arrays (torch in, numpy out).

- `attention_budget_tokens`: how long a sequence's captured attention maps may be. No Gradio here.

`positional_data` moved to `playground.analysis.positional` (the UI computes nothing); it is
re-exported here only so the current positional panel keeps working until the page calls
`playground.analysis` directly.
"""

from __future__ import annotations

import math

from playground.analysis.positional import positional_data  # noqa: F401  (re-export, see above)
from playground.loaded import LoadedModel

ATTENTION_BUDGET_BYTES = 96 * 2**20  # all captured maps of one run, float32


def attention_budget_tokens(lm: LoadedModel) -> int:
    """The longest sequence whose full attention maps (all layers and heads) fit the budget."""
    c = lm.config
    maps = c.n_layers * c.n_heads  # layer-heads of T × T maps (the encoder's may have their own head count)
    if lm.kind == "seq2seq":
        maps += 2 * c.n_encoder_layers * c.n_encoder_heads
    return max(8, int(math.sqrt(ATTENTION_BUDGET_BYTES / (4 * max(1, maps)))))
