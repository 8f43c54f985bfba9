"""`LoadedModel`: what `load_model` returns — our module, its config, its tokenizer."""

from __future__ import annotations

import functools
import re
import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from playground.checkpoints.tokenizer import guarded
from playground.config import ModelConfig
from playground.errors import ChatTemplateError, PlaygroundError, PromptError
from playground.interventions import Intervention, as_interventions, check
from playground.models.edits import edited
from playground.token_pieces import REPLACEMENT, readable_piece

if TYPE_CHECKING:
    from playground.checkpoints.limits import Limits


@dataclass
class LoadedModel:
    model: nn.Module
    config: ModelConfig
    tokenizer: Any | None
    tokenizer_error: str | None
    path: Path
    device: torch.device
    dtype: torch.dtype
    file_bytes: int
    load_seconds: float
    # Resource limits from load time, which every request is checked against (generation.budget),
    # and the bytes the model itself keeps (weights, position tables, module objects).
    limits: Limits | None = None
    resident_bytes: int = 0
    # With load_model(..., compile=True): the model's captured decode steps (generation.captured.CapturedDecoder)
    captured: Any | None = None

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def chat_template_available(self) -> bool:
        return self.tokenizer is not None and bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @torch.inference_mode()
    def logits(
        self,
        input_ids: torch.Tensor,
        decoder_input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        interventions: Sequence[Intervention] | None = None,
    ) -> torch.Tensor:
        """Logits (B, T, V): of the input for decoders, of `decoder_input_ids` for seq2seq models.

        `interventions` (Ablate, Steer, Patch from playground.interventions, or their dicts) edit this
        forward pass; an InterventionError says what to change when one does not fit the model."""
        edits = as_interventions(interventions)
        if edits:
            check(edits, self.config)
            with edited(self.model, edits):
                return self.logits(input_ids, decoder_input_ids, attention_mask)
        input_ids = torch.as_tensor(input_ids, device=self.device)
        if input_ids.dim() == 1:
            input_ids = input_ids[None]
        if self.kind == "decoder":
            return self.model(input_ids).float()
        if decoder_input_ids is None:
            raise PlaygroundError("a seq2seq model needs decoder_input_ids as well as input_ids")
        decoder_input_ids = torch.as_tensor(decoder_input_ids, device=self.device)
        if decoder_input_ids.dim() == 1:
            decoder_input_ids = decoder_input_ids[None]
        if attention_mask is not None:
            attention_mask = torch.as_tensor(attention_mask, device=self.device)
        return self.model(input_ids, decoder_input_ids, attention_mask=attention_mask).float()

    def tokenize(self, text: str, *, chat: bool = False) -> list[int]:
        """Token ids for `text`; with `chat`, wrapped in the checkpoint's chat template as a user turn.
        Without a tokenizer, `text` is the ids themselves, separated by commas ("1, 2, 3": `parse_token_ids`).

        A tokenizer that panics on the text (a split pattern that backtracks too long) raises one TokenizerError
        line. Text holding a NUL character or an unpaired surrogate is refused (PromptError, one line naming
        the position): neither is text a tokenizer can read, and cleaning it silently would change
        what the model reads. The chat template runs sandboxed and bounded (`playground.chat_template`):
        it renders exactly as transformers' apply_chat_template, or raises one ChatTemplateError line.
        """
        if self.tokenizer is None:
            if chat:
                raise PlaygroundError("this checkpoint has no tokenizer, so no chat template; turn chat off")
            return parse_token_ids(text, self.config.vocab_size, self.tokenizer_error)
        check_prompt_text(text)
        if chat:
            if not self.chat_template_available:
                raise PlaygroundError("this checkpoint has no chat template; turn chat off")
            rendered = self.render_chat([{"role": "user", "content": text}])
            return [int(i) for i in guarded(self.tokenizer.encode, rendered, add_special_tokens=False)]
        return [int(i) for i in guarded(self.tokenizer.encode, text)]

    def render_chat(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """The chat template's text for `messages` (what apply_chat_template(tokenize=False) returns)."""
        from playground.chat_template import render_chat

        try:
            template = self.tokenizer.get_chat_template()
        except (ValueError, TypeError, KeyError) as error:  # e.g. named templates without a default
            raise ChatTemplateError(f"the checkpoint's chat template cannot be chosen ({error}); turn chat off") from None
        return render_chat(template, messages, add_generation_prompt=add_generation_prompt,
                           variables=_plain(self.tokenizer.special_tokens_map))

    def detokenize(self, ids: list[int], *, skip_special_tokens: bool = False) -> str:
        """Text for token ids (the ids themselves, space-separated, without a tokenizer)."""
        return detokenize(self.tokenizer, ids, skip_special_tokens=skip_special_tokens)

    def text_of(self, *, skip_special_tokens: bool = False) -> Callable[[list[int]], str]:
        """`detokenize` as a function that holds the tokenizer only, never the model: what a run keeps to decode
        its text later (a run kept in a tab's history must not keep its model, or what its model's passes held)."""
        return functools.partial(detokenize, self.tokenizer, skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """One token's own text (what a token chip or an axis label shows); a byte-level piece of a
        character shows its bytes ("<0xC3>"), not the "�" it decodes to alone. Remembered per tokenizer: a
        class's step asks it for every row's candidates (64 rows × 8 at 64 visitors), each a tokenizer call."""
        token_id = int(token_id)
        known = {}
        if self.tokenizer is not None:  # `get` first: a weak map's `setdefault` makes a weak reference with a callback
            known = _TOKEN_TEXTS.get(self.tokenizer) or _TOKEN_TEXTS.setdefault(self.tokenizer, {})
        text = known.get(token_id)
        if text is None:
            text = self.detokenize([token_id])
            if REPLACEMENT in text and self.tokenizer is not None:
                text = readable_piece(text, self.tokenizer.convert_ids_to_tokens(token_id))
            if len(known) >= TOKEN_TEXTS_KEPT:
                known.clear()
            known[token_id] = text
        return text

    def token_texts(self, ids: list[int]) -> list[str]:
        """`token_text` of each id (the remembered texts looked up once: a class's step asks for every row's
        candidates)."""
        known = _TOKEN_TEXTS.get(self.tokenizer, {}) if self.tokenizer is not None else {}
        texts = [known.get(i) for i in ids]
        return texts if None not in texts else [self.token_text(i) if t is None else t for i, t in zip(ids, texts)]

    def checkpoint_texts(self) -> dict[str, str]:
        """Every piece of text this checkpoint controls that the app may show, keyed by where it comes
        from: config strings (`config.family`, anything under `config.extra` and `config.rope_scaling`),
        the file or folder name, the tokenizer's special tokens and chat template, its load error, and
        the token texts of the special ids. A page must escape all of them (and `token_text` of any
        id); a UI test can fill each with hostile HTML and render every element."""
        out: dict[str, str] = {"path.name": self.path.name}
        for key, value in self.config.to_dict().items():
            _collect_texts(f"config.{key}", value, out)
        if self.tokenizer_error:
            out["tokenizer_error"] = self.tokenizer_error
        if self.tokenizer is not None:
            for key, value in dict(getattr(self.tokenizer, "special_tokens_map", {}) or {}).items():
                _collect_texts(f"tokenizer.{key}", value, out)
            template = getattr(self.tokenizer, "chat_template", None)
            if template:
                _collect_texts("tokenizer.chat_template", template, out)
        c = self.config
        for name in ("bos_token_id", "pad_token_id", "decoder_start_token_id"):
            if getattr(c, name) is not None:
                out[f"token_text.{name}"] = self.token_text(getattr(c, name))
        for i, eos in enumerate(c.eos_token_ids):
            out[f"token_text.eos_token_id.{i}"] = self.token_text(eos)
        return out

    def info(self) -> dict[str, Any]:
        """JSON-serialisable description for `python -m playground info` and the model card.

        Strings in it are data from the checkpoint, kept as written (see `checkpoint_texts`)."""
        c = self.config
        return {
            "path": str(self.path),
            "family": c.family,
            "kind": c.kind,
            "parameters": self.parameter_count,
            "positional_encoding": c.positional,
            "attention": c.attention_kind,
            "block": block_kind(c),
            "layers": [kind.to_dict() for kind in c.layer_kinds()],
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "file_bytes": self.file_bytes,
            "load_seconds": round(self.load_seconds, 4),
            "tokenizer": None if self.tokenizer is None else type(self.tokenizer).__name__,
            "tokenizer_error": self.tokenizer_error,
            "chat_template": self.chat_template_available,
            "special_ids_outside_vocab": c.special_ids_outside_vocab(),
            "config": c.to_dict(),
            **(_stacks(c) if c.kind == "seq2seq" else {}),
        }


def block_kind(config: ModelConfig) -> str:
    """How a block wires its norms and residual: "pre", "post", "sandwich", "output" or "parallel"."""
    return "parallel" if config.parallel_residual else config.norm_position


def _stack(config: ModelConfig, layers: int) -> dict[str, Any]:
    return {
        "layers": layers, "heads": config.n_heads, "kv_heads": config.n_kv_heads, "head_dim": config.head_dim,
        "d_ff": config.d_ff, "attention": config.attention_kind,
    }


def _stacks(config: ModelConfig) -> dict[str, Any]:
    """Encoder and decoder described separately (they may differ: DistilBART has 12 + 6 layers); the
    decoder's heads serve both its self-attention and its cross-attention over the source."""
    return {
        "encoder": _stack(config.encoder_config(), config.n_encoder_layers),
        "decoder": _stack(config, config.n_layers),
        "symmetric": config.symmetric,
    }


_TOKEN_IDS = re.compile(r"\s*\d{1,12}(?:\s*[,\s]\s*\d{1,12})*\s*,?\s*")


def parse_token_ids(text: str, vocab_size: int, why: str | None = None) -> list[int]:
    """The prompt of a checkpoint without a tokenizer: token ids separated by commas or spaces ("1, 2, 3").

    Anything else is refused with `why` (the reason there is no tokenizer, which says what to type)."""
    if not isinstance(text, str):
        raise PromptError(f"the prompt must be text, got {type(text).__name__}")
    if not _TOKEN_IDS.fullmatch(text):
        raise PromptError(why or "this checkpoint has no tokenizer; type token ids separated by commas (e.g. 1, 2, 3)")
    ids = [int(i) for i in re.findall(r"\d+", text)]
    bad = next((i for i in ids if i >= vocab_size), None)
    if bad is not None:
        raise PromptError(f"token id {bad} is outside the vocabulary (0 to {vocab_size - 1}); use smaller ids")
    return ids


def check_prompt_text(text: str) -> None:
    """Refuse text a tokenizer cannot read as written: a NUL character or an unpaired surrogate
    (what undecodable bytes become in Python strings), with the character's position."""
    if not isinstance(text, str):
        raise PromptError(f"the prompt must be text, got {type(text).__name__}")
    nul = text.find("\x00")
    if nul >= 0:
        raise PromptError(f"the prompt contains a NUL character (U+0000) at character {nul}; remove it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        raise PromptError(
            f"the prompt contains an unpaired surrogate U+{code:04X} at character {error.start}, which is not "
            "valid Unicode text; remove it (or save the text as UTF-8 again)"
        ) from None


def _collect_texts(key: str, value: Any, out: dict[str, str]) -> None:
    """Flatten the strings inside `value` (dict keys included) into `out` under dotted keys."""
    if isinstance(value, str):
        out[key] = value
    elif isinstance(value, dict):
        for k, v in value.items():
            out[f"{key}.{k}#key"] = str(k)  # keys are checkpoint text too (config.extra is free-form)
            _collect_texts(f"{key}.{k}", v, out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _collect_texts(f"{key}.{i}", v, out)


def _plain(value: Any) -> Any:
    """Template variables as plain JSON data (what transformers passes: no objects with methods)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float)) else str(value)


# Each loaded tokenizer's token texts (`LoadedModel.token_text`): at most TOKEN_TEXTS_KEPT of them (about 1 MB, the
# candidates a class sees are mostly common tokens), dropped all at once past that; gone with the tokenizer. A run
# keeps the strings it was given, shared with this cache: its record counts them as its own.
_TOKEN_TEXTS: weakref.WeakKeyDictionary[Any, dict[int, str]] = weakref.WeakKeyDictionary()
TOKEN_TEXTS_KEPT = 16384


def token_texts_held() -> tuple[int, int]:
    """(token texts, bytes) the tokenizers' `token_text` caches keep: each cache's dict, its ids and its texts. A
    text a run keeps too is counted in both places (at most the caches' size, about 1 MB a tokenizer)."""
    count = size = 0
    for _ in range(3):  # a tokenizer that comes or goes meanwhile changes the map: look again
        try:
            caches = [dict(known) for known in list(_TOKEN_TEXTS.values())]
            break
        except RuntimeError:
            continue
    else:
        return 0, 0
    for known in caches:
        count += len(known)
        size += sys.getsizeof(known) + sum(sys.getsizeof(i) + sys.getsizeof(text) for i, text in known.items())
    return count, size


def detokenize(tokenizer: Any | None, ids: list[int], *, skip_special_tokens: bool = False) -> str:
    """Text for token ids through `tokenizer` (the ids themselves, space-separated, without one)."""
    if tokenizer is None:
        return " ".join(str(i) for i in ids)
    return guarded(tokenizer.decode, ids, skip_special_tokens=skip_special_tokens, doing="decode")
