"""The KV-cache lab in the app: fork a run under a cache policy (eviction, sinks, heavy hitters, a quantised
cache) and see what it saves and what it changes.

A policy run is a run of the same prompt and settings whose KV settings (`UISettings.kv_window` …) ask for a
cache of its own: it streams like any run, sits beside the plain run in the live screen's branches, and its
link replays the plain run first (`lab.link_runs`). This module decides the settings of a fork, finds the plain
run a policy run is compared with, and measures the pair (bytes held per step, the divergence, the sink mass).
No Gradio, no threads: callers run the model work on the torch thread.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from playground.analysis.kv_policies import iter_divergence_along, iter_sink_mass, sink_mass
from playground.app.run import Run
from playground.app.settings import KV_DTYPES, UISettings, has_kv_policy, rope_dict, without_kv
from playground.app.words import t
from playground.errors import PlaygroundError
from playground.generation.config import GenerationConfig
from playground.generation.engine import drain
from playground.steps import step_number

if TYPE_CHECKING:
    from playground.app.session import Session

SINK_STEPS = 16  # the sink mass averages this many greedy steps of the prompt (every layer's softmax recorded)
_MEASURED: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()  # (run, plain run) -> its numbers
_KEEP = 32


class KVLabError(PlaygroundError):
    """A fork the page cannot run; the message (in the visitor's language) says what to do."""


def policy_words(settings: UISettings, lang: str) -> str:
    """The policy of `settings` in the visitor's words ("window 16 + 4 sinks"; '' for the plain cache)."""
    words = []
    if settings.kv_dtype:
        words.append(t("kvlab_policy_quant", lang, dtype=settings.kv_dtype))
    if settings.kv_window:
        words.append(t("kvlab_policy_window", lang, n=settings.kv_window)
                     + (t("kvlab_policy_sink", lang, n=settings.kv_sink) if settings.kv_sink else "")
                     + (t("kvlab_policy_heavy", lang, n=settings.kv_heavy) if settings.kv_heavy else ""))
    if settings.rope_scaling:
        kind, _, factor = settings.rope_scaling.partition(":")
        words.append(t("kvlab_policy_scaled", lang, kind=kind, factor=factor))
    return " · ".join(words)


def fork_settings(session: Session, run: Run, window: int, sink: int, heavy: int, dtype: str, lang: str,
                  rope: str = "") -> UISettings:
    """The settings of `run` (its seed, no branches) under the chosen cache policy and RoPE scaling; refused for
    neither."""
    window, sink, heavy = (max(0, int(v or 0)) for v in (window, sink, heavy))
    dtype = dtype if dtype in KV_DTYPES else ""
    try:
        rope = rope if rope and rope_dict(rope) else ""
    except ValueError:
        rope = ""
    if dtype and window:
        raise KVLabError(t("kvlab_both", lang))
    if not dtype and not window and not rope:
        raise KVLabError(t("kvlab_choose", lang))
    base = session.run_settings(run)
    return dataclasses.replace(base, branches="", lang=lang, kv_window=window, kv_sink=sink if window else 0,
                               kv_heavy=heavy if window else 0, kv_dtype=dtype, rope_scaling=rope)


def plain_among(runs: Sequence[Run], run: Run) -> Run | None:
    """The newest finished run of the same request with the plain cache that the policy run `run` is compared
    with (a sampled run: the same seed), among a session's runs, oldest first."""
    want = dataclasses.replace(without_kv(run.settings), branches="", lang="en", pace_ms=0, seed=None)
    for other in reversed(runs):
        if other is run or other.running or not other.path or other.branch_of is not None:
            continue
        if has_kv_policy(other.settings) or other.prompt_ids != run.prompt_ids:
            continue
        if run.mode == "sample" and other.cfg.seed != run.cfg.seed:
            continue
        if dataclasses.replace(other.settings, branches="", lang="en", pace_ms=0, seed=None) == want:
            return other
    return None


def _bare(cfg: GenerationConfig) -> GenerationConfig:
    """A run's config without what it recorded (the same tokens, nothing captured)."""
    return cfg.replace(capture_attention=False, attention_layers=None, capture_residual=False, top_candidates=0)


def bytes_series(run: Run) -> dict[str, list[int]]:
    """Per step (numbered as on the page): the KV bytes the run's cache held, and what the plain cache holds at
    that length (a policy cache reports both; a plain run's are the same)."""
    rows = [(e.step, e.cache) for e in run.events if e.cache]
    return {"steps": [step_number(s) for s, _ in rows], "held": [int(c.get("bytes", 0)) for _, c in rows],
            "plain": [int(c.get("plain_bytes", c.get("bytes", 0))) for _, c in rows],
            "kept": [int(c.get("kept_positions", c.get("tokens", 0))) for _, c in rows]}


def sink_of(lm: Any, run: Run) -> np.ndarray:
    """(layers, heads): the attention weight on the first position, averaged over up to `SINK_STEPS` greedy
    steps of the run's prompt with the plain cache (why evicting the first tokens hurts)."""
    return sink_mass(lm, list(run.prompt_ids), sink_config(run))


def sink_config(run: Run) -> GenerationConfig:
    """The greedy steps of `run`'s prompt over which the sink mass is averaged."""
    return GenerationConfig(max_new_tokens=max(1, min(SINK_STEPS, len(run.path))), chat=False, use_cache=True)


def measure(lm: Any, run: Run, plain: Run | None) -> dict[str, Any]:
    """The lab's numbers for `run` (and the plain run it is compared with): bytes per step of each, the divergence
    along the plain run's tokens, and the sink mass; remembered per pair (runs never change once finished)."""
    return drain(measure_slices(lm, run, plain))


def measure_slices(lm: Any, run: Run, plain: Run | None) -> Generator[None, None, dict[str, Any]]:
    """`measure` one forward pass per `next()`: a job's slices, so that other visitors run in between."""
    key = (run.token, plain.token if plain is not None else "")
    if key in _MEASURED:
        _MEASURED.move_to_end(key)
        return _MEASURED[key]
    sink = yield from iter_sink_mass(lm, list(run.prompt_ids), sink_config(run))
    out: dict[str, Any] = {"bytes": bytes_series(run), "sink": sink.tolist(), "div": None}
    if plain is not None and has_kv_policy(run.settings) and lm.kind == "decoder":
        tokens = [s.token_id for s in plain.path]
        div = yield from iter_divergence_along(lm, list(run.prompt_ids), _bare(plain.cfg), _bare(run.cfg), tokens,
                               [s.token_id for s in run.path])
        out["div"] = div.to_dict()
        out["plain_bytes"] = bytes_series(plain)
    _MEASURED[key] = out
    while len(_MEASURED) > _KEEP:
        _MEASURED.popitem(last=False)
    return out
