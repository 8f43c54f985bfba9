"""The causal lab's numbers and words: what an edit changed against the run it forked from (divergence), why a
token won (direct logit attribution), the head sweep, a steering vector from a contrast pair and a patch from
another prompt. The experiment itself (its fork, settings and view) is `playground.app.experiments.causal`; the
lessons read `why` too. No Gradio, no threads: callers run the model work on the torch thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from playground.analysis.attribution import Attribution, attribute_step
from playground.analysis.divergence import Divergence, HeadSweep, divergence_of_runs, iter_sweep_step, sweep_step
from playground.analysis.kv_lesson import linear_flops_per_token
from playground.analysis.steering import SteeringVector, contrast_vector, residual_after
from playground.app.describe import inert
from playground.app.fields import parse_edits
from playground.app.jobs import Progress
from playground.app.notes import note, render
from playground.app.run import Run
from playground.app.words import t
from playground.errors import PlaygroundError
from playground.interventions import Ablate, Intervention, Patch, Steer
from playground.notes import Note
from playground.steps import step_number

SWEEP_FLOPS = 2e12  # a head sweep's work per request: SmolLM2-135M with a 650-token sequence stays under it
PASS_FLOPS = 1e11  # one pass the lab runs for a text a visitor typed (a steering text): SmolLM2, 341 tokens


class LabError(PlaygroundError):
    """A lab request the page cannot run; its first argument is a keyed note saying what to do."""


def describe(iv: Intervention) -> Note:
    """One edit in words (the library's own `describe()` is English only)."""
    if isinstance(iv, Ablate):
        what = note("ablate_mlp", layer=iv.layer) if iv.component == "mlp" else note("ablate_head", layer=iv.layer,
                                                                                     head=iv.head)
        return note("ablate_mean", what=what) if iv.mode == "mean" else what
    if isinstance(iv, Steer):
        return note("steer_edit", layer=iv.layer, scale=iv.scale, norm=iv.norm)
    return note("patch_edit", layer=iv.layer, position=iv.position)


def describe_edits(text: str, lang: str) -> str:
    """The edits of an `edits` setting in words, joined ('' for none or unreadable text)."""
    try:
        edits = parse_edits(text)
    except ValueError:
        return ""
    return "; ".join(render(describe(iv), lang) for iv in edits)


def reads(run: Run, step: int, lang: str) -> str:
    """Which run and step a lab result reads ("In run 2 (ablate head 23.4), step 6:"): a visitor keeps several
    runs side by side, and an edited run answers differently from its original."""
    return reads_words(run.number, run.settings.edits, run.step_number(step), lang)


def reads_words(number: int, edits: str, step_no: int, lang: str) -> str:
    """`reads` from the run's number, its `edits` setting and the step as the run counts it (`Run.step_number`)."""
    edit = describe_edits(edits, lang)
    return t("lab_reads_edited" if edit else "lab_reads", lang, n=number, edit=edit, step=step_no)


def as_result(run: Run) -> Any:
    """The run as the analyses take it, with the edits it ran under (as clamped for the model)."""
    result = run.as_result()
    result.interventions = [iv.to_dict() for iv in run.cfg.interventions]
    return result


def divergence_of(lm: Any, original: Run, edited: Run) -> Divergence:
    """Per step, how the edited run's model departs from the original's along the original's tokens."""
    return divergence_of_runs(lm, as_result(original), as_result(edited))


def step_summary(div: Divergence, step: int, token_text: str, lang: str) -> str:
    """One paragraph: the numbers of `step` (an index into the plain original's path, which is no branch, so
    `step_number` reads it as every screen does), and where the texts part."""
    lines = []
    if step < len(div.kl):
        lines.append(t("lab_step", lang, step=step_number(step), token=token_text, p0=float(div.original_prob[step]),
                       p=float(div.prob[step]), rank=int(div.rank[step]) + 1, kl=float(div.kl[step])))
    else:
        lines.append(t("lab_step_beyond", lang, step=step_number(step)))
    if div.first_difference is None:
        lines.append(t("lab_same_text", lang))
    else:
        lines.append(t("lab_parted", lang, step=step_number(div.first_difference)))
    return ("" if lang == "zh" else " ").join(lines)


def why(lm: Any, run: Run, step: int, versus: bool) -> Attribution:
    """Direct logit attribution of the token `run` chose at `step` (under its edits), or of its lead over
    the runner-up."""
    return attribute_step(lm, as_result(run), step, versus="runner-up" if versus else None)


def key_head(attribution: Attribution) -> tuple[int, int]:
    """The head that matters most for the token: the self-attention head that adds the most to its logit (the
    largest direct attribution), as (layer, head). Switching it off is the edit most likely to move the answer."""
    layer, head = divmod(int(attribution.heads.argmax()), attribution.heads.shape[1])
    return layer, head


def pass_flops(lm: Any, positions: int) -> float:
    """Floating-point operations of one pass over `positions` tokens: every weight matrix and the head
    per token, and attention's Q·Kᵀ and weights·V over every (query, key) pair (the T² term)."""
    c = lm.config
    lin = linear_flops_per_token(c)
    return float(positions * (lin["layers"] + lin["head"]) + 4 * c.n_heads * c.head_dim * c.n_layers * positions ** 2)


def sweep_cost(lm: Any, run: Run, step: int) -> float:
    """Floating-point operations of a head sweep at `step`: one pass over the sequence per head, plus one."""
    positions = len(run.prefix_ids) + step  # the prefix holds a branch's inherited and forced tokens
    return pass_flops(lm, positions) * (lm.config.n_heads + 1)


def sweep(lm: Any, run: Run, step: int, layer: int,
          progress: Callable[[int, int], bool | None] | None = None, cap: float = SWEEP_FLOPS) -> HeadSweep:
    """Ablate each head of `layer` alone at `step` of `run` (under its edits); refused over `cap`.
    `progress(done, total)` returning False stops it (the heads not reached come last, not run)."""
    _check_sweep(lm, run, step, cap)
    return sweep_step(lm, as_result(run), step, layer, progress=progress)


def sweep_work(lm: Any, run: Run, step: int, layer: int, stop: threading.Event,
               cap: float = SWEEP_FLOPS) -> Iterator[Progress | HeadSweep]:
    """The sweep as a job (`playground.app.jobs`): one pass per slice, Progress after each, then the
    HeadSweep; once `stop` is set, the HeadSweep of the heads done so far (the rest NaN, last)."""
    _check_sweep(lm, run, step, cap)
    passes = iter_sweep_step(lm, as_result(run), step, layer)
    item = next(passes)
    while not isinstance(item, HeadSweep):
        yield Progress("heads", *item)
        item = passes.send(False if stop.is_set() else None)
    yield item


def _check_sweep(lm: Any, run: Run, step: int, cap: float) -> None:
    need = sweep_cost(lm, run, step)
    if need > cap:
        raise LabError(note("lab_sweep_budget", need=need, cap=cap))


def steer_tokens(lm: Any) -> int:
    """The most tokens one text of a contrast pair may hold: one pass over it within `PASS_FLOPS`."""
    low, high = 1, max(1, lm.config.max_positions)
    while low < high:  # pass_flops grows with the length: the longest that fits
        mid = (low + high + 1) // 2
        low, high = (mid, high) if pass_flops(lm, mid) <= PASS_FLOPS else (low, mid - 1)
    return low


def contrast(lm: Any, positive: str, negative: str, layer: int) -> SteeringVector:
    """The contrast-pair vector after block `layer`: mean residual of `positive` minus that of `negative`.
    Each text is one pass of the model: refused, with the limit, over `steer_tokens` tokens."""
    if not positive.strip() or not negative.strip():
        raise LabError(note("lab_steer_empty"))
    limit = steer_tokens(lm)
    for text in (positive, negative):
        if len(text) > 16 * limit or len(lm.tokenize(text)) > limit:  # a token holds a few characters at most
            raise LabError(note("lab_steer_long", n=limit))
    return contrast_vector(lm, positive, negative, layer)


def vector_summary(vector: SteeringVector, scale: float) -> Note:
    return note("lab_vector", layer=vector.layer, norm=vector.norm, typical=vector.typical_norm, scale=scale,
             push=abs(scale) * vector.relative)


def patch_from_prompt(lm: Any, run: Run, other: str, layer: int, position: int) -> Patch:
    """Activation patching: the residual stream after block `layer` at `position` of the `other` prompt
    (tokenized as the run's own, its chat template included), to put in the same place of `run`'s prompt
    (`position` -1: the first position where the two prompts differ, or the last if they do not). The
    two prompts must be the same number of tokens so that their positions line up (e.g. "… of France is" and
    "… of Italy is"). One pass over the other prompt, refused over `steer_tokens` tokens."""
    if lm.kind == "seq2seq":
        raise LabError(note("lab_patch_seq2seq"))
    if not other.strip():
        raise LabError(note("lab_patch_empty"))
    limit = steer_tokens(lm)
    if len(other) > 16 * limit:
        raise LabError(note("lab_steer_long", n=limit))
    ids = lm.tokenize(other, chat=bool(run.settings.chat and lm.chat_template_available))
    n = len(run.prompt_ids)
    if len(ids) > limit:
        raise LabError(note("lab_steer_long", n=limit))
    if len(ids) != n:
        raise LabError(note("lab_patch_length", run=n, other=len(ids)))
    if not 0 <= layer < lm.config.n_layers:
        raise LabError(note("lab_patch_layer_bad", last=lm.config.n_layers - 1))
    if position < 0:  # where the prompts first differ (the place that carries the difference), else the last
        position = next((i for i, (a, b) in enumerate(zip(run.prompt_ids, ids)) if a != b), n - 1)
    if position >= n:
        raise LabError(note("lab_patch_position_bad", last=n - 1))
    return Patch(layer, position, residual_after(lm, ids, layer)[position])


def patch_summary(lm: Any, run: Run, patch: Patch, other: str) -> Note:
    """What the patch puts where, in words (the token of each prompt at the patched position, shown as typed)."""
    ids = lm.tokenize(other, chat=bool(run.settings.chat and lm.chat_template_available))
    return note("lab_patch_done", layer=patch.layer, position=patch.position,
                token=inert(lm.token_text(run.prompt_ids[patch.position])), other=inert(lm.token_text(ids[patch.position])))
