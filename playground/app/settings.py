"""Every setting of a run as one dataclass, made from the rows of `playground.app.fields` (the base rows, then each
experiment's), that round-trips through URL query parameters.

A copied link (`?model=tiny-lm&prompt=...&mode=sample&temperature=0.8&seed=3`) must reproduce the same run, so
parsing is strict about types and ranges: a value that cannot be used is ignored with a note that says why, never
an exception. The page's left column edits the `WIDGETS`; the other settings (the branches, the experiments') reach
a run only through a link or an experiment's fork. No Gradio here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from playground.app import experiments
from playground.app.fields import BASE, DTYPES, LANGS, MODES, Field, format_branches, parse_branches, parse_edits
from playground.app.limits import CAPS
from playground.app.notes import error_note, note
from playground.notes import Note

log = logging.getLogger("playground.app")

ROWS: tuple[Field, ...] = (*BASE, *experiments.FIELDS)  # in the order a link writes them
BY_NAME: dict[str, Field] = {f.name: f for f in ROWS}
FIELDS: list[str] = [f.name for f in ROWS]  # every setting
WIDGETS: list[str] = [f.name for f in ROWS if f.widget]  # the left column's: what Generate reads
RUN_FIELDS: list[str] = [f.name for f in ROWS if not f.widget]  # what only a link or a fork sets
EXPERIMENT_FIELDS: frozenset[str] = frozenset(f.name for f in experiments.FIELDS)
RANGES: dict[str, tuple[float, float]] = {f.name: f.limits for f in ROWS if f.limits is not None}

UISettings = dataclasses.make_dataclass(
    "UISettings", [(f.name, f.annotation, dataclasses.field(default=f.default)) for f in ROWS])
UISettings.__module__ = __name__
UISettings.__doc__ = ("What a person chose in the app, one field per row of `playground.app.fields` (and of each "
                      "experiment). `model` is a catalog name, never a file-system path.")
DEFAULTS = UISettings()

__all__ = ["DEFAULTS", "DTYPES", "FIELDS", "LANGS", "MODES", "RANGES", "RUN_FIELDS", "UISettings", "WIDGETS",
           "format_branches", "from_query", "from_widgets", "generation_kwargs", "parse_branches", "parse_edits",
           "plain", "to_query"]


def from_query(params: Mapping[str, str], base: Any = None) -> tuple[Any, list[Note]]:
    """Settings from URL query parameters over `base` (defaults); a keyed note for every ignored value."""
    values = dataclasses.asdict(base or UISettings())
    notes: list[Note] = []
    for key, raw in params.items():
        if key == "__theme":  # Gradio's own parameter
            continue
        if key not in BY_NAME:
            notes.append(note("link_unknown", name=key))
            continue
        text = str(raw)
        shown = text if len(text) <= 40 else text[:37] + "..."
        try:
            values[key] = BY_NAME[key].parse(text)
        except ValueError as exc:
            notes.append(note("link_ignored", name=key, value=repr(shown), why=error_note(exc)))
        except Exception:  # noqa: BLE001 - whatever a link holds, the page opens and says so
            log.warning("link parameter %s could not be read", key, exc_info=True)
            notes.append(note("link_ignored", name=key, value=repr(shown), why=note("link_unreadable")))
    if len(values["prompt"]) > CAPS.prompt_chars:
        values["prompt"] = values["prompt"][: CAPS.prompt_chars]
        notes.append(note("link_prompt_cut", n=CAPS.prompt_chars))
    return UISettings(**values), notes


def to_query(settings: Any) -> str:
    """The query string (with leading '?') that `from_query` turns back into `settings`.

    Only values that differ from the defaults are written, so links stay short; the model, the prompt and the chat
    switch are always written so a link names what it reproduces (a model with a chat template would otherwise open
    with chat on), and so is a sampling run's seed.
    """
    out = {f.name: f.show(getattr(settings, f.name)) for f in ROWS
           if f.in_link_of(getattr(settings, f.name), settings.mode)}
    return "?" + urlencode(out)


def from_widgets(values: Mapping[str, Any]) -> Any:
    """Settings from widget values by name (strings, floats, None for a cleared number box), coerced to types; the
    settings no widget names keep their defaults. Widgets already bound their ranges; this only fixes types (a Number
    gives floats) so that the settings compare equal to the parsed link."""
    return UISettings(**{name: BY_NAME[name].coerce(value) for name, value in values.items() if name in BY_NAME})


def widget_settings(values: Sequence[Any]) -> Any:
    """Settings from the left column's widget values in `WIDGETS` order, as an event sends them (values after
    them, another component's, are left out)."""
    return from_widgets(dict(zip(WIDGETS, values[: len(WIDGETS)])))


def plain(settings: Any) -> Any:
    """The same request with every experiment off (no edit, the plain cache, the weights as loaded, no draft)."""
    return dataclasses.replace(settings, **{f.name: f.default for f in experiments.FIELDS})


def changed(settings: Any, origin: Any) -> dict[str, Any]:
    """The experiments' settings of `settings` that differ from `origin`'s."""
    return {name: getattr(settings, name) for name in EXPERIMENT_FIELDS
            if getattr(settings, name) != getattr(origin, name)}


def generation_kwargs(settings: Any) -> dict[str, Any]:
    """Keyword arguments for `GenerationConfig`, from the decoding mode and knobs, and each experiment's.

    greedy: temperature 0, one beam; sample: the chosen temperature / top-k / top-p with the seed;
    beam: deterministic beam search with the chosen width and length penalty.
    """
    kw: dict[str, Any] = dict(max_new_tokens=settings.max_new_tokens, repetition_penalty=settings.repetition_penalty,
                              top_candidates=settings.top_candidates, chat=settings.chat, seed=settings.seed,
                              use_cache=True)
    for experiment in experiments.EXPERIMENTS:
        kw.update(experiment.config(settings))
    if settings.mode == "sample":
        kw.update(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p, num_beams=1)
    elif settings.mode == "beam":
        kw.update(temperature=0.0, top_k=0, top_p=1.0, num_beams=settings.num_beams,
                  length_penalty=settings.length_penalty, early_stopping=settings.early_stopping)
    else:
        kw.update(temperature=0.0, top_k=0, top_p=1.0, num_beams=1)
    return kw
