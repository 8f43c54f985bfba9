"""Everything decided before a run's first forward pass: its prompt ids, its knobs, its seed, its plan.

The page and the script API share `prompt_tokens` and `decoding`, so both refuse and cut the same
way; `start_run` makes the `Run` a session will hold (a plain run, or a branch of one of its runs).
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from playground.app import frames
from playground.app.limits import CAPS, clamp_settings
from playground.app.run import Run
from playground.app.session import Session, new_token
from playground.app.settings import UISettings, generation_kwargs
from playground.app.words import t
from playground.errors import PlaygroundError
from playground.generation import GenerationConfig, language_token_id, plan
from playground.generation.plan import Plan

MAX_PACE_SECONDS = 30.0  # slow motion never sleeps longer than this in one run (it holds a slot)


def decoding(lm: Any, settings: UISettings) -> dict[str, Any]:
    """GenerationConfig keywords for the settings: the mode's knobs and the target language's token."""
    kwargs = generation_kwargs(settings)
    if settings.target_lang:
        kwargs["forced_bos_token_id"] = language_token_id(lm.tokenizer, settings.target_lang)
    return kwargs


def prompt_tokens(lm: Any, settings: UISettings, lang: str) -> tuple[list[int], list[str]]:
    """The prompt's token ids under the app's caps, in characters then in tokens, with a note for each cut."""
    notes: list[str] = []
    text = settings.prompt
    if not text.strip():
        raise PlaygroundError(t("empty_prompt", lang).rstrip("."))
    if len(text) > CAPS.prompt_chars:
        text = text[: CAPS.prompt_chars]
        notes.append(t("prompt_cut", lang, n=CAPS.prompt_chars))
    chat = settings.chat and lm.chat_template_available
    if settings.chat and not chat:
        notes.append(t("chat_unavailable", lang))
    ids = lm.tokenize(text, chat=chat)
    if len(ids) > CAPS.prompt_tokens:
        notes.append(t("prompt_tokens_cut", lang, n=len(ids), dropped=len(ids) - CAPS.prompt_tokens,
                       cap=CAPS.prompt_tokens))
        ids = ids[-CAPS.prompt_tokens:]
    return ids, notes


def link_defaults(settings: UISettings, named: Any, lm: Any) -> UISettings:
    """The settings of a link (or a script's query) for `lm`: a query that does not name `chat` gets the
    model's default, on for a model with a chat template (as the page's first load sets its box)."""
    if "chat" in named:
        return settings
    return dataclasses.replace(settings, chat=bool(lm.chat_template_available))


def start_run(session: Session, lm: Any, settings: UISettings,
              parent: tuple[Run, int, list[int]] | None = None, *, captures: bool = True) -> tuple[Run, Plan]:
    """A new run of `session` (numbered, not yet added) and the engine's plan for it.

    parent: (run, step, token ids): continue `run` from `step` with these tokens instead of its own.
    An empty seed in sampling draws one here (the run keeps it, so its link reproduces it).
    captures=False (the script API): no attention, residual or candidates recorded; the same tokens."""
    lang = settings.lang
    notes: list[str] = []
    if parent is None:
        prompt_ids, prompt_notes = prompt_tokens(lm, settings, lang)
        notes += prompt_notes
        inherited: list[list[Any]] = []
        forced: list[int] = []
        branch_of = None
    else:
        base, step, forced = parent
        if settings.mode == "sample" and settings.seed is None:  # a branch samples with its run's seed, so
            settings = dataclasses.replace(settings, seed=base.cfg.seed)  # a link replays it exactly
        prompt_ids = list(base.prompt_ids)
        inherited = list(base.inherited) + [[lm.token_text(i), i, 1.0] for i in base.forced] + [
            [s.token_text, s.token_id, s.prob] for s in base.path[:step]]
        branch_of = (base.number, step)
    kwargs = decoding(lm, settings)
    if settings.mode == "sample" and settings.seed is None:
        kwargs["seed"] = secrets.randbelow(2**31)
        notes.append(t("seed_drawn", lang, seed=kwargs["seed"]))
    cfg, clamp_notes = clamp_settings(GenerationConfig(**kwargs), lm, len(prompt_ids) + len(inherited) + len(forced))
    notes += clamp_notes
    live_layer = frames.resolve_layer(session.view.layer, lm.config.n_layers)
    # The live panel's layer, and the residual stream the logit lens and the residual norms read.
    cfg = cfg.replace(capture_attention=settings.attention, attention_layers=(live_layer,), capture_residual=True)
    if not captures:
        cfg = cfg.replace(capture_attention=False, attention_layers=None, capture_residual=False, top_candidates=0)
    if settings.pace_ms and settings.pace_ms / 1000.0 * cfg.max_new_tokens > MAX_PACE_SECONDS:
        notes.append(t("pace_capped", lang, ms=int(1000 * MAX_PACE_SECONDS / cfg.max_new_tokens)))
    forced_prefix = [int(i) for _, i, _ in inherited] + list(forced)
    p = plan(lm, prompt_ids, cfg, forced_prefix)
    notes += [n for n in p.notes if n not in notes]
    run = Run(
        token=new_token(), number=session.next_number, owner=session.key, settings=settings, cfg=cfg, kind=lm.kind,
        prompt_ids=list(p.prompt_ids), prompt_texts=lm.token_texts(p.prompt_ids), prefix_ids=list(p.prefix_ids),
        live_layer=live_layer, notes=notes, branch_of=branch_of, inherited=inherited, forced=list(forced),
        forced_texts=lm.token_texts(forced),
        prefix_texts=lm.token_texts(p.prefix_ids[: len(p.prefix_ids) - len(forced_prefix)]),
    )
    session.next_number += 1
    return run, p
