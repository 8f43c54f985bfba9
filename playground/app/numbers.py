"""Numbers that cannot be right say so: a note for a step whose activations or probabilities are broken.

A checkpoint can load and run and still compute nothing: weights scaled so far that the residual
stream's squares overflow float32 (every norm is then infinite, the normalised vector zero, and every
token equally likely), or weights that make a logit NaN. The run still shows what came out; this note
says why it means nothing. No Gradio, no torch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from playground.app.notes import note
from playground.notes import Note
from playground.steps import step_number

# sqrt of float32's largest value (3.4e38): a norm over values beyond it overflows, even in a model
# that computes norms in float32 from bfloat16 activations.
OVERFLOW = 1.8e19


def _flat(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    try:
        return np.asarray(value, dtype=np.float64).ravel()
    except (TypeError, ValueError):  # a structure that is not one array (nothing to judge)
        return None


def numbers_note(event: Any, vocab_size: int, deterministic: bool) -> Note | None:
    """The keyed note for `event` (a StepEvent) when its numbers cannot be right, else None.

    Checked, in order: a non-finite residual, logit or probability; a residual beyond `OVERFLOW`; every
    token equally likely (the top candidates all at 1/vocabulary, or without candidates, a deterministic
    step that chose a token of probability 1/vocabulary: the largest probability is then the smallest).
    """
    step = step_number(getattr(event, "step", 0))
    residual = _flat(getattr(event, "residual", None))
    candidates = list(getattr(event, "candidates", None) or [])
    numbers = [float(getattr(c, "logit", 0.0)) for c in candidates] + [float(getattr(c, "prob_raw", 0.0))
                                                                          for c in candidates]
    numbers.append(float(getattr(event, "prob", 0.0)))
    if (residual is not None and not np.isfinite(residual).all()) or not all(math.isfinite(x) for x in numbers):
        return note("numbers_nonfinite", step=step)
    if residual is not None and residual.size and float(np.abs(residual).max()) > OVERFLOW:
        return note("numbers_overflow", step=step, peak=float(np.abs(residual).max()))
    if vocab_size < 2:
        return None
    uniform = 1.0 / vocab_size
    if len(candidates) >= 2:
        probs = [float(c.prob_raw) for c in candidates]
    elif deterministic:
        probs = [float(getattr(event, "prob", 0.0))]
    else:
        return None
    if all(math.isclose(p, uniform, rel_tol=1e-3) for p in probs):
        return note("numbers_uniform", step=step, n=vocab_size)
    return None
