"""Every setting of a run and every control of a view, one row each. No Gradio here.

A `Field` is one setting of a run: its name, kind, default, limits or choices, link codec (`parse` reads a link's
text, `show` writes it), whether the page's left column edits it (`widget`: Generate reads exactly those) and its
lenient rule (how the app moves an unusable value of a run's config, with a note). The rows drive `UISettings`
(`playground.app.settings`), reading and writing links, the widgets Generate reads and the page's leniency. The
base rows are here; each experiment brings its own (`playground.app.experiments`), which only links and its fork
set.

A view's controls are its tab's widgets (`playground.app.tab.Widget`, `view=True`): each reads its own value.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from playground.app.notes import error_note, note
from playground.generation.config import GenerationConfig
from playground.generation.knobs import KNOBS
from playground.interventions import InterventionError, unpack
from playground.models.rope_scaling import RopeScalingError, check_rope_scaling
from playground.notes import Note

MODES = ("greedy", "sample", "beam")
DTYPES = ("float32", "bfloat16", "float16")
LANGS = ("en", "zh")
PACE_MS = 1000  # slow motion's longest pause after a token
MAX_BRANCHES = 8
MAX_EDITS = 16  # edits one run carries (each fork in the causal lab adds one); a link with more is refused

Lenient = Callable[[GenerationConfig, Any, list[Note]], None]  # (the run's config, its model, notes): fix in place


@dataclass(frozen=True)
class Field:
    """One setting of a run. `kind`: "text", "choice", "whole", "real", "flag" or "seed" (a whole number or none).
    `check(text)` refuses a text or choice with ValueError (a Note); `in_link`: "always", "changed" (only when it
    is not the default) or "sample" (always in a sampling run: the seed it drew)."""

    name: str
    kind: str
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    check: Callable[[str], Any] | None = None
    widget: bool = True  # the page's left column edits it (Generate reads it); False: links and forks set it
    in_link: str = "changed"
    lenient: Lenient | None = None

    @property
    def annotation(self) -> str:
        return {"flag": "bool", "whole": "int", "real": "float", "seed": "int | None"}.get(self.kind, "str")

    @property
    def limits(self) -> tuple[float, float] | None:
        return None if self.low is None else (self.low, self.high)

    def parse(self, text: str) -> Any:
        """A link's text as this setting's value; ValueError (a Note) for text it cannot mean."""
        if self.kind == "flag":
            return _parse_bool(text)
        if self.kind == "seed" and text.strip().lower() in ("", "none", "random"):
            return None
        if self.kind in ("whole", "real", "seed"):
            return self._number(text)
        if self.kind == "choice" and text not in self.choices:
            raise ValueError(note("expect_one_of", choices=", ".join(c or "none" for c in self.choices)))
        if self.check is not None:
            self.check(text)
        return text

    def _number(self, text: str) -> float | int:
        try:
            value = float(text)
        except ValueError:  # float()'s own message is Python's, not the visitor's
            raise ValueError(note("expect_number")) from None
        if self.kind == "real":
            if not math.isfinite(value):
                raise ValueError(note("expect_finite"))
        elif not value.is_integer():
            raise ValueError(note("expect_whole"))
        else:
            value = int(value)
        if not self.low <= value <= self.high:
            raise ValueError(note("expect_range", low=self.low, high=self.high))
        return value

    def show(self, value: Any) -> str:
        """The value as a link writes it (`parse` reads it back)."""
        if value is None:
            return "none"
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def coerce(self, value: Any) -> Any:
        """A widget's value in this setting's type (a Number box gives floats, a cleared one None)."""
        if self.kind == "seed":
            return self._typed_seed(value)
        if self.kind == "flag":
            return bool(value)
        if self.kind in ("whole", "real"):
            return self.default if value is None else (int if self.kind == "whole" else float)(value)
        return "" if value is None else str(value)

    def _typed_seed(self, value: Any) -> int | None:
        """The seed box's text (or a link's number) as a seed: empty, or anything that is not a whole number,
        draws one (the run's status names it); a whole number is kept inside the seed's range."""
        try:
            number = float(str(value).strip()) if value is not None else math.nan
        except ValueError:
            return None
        if not math.isfinite(number) or not number.is_integer():
            return None
        return int(min(max(number, self.low), self.high))

    def in_link_of(self, value: Any, mode: str) -> bool:
        """Whether a link to a run with this value (and this decoding mode) names the setting."""
        return self.in_link == "always" or (self.in_link == "sample" and mode == "sample") or value != self.default


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(note("expect_bool"))


def knob(name: str, default: float) -> Field:
    """A decoding knob's row: its kind and the range a page offers come from the knobs' one table."""
    k = KNOBS[name]
    low, high = k.offer
    return Field(name, "whole" if k.kind is int else "real", default, low, high)


# --- codecs of the texts a run carries ---------------------------------------------------------------


def parse_branches(text: str) -> list[tuple[int, list[int]]]:
    """"5:1234,9:77.78" -> [(5, [1234]), (9, [77, 78])]: after the run, continue from step 5 with token
    1234; then, in that branch, from step 9 with tokens 77 and 78. Raises ValueError for anything else."""
    if not text:
        return []
    out = []
    for part in text.split(","):
        step, sep, tokens = part.partition(":")
        ids = tokens.split(".")
        if not sep or not step.isdigit() or not all(i.isdigit() for i in ids) or len(ids) > 32:
            raise ValueError(note("expect_branches"))
        out.append((int(step), [int(i) for i in ids]))
    if len(out) > MAX_BRANCHES:
        raise ValueError(note("branches_many", n=MAX_BRANCHES))
    return out


def format_branches(branches: list[tuple[int, list[int]]]) -> str:
    return ",".join(f"{step}:{'.'.join(str(i) for i in ids)}" for step, ids in branches)


@functools.lru_cache(maxsize=64)
def parse_edits(text: str) -> tuple:
    """The interventions of an `edits` setting (empty text: none). Raises ValueError with one line (a Note).

    Read once per text: the link's parse and the run's config ask for the same (frozen) interventions."""
    if not text:
        return ()
    try:
        return unpack(text, max_items=MAX_EDITS)
    except InterventionError as error:
        raise ValueError(error_note(error)) from None


def rope_dict(text: str) -> dict[str, Any] | None:
    """"ntk:4" -> {"type": "ntk", "factor": 4.0} ("" -> None); ValueError (a Note) for anything else."""
    if not text:
        return None
    kind, sep, factor = text.partition(":")
    try:
        value = {"type": kind, "factor": float(factor)}
        if not sep:
            raise RopeScalingError(text)
        check_rope_scaling(value)
    except (ValueError, RopeScalingError):
        raise ValueError(note("expect_rope")) from None
    return value


def check_draft_name(text: str) -> None:
    """"", "ngram", "layer:K" (K from 1) or "model:<catalog name>"; ValueError (a Note) for anything else."""
    if text in ("", "ngram") or re.fullmatch(r"layer:[1-9][0-9]{0,3}", text):
        return
    if not (text.startswith("model:") and 0 < len(text) - 6 <= 200 and text.isprintable()):
        raise ValueError(note("expect_draft"))


def _check_lang_code(text: str) -> None:
    if text and not re.fullmatch(r"[A-Za-z_]{2,16}", text):
        raise ValueError(note("expect_lang_code"))


def _check_room_id(text: str) -> None:
    if text and not re.fullmatch(r"[A-Za-z0-9_-]{8,64}", text):
        raise ValueError(note("expect_room_id"))


# The run settings every run has, in the order a link writes them (then each experiment's, in tab order).
BASE: tuple[Field, ...] = (
    Field("model", "text", "tiny-lm", in_link="always"),  # a catalog name, never a file-system path
    Field("dtype", "choice", "float32", choices=DTYPES),
    Field("prompt", "text", "", in_link="always"),
    Field("chat", "flag", False, in_link="always"),
    Field("mode", "choice", "greedy", choices=MODES),
    knob("temperature", 0.8),
    knob("top_k", 0),
    knob("top_p", 1.0),
    knob("repetition_penalty", 1.0),
    knob("num_beams", 3),
    knob("length_penalty", 1.0),
    Field("early_stopping", "flag", False),
    knob("max_new_tokens", 32),
    # None: sampling draws a new seed for each run (the run shows it, and its link names it)
    Field("seed", "seed", None, *KNOBS["seed"].offer, in_link="sample"),
    knob("top_candidates", 8),
    Field("attention", "flag", True),
    Field("pace_ms", "whole", 0, 0, PACE_MS),  # slow motion: a pause after each token, so people can watch (and Stop)
    Field("lang", "choice", "en", choices=LANGS),
    # translation models: the language code forced as the first token ("": the checkpoint's own)
    Field("target_lang", "text", "", check=_check_lang_code),
    # "step:token_id,..." branches taken after the run, in order (see parse_branches): links replay them
    Field("branches", "text", "", check=parse_branches, widget=False),
    # "Guess the next token": a game link (`?game=<room id>`, nothing else of the run) opens that room ("": no
    # game); its page plays no run (its players guess one), and no run's own link carries it
    Field("game", "text", "", check=_check_room_id, widget=False),
    # projector mode: large type and the settings column hidden (the page's toggle; a copied link keeps it)
    Field("projector", "flag", False),
)
