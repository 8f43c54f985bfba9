"""What the live screen receives: a run turned into small JSON-ready values, one per frame. No Gradio.

The page's own script draws the token stream and the step panels from these values, so a frame
carries numbers, never HTML or figures. A frame appends; it never sends the run again:

    live_value(run, view, meta, lang)          # the whole run: its first frame, a language switch, a page
                                               # that lost a frame (it asks for this value)
    live_frame(run, view, meta, lang, start)   # the path entries from `start` on, and the latest state

- `head` (in the whole value only): the tokens before the run's own, as long as its prompt and its lineage
  (the prompt, the tokens a branch took over, the ones placed by hand, a seq2seq decoder's start).
- `from` and `path`: the page keeps the entries it holds before `from`, drops the others (beam search may
  rewrite the end of its sequence) and appends `path` (each entry a `compact_step`).
- the run's latest state, each part small: what it is (number, mode, the model's shape), its status, the
  cache, the newest step's attention row for the view on screen (`att`), the beams.
- `branches` (the lineage panel, whose texts grow with the runs): in the whole value and in a run's last
  frame; in between, the page extends the current run's row with the new tokens itself.

`path` and `att` travel as JSON texts (`entries` and `attention` read them back): Gradio sends a changed
text whole, where it would compare two lists number by number and send one edit for each. Each entry
travels once, so neither a frame's size nor the page's work for it grows with the text (Gradio hands the
component each new value whole, and the browser copied, compared and re-serialised a value that held the
whole run at every frame). The newest step's attention row is the one part as long as the text: one
weight per token it looked at. Everything else is asked for when a panel needs it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from playground.generation import StepEvent, TokenStep

if TYPE_CHECKING:  # a run is built from frames' pieces: these are only named here
    from playground.app.run import Run
    from playground.app.session import LiveView, Session

ROUND = 4  # significant digits of the probabilities and weights sent to the page

# Frames: one visitor gets at most ~12 a second, however fast tokens arrive. A crowd shares the
# server's time for them (each frame is serialized and diffed on the web server's one event loop,
# beside the model's work on the same cores), so each visitor's frames are spaced by the crowd's size.
FRAME_SECONDS = 0.08
SERVER_FRAMES_PER_SECOND = 24
MAX_FRAME_SECONDS = 0.5


def frame_seconds(active_runs: int) -> float:
    """The least time between two frames of one run while `active_runs` runs are being served."""
    return min(MAX_FRAME_SECONDS, max(FRAME_SECONDS, active_runs / SERVER_FRAMES_PER_SECOND))


def _r(x: float) -> float:
    if not math.isfinite(x) or x == 0.0:
        return 0.0 if not math.isfinite(x) else x
    return float(f"{x:.{ROUND}g}")


def stage_names(events: Sequence[StepEvent]) -> list[str]:
    """The sampler stages this run applied, in order ("raw" first), from its first candidates."""
    for event in events:
        if event.candidates:
            return list(event.candidates[0].stages)
    return ["raw"]


def compact_step(step: TokenStep, cache: dict[str, Any], stages: list[str], spec: str = "") -> list[Any]:
    """[text, id, prob, candidates, [cached tokens, bytes]] for one token of the displayed sequence, and for a
    drafted run's token what speculative decoding made of it ("accepted", "rejected" or "bonus") last.

    candidates: [text, id, [prob after each stage], index of the stage that removed it or -1, chosen].
    """
    cands = []
    for c in step.candidates or []:
        removed = stages.index(c.removed_by) if c.removed_by in stages else -1
        cands.append([c.text, c.token_id, [_r(c.stages.get(s, 0.0)) for s in stages], removed, int(c.chosen)])
    held = int(cache.get("kept_positions", cache.get("tokens", 0)))  # a cache that evicts holds fewer than it saw
    entry = [step.token_text, step.token_id, _r(step.prob), cands, [held, int(cache.get("bytes", 0))]]
    return entry + [spec] if spec else entry


def head_choices(heads: int, kv_heads: int) -> list[str]:
    """The head selections that mean something for this model: each head, mean, max, and KV groups
    only where query heads share K/V (GQA, MQA)."""
    choices = ["mean", "max"] + [str(i) for i in range(heads)]
    if kv_heads < heads:
        choices += [f"group:{g}" for g in range(kv_heads)]
    return choices


def reduce_heads(weights: np.ndarray, head: str, kv_heads: int) -> np.ndarray:
    """weights (h, ...) -> (...): one head, the mean or max over heads, or the mean of one KV group."""
    h = weights.shape[0]
    if head == "mean":
        return weights.mean(axis=0)
    if head == "max":
        return weights.max(axis=0)
    if head.startswith("group:"):
        group, size = int(head.split(":")[1]), h // kv_heads
        return weights[group * size : (group + 1) * size].mean(axis=0)
    return weights[int(head)]


def resolve_layer(layer: int, n_layers: int) -> int:
    return n_layers - 1 if layer < 0 or layer >= n_layers else layer


def recorded_row(step: TokenStep, kind: str, layer: int) -> np.ndarray | None:
    """(h, S) attention row recorded while choosing this token, if that layer was recorded."""
    rows = step.capture.attention
    if not rows or kind not in rows or layer >= len(rows[kind]):
        return None
    return rows[kind][layer]


def rounded(values: np.ndarray) -> list[float]:
    return [_r(float(v)) for v in values]


def status(run: Run, model_name: str) -> dict[str, Any]:
    last = run.events[-1] if run.events else None
    timing = dict(last.timing) if last else {}
    return {
        "state": "running" if run.running else ("error" if run.error else ("stopped" if run.finish_reason == "stopped" else "done")),
        "reason": run.finish_reason, "n": len(run.path), "error": run.error, "model": model_name,
        "tokens_per_s": timing.get("tokens_per_s"), "prefill_ms": timing.get("prefill_ms"),
        "decode_ms": timing.get("decode_ms_per_token"), "run": run.number,
        "branch_of": list(run.branch_of) if run.branch_of else None, "seed": run.cfg.seed,
        "forced": len(run.forced),
    }


def run_head(run: Run) -> dict[str, Any]:
    """The tokens the run's own come after, as long as its prompt and lineage: sent once (module docstring)."""
    head: dict[str, Any] = {
        "prompt": [[t, i] for t, i in zip(run.prompt_texts, run.prompt_ids)],
        "opening": run.opening,  # the chat template's tokens before the typed text (a switch hides them)
        "inherited": run.inherited,  # a branch: the tokens taken over, then the ones placed by hand
        "forced_tokens": [[text, i] for text, i in zip(run.forced_texts, run.forced)],
    }
    if run.kind == "seq2seq":
        start = run.prefix_ids[: len(run.prefix_ids) - len(run.inherited) - len(run.forced)]
        head["decoder_start"] = [[text, i] for text, i in zip(run.prefix_texts, start)]
    return head


