"""The KV-cache lab: the run on screen under a cache policy (a sliding window, attention sinks, heavy hitters,
an int8/int4 cache) against the plain run of the same request: the bytes each holds per step, the saving, where
the texts part (the divergence along the plain run's tokens), and the attention-sink mass on the first token
per layer and head. Every result names the runs it reads."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

from playground.app import kvlab
from playground.app.describe import format_bytes, inert
from playground.app.settings import has_kv_policy
from playground.app.views.base import HIDDEN, Context, Drawn, Selection, View, shown
from playground.app.words import t
from playground.viz import kv_policy as figures


def compute(ctx: Context, sel: Selection) -> Generator[None, None, dict[str, Any]]:
    """In slices (one forward pass each): the sink mass and the divergence rerun the prompt."""
    run, lm = ctx.run, ctx.lm
    policy = has_kv_policy(run.settings)
    plain = kvlab.plain_among(ctx.runs, run) if policy else None
    numbers = yield from kvlab.measure_slices(lm, run, plain)
    return {
        "number": run.number, "settings": run.settings, "policy": policy,
        "plain": None if plain is None else plain.number,
        "plain_texts": [s.token_text for s in plain.path] if plain is not None else [],
        "texts": [s.token_text for s in run.path], **numbers,
    }


def draw(d: dict[str, Any], lang: str) -> Drawn:
    label = kvlab.policy_words(d["settings"], lang)
    out: Drawn = {"kvlab_bytes": HIDDEN, "kvlab_div": HIDDEN,
                  "kvlab_sink": shown(figures.sink_figure(d["sink"]))}
    if d["policy"]:
        out["kvlab_bytes"] = shown(figures.bytes_figure(d["bytes"], label))
    if d["div"] is not None:
        out["kvlab_div"] = shown(figures.divergence_figure(d["div"], d["plain_texts"]))
    return out


def caption(d: dict[str, Any], lang: str) -> str:
    """What the policy run saved and changed against the plain run (the tab's intro says the ideas)."""
    if not d["policy"]:
        return t("kvlab_plain", lang, n=d["number"])
    label = kvlab.policy_words(d["settings"], lang)
    b = d["bytes"]
    held, plain, kept = b["held"][-1], b["plain"][-1], b["kept"][-1]
    saved = plain - held
    lines = [t("kvlab_saved", lang, n=d["number"], policy=label, held=format_bytes(held), plain=format_bytes(plain),
               saved=format_bytes(saved), share=saved / plain if plain else 0.0, kept=kept)]
    if d["plain"] is None:
        lines.append(t("kvlab_no_plain", lang))
    else:
        first = d["div"]["first_difference"] if d["div"] is not None else None
        if first is None:
            lines.append(t("kvlab_same_text", lang, n=d["plain"]))
        else:
            ours = d["texts"][first] if first < len(d["texts"]) else ""
            theirs = d["plain_texts"][first] if first < len(d["plain_texts"]) else ""
            lines.append(t("kvlab_parted", lang, n=d["plain"], step=first + 1, token=_quoted(ours),
                           plain_token=_quoted(theirs)))
        if d["div"] is not None and d["div"]["kl"]:
            kl = d["div"]["kl"]
            lines.append(t("kvlab_kl", lang, mean=sum(kl) / len(kl), most=max(kl), step=kl.index(max(kl)) + 1))
            lines.append(t("kvlab_ppl", lang, plain=perplexity(d["div"]["original_prob"]),
                           policy=perplexity(d["div"]["prob"])))
    return ("" if lang == "zh" else " ").join(lines)


def perplexity(probs: list[float]) -> float:
    """exp of the mean negative log-probability of the plain run's tokens (teacher-forced)."""
    return math.exp(-sum(math.log(max(p, 1e-300)) for p in probs) / len(probs)) if probs else float("nan")


def _quoted(text: str) -> str:
    """A token inside a sentence's quotes: shown as the model wrote it, creating no Markdown."""
    return inert(text.replace("\n", "↵")) or "∅"


def idle(lang: str, words: str) -> Drawn:
    return {"kvlab_bytes": HIDDEN, "kvlab_div": HIDDEN, "kvlab_sink": HIDDEN}


VIEW = View("kvlab", "kvlab", frozenset({"finished"}), ("kvlab_md", "kvlab_bytes", "kvlab_div", "kvlab_sink"),
            compute, draw, caption, idle, waits="kvlab_needs_run", busy="kvlab_after_run")
