"""Every setting the app exposes, as one dataclass that round-trips through URL query parameters.

A copied link (`?model=tiny-lm&prompt=...&mode=sample&temperature=0.8&seed=3`) must reproduce the
same run, so parsing is strict about types and ranges: a value that cannot be used is ignored with a
note that says why, never an exception. No Gradio here.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from playground.app.limits import CAPS, RANGES, WHOLE
from playground.app.notes import error_note, note
from playground.interventions import InterventionError, unpack
from playground.models.quantize import PRECISIONS
from playground.models.rope_scaling import RopeScalingError, check_rope_scaling
from playground.notes import Note

log = logging.getLogger("playground.app")
MODES = ("greedy", "sample", "beam")
DTYPES = ("float32", "bfloat16", "float16")
KV_DTYPES = ("", "int8", "int4")
KV_FIELDS = ("kv_window", "kv_sink", "kv_heavy", "kv_dtype", "rope_scaling")
WEIGHT_PRECISIONS = ("", *PRECISIONS)  # "": the weights as loaded
LANGS = ("en", "zh")
MAX_BRANCHES = 8
MAX_EDITS = 16  # edits one run carries (each fork in the lab adds one); a link with more is refused


@dataclass
class UISettings:
    """What a person chose in the app. `model` is a catalog name (never a file-system path)."""

    model: str = "tiny-lm"
    dtype: str = "float32"
    prompt: str = ""
    chat: bool = False
    mode: str = "greedy"
    temperature: float = 0.8
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    num_beams: int = 3
    length_penalty: float = 1.0
    early_stopping: bool = False
    max_new_tokens: int = 32
    seed: int | None = None  # None: sampling draws a new seed for each run (the run shows it)
    top_candidates: int = 8
    attention: bool = True
    pace_ms: int = 0  # slow motion: a pause after each token so people can watch (and Stop) it
    lang: str = "en"  # "en" or "zh"
    target_lang: str = ""  # translation models: the language code forced as the first token ("": the checkpoint's own)
    branches: str = ""  # "step:token_id,..." branches taken after the run, in order (see parse_branches)
    edits: str = ""  # the causal lab's edits of the run (interventions.pack); a link replays the plain run first
    # The KV-cache lab: the run's own cache (0 / "": the plain cache); a link replays the plain run first.
    kv_window: int = 0  # keep the last N positions (0: no eviction)
    kv_sink: int = 0  # and the first S (attention sinks)
    kv_heavy: int = 0  # and the H others with the most accumulated attention (heavy hitters)
    kv_dtype: str = ""  # "int8" | "int4": a quantised cache
    rope_scaling: str = ""  # "linear:2" | "ntk:4" | "yarn:2" …: the run's own RoPE table, past the trained length
    # The precision what-if: the run's weights at another precision ("": as loaded); a link replays float32 first.
    weight_precision: str = ""
    # Speculative decoding: who drafts ("": nobody; "ngram"; "layer:K"; "model:<name>": a loaded model of the same
    # vocabulary) and how many tokens per pass of the model; a link replays the run without a draft first.
    draft: str = ""
    draft_tokens: int = 4
    # "Guess the next token": a game link opens the run's game room at this step (0: no game); the page does not run it.
    game: int = 0


FIELDS = [f.name for f in dataclasses.fields(UISettings)]
DEFAULTS = UISettings()
ALWAYS_IN_LINKS = ("model", "prompt", "chat")


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(note("expect_bool"))


def _parse_value(name: str, text: str) -> Any:
    default = getattr(DEFAULTS, name)
    if name == "mode":
        if text not in MODES:
            raise ValueError(note("expect_one_of", choices=", ".join(MODES)))
        return text
    if name == "dtype":
        if text not in DTYPES:
            raise ValueError(note("expect_one_of", choices=", ".join(DTYPES)))
        return text
    if name == "draft":
        if not usable_draft(text):
            raise ValueError(note("expect_draft"))
        return text
    if name == "weight_precision":
        if text not in WEIGHT_PRECISIONS:
            raise ValueError(note("expect_one_of", choices=", ".join(PRECISIONS)))
        return text
    if name == "rope_scaling":
        rope_dict(text)
        return text
    if name == "kv_dtype":
        if text not in KV_DTYPES:
            raise ValueError(note("expect_one_of", choices=", ".join(c or "none" for c in KV_DTYPES)))
        return text
    if name == "lang":
        if text not in LANGS:
            raise ValueError(note("expect_one_of", choices=", ".join(LANGS)))
        return text
    if name == "target_lang":
        if text and not re.fullmatch(r"[A-Za-z_]{2,16}", text):
            raise ValueError(note("expect_lang_code"))
        return text
    if name == "branches":
        parse_branches(text)
        return text
    if name == "edits":
        parse_edits(text)
        return text
    if name in ("model", "prompt"):
        return text
    if name == "game":  # a step as the page counts it (1 is the first new token)
        if not re.fullmatch(r"[0-9]{1,4}", text.strip()) or not 0 <= int(text) <= CAPS.max_new_tokens:
            raise ValueError(note("expect_range", low=0, high=CAPS.max_new_tokens))
        return int(text)
    if name == "seed" and text.strip().lower() in ("", "none", "random"):
        return None
    if isinstance(default, bool):
        return _parse_bool(text)
    try:
        value = float(text)
    except ValueError:  # float()'s own message is Python's, not the visitor's
        raise ValueError(note("expect_number")) from None
    if name in WHOLE:
        if not value.is_integer():
            raise ValueError(note("expect_whole"))
        value = int(value)
    else:
        if not math.isfinite(value):
            raise ValueError(note("expect_finite"))
    lo, hi = RANGES[name]
    if not lo <= value <= hi:
        raise ValueError(note("expect_range", low=lo, high=hi))
    return value


def from_query(params: Mapping[str, str], base: UISettings | None = None) -> tuple[UISettings, list[Note]]:
    """Settings from URL query parameters over `base` (defaults); a keyed note for every ignored value."""
    values = dataclasses.asdict(base or UISettings())
    notes: list[Note] = []
    for key, raw in params.items():
        if key == "__theme":  # Gradio's own parameter
            continue
        if key not in values:
            notes.append(note("link_unknown", name=key))
            continue
        text = str(raw)
        shown = text if len(text) <= 40 else text[:37] + "..."
        try:
            values[key] = _parse_value(key, text)
        except ValueError as exc:
            notes.append(note("link_ignored", name=key, value=repr(shown), why=error_note(exc)))
        except Exception:  # noqa: BLE001 - whatever a link holds, the page opens and says so
            log.warning("link parameter %s could not be read", key, exc_info=True)
            notes.append(note("link_ignored", name=key, value=repr(shown), why=note("link_unreadable")))
    if len(values["prompt"]) > CAPS.prompt_chars:
        values["prompt"] = values["prompt"][: CAPS.prompt_chars]
        notes.append(note("link_prompt_cut", n=CAPS.prompt_chars))
    return UISettings(**values), notes


def to_query(settings: UISettings) -> str:
    """The query string (with leading '?') that `from_query` turns back into `settings`.

    Only values that differ from the defaults are written, so links stay short; the model, the
    prompt and the chat switch are always written so a link names what it reproduces (a model with
    a chat template would otherwise open with chat on), and so is a sampling run's seed.
    """
    out: dict[str, str] = {}
    for name in FIELDS:
        value = getattr(settings, name)
        always = name in ALWAYS_IN_LINKS or (name == "seed" and settings.mode == "sample")
        if not always and value == getattr(DEFAULTS, name):
            continue
        if value is None:
            out[name] = "none"
        elif isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, float) and value.is_integer() and name not in ("temperature", "top_p"):
            out[name] = str(value)
        else:
            out[name] = str(value)
    return "?" + urlencode(out)


def from_widgets(values: Mapping[str, Any]) -> UISettings:
    """Settings from widget values (strings, floats, None for a cleared number box), coerced to types.

    Widgets already bound their ranges; this only fixes types (a Number gives floats) so that the
    settings compare equal to the parsed link.
    """
    kw: dict[str, Any] = {}
    for name in FIELDS:
        if name not in values:
            continue
        value, default = values[name], getattr(DEFAULTS, name)
        if name == "seed":
            kw[name] = None if value is None or value == "" else int(value)
        elif isinstance(default, bool):
            kw[name] = bool(value)
        elif isinstance(default, int):
            kw[name] = int(value) if value is not None else default
        elif isinstance(default, float):
            kw[name] = float(value) if value is not None else default
        else:
            kw[name] = "" if value is None else str(value)
    return UISettings(**kw)


def generation_kwargs(settings: UISettings) -> dict[str, Any]:
    """Keyword arguments for `GenerationConfig`, from the decoding mode and knobs.

    greedy: temperature 0, one beam; sample: the chosen temperature / top-k / top-p with the seed;
    beam: deterministic beam search with the chosen width and length penalty.
    """
    kw: dict[str, Any] = dict(
        max_new_tokens=settings.max_new_tokens,
        repetition_penalty=settings.repetition_penalty,
        top_candidates=settings.top_candidates,
        chat=settings.chat,
        seed=settings.seed,
        use_cache=True,
        interventions=parse_edits(settings.edits),
        **kv_kwargs(settings),
    )
    if settings.weight_precision:
        kw["weight_precision"] = settings.weight_precision
    if settings.draft and not settings.draft.startswith("model:"):  # a model's draft is resolved by name (play)
        kw.update(draft=settings.draft, draft_tokens=settings.draft_tokens)
    if settings.mode == "sample":
        kw.update(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p, num_beams=1)
    elif settings.mode == "beam":
        kw.update(temperature=0.0, top_k=0, top_p=1.0, num_beams=settings.num_beams,
                  length_penalty=settings.length_penalty, early_stopping=settings.early_stopping)
    else:
        kw.update(temperature=0.0, top_k=0, top_p=1.0, num_beams=1)
    return kw


def kv_kwargs(settings: UISettings) -> dict[str, Any]:
    """GenerationConfig's KV-cache settings (none when the settings keep the plain cache); combinations the
    engine refuses are moved by the lenient pass (`limits.lenient`), with a note."""
    kw: dict[str, Any] = {}
    if settings.kv_window:
        kw["kv_window"] = settings.kv_window
    if settings.kv_sink:
        kw["kv_sink"] = settings.kv_sink
    if settings.kv_heavy:
        kw["kv_heavy"] = settings.kv_heavy
    if settings.kv_dtype:
        kw["kv_dtype"] = settings.kv_dtype
    if settings.rope_scaling:
        try:
            kw["rope_scaling"] = rope_dict(settings.rope_scaling)
        except ValueError:  # widgets bind their values; a text that is none of them asks for nothing
            pass
    return kw


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


def has_kv_policy(settings: UISettings) -> bool:
    """Whether the settings ask for a cache of their own (the KV lab's branch), not the plain cache."""
    return bool(settings.kv_window or settings.kv_dtype or settings.rope_scaling)


def without_kv(settings: UISettings) -> UISettings:
    """The same settings with the plain cache."""
    return dataclasses.replace(settings, kv_window=0, kv_sink=0, kv_heavy=0, kv_dtype="", rope_scaling="")


def has_precision(settings: UISettings) -> bool:
    """Whether the settings run the weights at another precision than float32 (the precision lab's branch)."""
    return settings.weight_precision not in ("", "float32")


def plain_variant(settings: UISettings) -> UISettings:
    """The same request with the plain cache, the weights as loaded and no draft: what the labs compare a branch
    with."""
    return dataclasses.replace(without_kv(settings), weight_precision="", draft="", draft_tokens=DEFAULTS.draft_tokens)


def usable_draft(text: str) -> bool:
    """"", "ngram", "layer:K" (K from 1) or "model:<catalog name>"."""
    if text in ("", "ngram"):
        return True
    if re.fullmatch(r"layer:[1-9][0-9]{0,3}", text):
        return True
    return text.startswith("model:") and 0 < len(text) - 6 <= 200 and text.isprintable()


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


def format_branches(branches: list[tuple[int, list[int]]]) -> str:
    return ",".join(f"{step}:{'.'.join(str(i) for i in ids)}" for step, ids in branches)