def live_frame(
    run: Run,
    view: LiveView,
    meta: dict[str, Any],
    lang: str,
    start: int,
    branches: list[dict[str, Any]] | None = None,
    selected: int | None = None,
) -> dict[str, Any]:
    """The run's path entries from `start` on and its latest state (see the module docstring).

    meta: the model's shape for the panels ({"layers", "heads", "kv_heads", "kind", "name"}).
    The entries are made from `start` on only (`run.compact_from`), so a frame never rebuilds the old ones.
    `branches`: the lineage panel, when this frame carries it.
    selected: the step the screen opens the run at (a fork keeps the step on screen); None: the newest.
    """
    last = run.events[-1] if run.events else None
    frame: dict[str, Any] = {
        "run": run.token, "number": run.number, "lang": lang, "kind": run.kind, "mode": run.mode,
        "model": meta, "stages": stage_names(run.events),
        "prefix": len(run.prefix_ids) - (len(run.prompt_ids) if run.kind == "decoder" else 0),
        "forced": len(run.forced),
        "view": {"kind": view.kind, "layer": view.layer, "head": view.head},  # the session's, for the script
        "selected": selected,
        "first_step": run.step_number(0),  # the step number of path[0] (a branch continues its parent's count)
        "from": start, "path": _text(run.compact_from(start)),
        "status": status(run, meta.get("name", "")),
        "cache": _cache_summary(dict(last.cache) if last else {}),
        "att": _text(live_attention(run, len(run.path) - 1, view, meta) if run.path else None),
        "beams": [[b.text, _r(b.score), int(b.finished)] for b in last.beams]
        if run.beam and last is not None and last.beams else None,
    }
    if branches is not None:
        frame["branches"] = branches
    return frame


def live_value(
    run: Run,
    view: LiveView,
    meta: dict[str, Any],
    lang: str,
    branches: list[dict[str, Any]] | None = None,
    selected: int | None = None,
) -> dict[str, Any]:
    """The live component's value for the whole run as it stands: its head and every path entry."""
    return {**live_frame(run, view, meta, lang, 0, branches or [], selected), "head": run_head(run)}


def entries(frame: dict[str, Any]) -> list[Any]:
    """A frame's path entries (see `live_frame`)."""
    return json.loads(frame["path"]) if isinstance(frame.get("path"), str) else list(frame.get("path") or [])


def attention(frame: dict[str, Any]) -> dict[str, Any] | None:
    """A frame's attention row for the newest step, or None (see `live_frame`)."""
    return json.loads(frame["att"]) if isinstance(frame.get("att"), str) else frame.get("att")


def fold(path: list[Any], value: dict[str, Any]) -> list[Any]:
    """The page's copy of a run's path entries after `value` (a frame, or the whole value), as the live screen's
    script keeps it: for scripts and tests that read a stream the way the page does."""
    return ([] if "head" in value else path[: value.get("from", 0)]) + entries(value)


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sent_until(sent: Sequence[Any], path: Sequence[Any]) -> int:
    """How many of `path`'s entries the page already holds, `sent` being the path's entries when the last frame was
    sent: the first index where they differ (an entry is a new object only where beam search rewrote the path)."""
    n = min(len(sent), len(path))
    if n and sent[n - 1] is path[n - 1]:  # beam search rewrites from some step to the end: nothing was rewritten
        return n
    for i in range(n):
        if sent[i] is not path[i]:
            return i
    return n


def waiting_value(value: dict[str, Any], waiting: Any) -> dict[str, Any]:
    """A run's live value while it waits for a place in the shared batch (a `serving.Waiting`): its
    place in line and the longest wait, in the status."""
    status = {**value["status"], "state": "waiting", "position": waiting.position, "wait_s": waiting.seconds}
    return {**value, "status": status}


def live_attention(run: Run, step: int, view: LiveView, meta: dict[str, Any]) -> dict[str, Any] | None:
    """The attention row of `step` for the view, from what the run recorded (None if not recorded)."""
    layer = resolve_layer(view.layer, meta["layers"])
    kind = view.kind if view.kind in ("self", "cross") else ("cross" if run.kind == "seq2seq" else "self")
    if kind == "cross" and run.kind != "seq2seq":
        kind = "self"
    rows = recorded_row(run.path[step], kind, layer)
    if rows is None:
        return None
    return {"step": step, "kind": kind, "layer": layer, "head": view.head,
            "row": rounded(reduce_heads(rows, view.head, meta["kv_heads"]))}


def _cache_summary(cache: dict[str, Any]) -> dict[str, Any]:
    keys = ("enabled", "layers", "batch", "kv_heads", "query_heads", "head_dim", "tokens", "max_tokens", "dtype",
            "element_size", "bytes", "allocated_bytes", "mha_equivalent_bytes", "bytes_per_token")
    out = {k: cache.get(k) for k in keys}
    policy = cache.get("policy")
    if isinstance(policy, dict) and policy.get("dtype"):  # a quantised cache: s is its bytes per number, scales included
        numbers = 2 * cache["layers"] * cache["batch"] * cache["kv_heads"] * cache["tokens"] * cache["head_dim"]
        out["element_size"] = round(cache["bytes"] / numbers, 2) if numbers else out["element_size"]
    cross = cache.get("cross_attention")
    if cross:
        out["cross"] = {k: cross.get(k) for k in ("layers", "kv_heads", "head_dim", "tokens", "bytes")}
    return out


def token_texts(token_text: Callable[[int], str], ids: Sequence[int]) -> list[str]:
    return [token_text(i) for i in ids]


def whole_version(session: Session, run: Run) -> tuple:
    """What a run's whole value for `session` is made of, in a few numbers: the run's steps, state and recorded
    attention, the tab's language, view and selected step, and the branches the lineage panel lists."""
    selected = session.selected_step if run is session.current else None
    view = session.view
    return (len(run.events), len(run.path), run.finish_reason, run.error, run.captures_dropped,
            session.lang, (view.kind, view.layer, view.head), selected,
            tuple((r.token, len(r.path), r.finish_reason) for r in session.runs))
