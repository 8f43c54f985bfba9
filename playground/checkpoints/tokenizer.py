"""Tokenizers from checkpoint files: never remote code, never a file outside the checkpoint.

Some tokenizer classes open files named *inside* their own files (transformers' MyT5 tokenizer opens
every string of its byte_maps.json as a path: "/dev/zero" reads forever). So a folder's tokenizer is
loaded like this:

1. the tokenizer class is one of `TOKENIZER_CLASSES`, classes known to read only their own vocabulary
   files, by fixed names (tokenizer.json, sentencepiece models, GPT-2 vocab.json + merges.txt, Marian's
   source.spm/target.spm/vocab.json ...). A class named by the checkpoint that is not one of them is
   replaced by the plain fast tokenizer when there is a tokenizer.json, and refused otherwise;
2. exactly those files, the tokenizer's settings and its chat templates are read with byte budgets
   (`read_folder_file`: regular files inside the folder only) and copied into a private staging folder
   that holds nothing else; settings that name files or remote code are dropped;
3. transformers loads the tokenizer from the staging folder, so it can open nothing the visitor named.

Every failure is one line naming only the checkpoint's own file names; the model still loads, and
text input says why it is unavailable.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from playground.checkpoints.folder_files import (
    MIB,
    checkpoint_root,
    read_folder_file,
    read_folder_json,
)
from playground.errors import CheckpointError, TokenizerError
from playground.notes import Note

log = logging.getLogger("playground.checkpoints")
T = TypeVar("T")

# Names that mean "this folder has a tokenizer" (a tokenizer_config.json alone counts: it says which class).
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
    "source.spm", "vocab.json", "vocab.txt",
)
# Settings and templates every class reads (transformers' `PreTrainedTokenizerBase.from_pretrained`).
COMMON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                "chat_template.jinja")
TEMPLATE_DIR = "additional_chat_templates"
# Classes (without a "Fast" suffix) whose loading reads only the files of their `vocab_files_names`:
# what the families here need (GPT-2/Neo/NeoX/OPT/OLMo 2, Llama/Phi-3/SmolLM2, Qwen, Gemma, BART, mBART,
# M2M-100/NLLB, Marian, Pegasus, T5) and the generic fast tokenizer.
TOKENIZER_CLASSES = frozenset({
    "PreTrainedTokenizerFast", "TokenizersBackend", "GPT2Tokenizer", "GPTNeoXTokenizer", "CodeGenTokenizer",
    "LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer", "Qwen2Tokenizer", "BartTokenizer",
    "RobertaTokenizer", "MBartTokenizer", "MBart50Tokenizer", "M2M100Tokenizer", "NllbTokenizer",
    "MarianTokenizer", "PegasusTokenizer", "T5Tokenizer", "BertTokenizer", "BloomTokenizer",
})
GENERIC = "TokenizersBackend"
MAX_FILE_BYTES = 64 * MIB  # the largest real tokenizer.json files (256k vocabularies) are ~33 MB
MAX_TOTAL_BYTES = 160 * MIB
MAX_CONFIG_BYTES = 1 * MIB
MAX_TEMPLATE_BYTES = 1 * MIB  # templates render only up to 100,000 characters (chat_template.TemplateLimits)
# Peak memory of loading a tokenizer, in multiples of its files' size: 5.5-6.3x measured for SmolLM2's
# 3.5 MB tokenizer.json (transformers 5, warm process); 12 leaves room for other vocabularies' layouts.
PARSE_FACTOR = 12
# Settings that name files, folders or code: never passed on (transformers resolves its files by name).
_FILE_SETTING = re.compile(r"(_file|_files|_path|_dir)$")
_DROPPED_SETTINGS = {"auto_map", "name_or_path", "fast_tokenizer_files", "tokenizer_file", "vocab", "merges",
                     "spm_file", "source_spm", "target_spm", "init_inputs"}
TOKEN_IDS_HINT = "type token ids separated by commas instead (e.g. 1, 2, 3)"


def load_directory_tokenizer(directory: Path, memory_bytes: int | None = None) -> tuple[Any | None, str | None]:
    """(tokenizer, None) or (None, one line saying why text input is unavailable).

    `memory_bytes`: what parsing the tokenizer may take (the memory budget left after the model).
    """
    try:
        present = [name for name in TOKENIZER_FILES if (directory / name).exists() or (directory / name).is_symlink()]
    except OSError:
        present = []
    if not present:
        return None, f"no tokenizer files in {directory.name} (tokenizer.json, tokenizer_config.json...); {TOKEN_IDS_HINT}"
    try:
        return _load(directory, memory_bytes), None
    except CheckpointError as error:
        return None, f"{error}; {TOKEN_IDS_HINT}"
    except Exception as error:  # noqa: BLE001 - tokenizer libraries raise many types; the model stays usable
        return None, (f"the tokenizer files in {directory.name} could not be read ({type(error).__name__}: "
                      f"{_neutral(error)}); {TOKEN_IDS_HINT}")


def _load(directory: Path, memory_bytes: int | None) -> Any:
    if memory_bytes is not None:  # before anything is parsed: the sizes the folder claims (reads are bounded too)
        _check_memory(sum(_size(directory / name) for name in {*TOKENIZER_FILES, *COMMON_FILES}), memory_bytes)
    settings = read_folder_json(directory, "tokenizer_config.json", MAX_FILE_BYTES) or {}
    config = read_folder_json(directory, "config.json", MAX_CONFIG_BYTES) or {}
    auto_map = config.get("auto_map")
    if settings.get("auto_map") or (isinstance(auto_map, dict) and "AutoTokenizer" in auto_map):
        raise CheckpointError(
            "the tokenizer asks for code shipped with the checkpoint (auto_map), which is never run here; "
            "save it as a standard tokenizer (tokenizer.json)"
        )
    has_json = (directory / "tokenizer.json").exists()
    class_name = _class_name(settings, config, has_json)
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    cls = tokenizer_class_from_name(class_name)
    if cls is None:
        raise CheckpointError(f"tokenizer class {class_name!r} is not available here; save the tokenizer with a "
                              "tokenizer.json")
    names = list(dict.fromkeys([*COMMON_FILES, *getattr(cls, "vocab_files_names", {}).values()]))
    names += _extra_templates(directory)
    files: dict[str, bytes] = {}
    total = 0
    for name in names:
        data = read_folder_file(directory, name, MAX_TEMPLATE_BYTES if name.endswith(".jinja") else MAX_FILE_BYTES)
        if data is None:
            continue
        total += len(data)
        if total > MAX_TOTAL_BYTES:
            raise CheckpointError(f"the tokenizer files are over the {MAX_TOTAL_BYTES / MIB:,.0f} MiB allowed here; "
                                  "use a smaller vocabulary")
        files[name] = data
    if memory_bytes is not None:
        _check_memory(total, memory_bytes)
    files["tokenizer_config.json"] = json.dumps(_safe_settings(settings, class_name)).encode()
    model_type = config.get("model_type")
    files["config.json"] = json.dumps({"model_type": model_type} if isinstance(model_type, str) else {}).encode()
    staging = Path(tempfile.mkdtemp(prefix="playground-tokenizer-"))
    try:
        for name, data in files.items():
            target = staging / name
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(data)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(staging), local_files_only=True, trust_remote_code=False)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    tokenizer.name_or_path = directory.name  # not the staging folder
    if not getattr(tokenizer, "chat_template", None):
        template = _processor_template(directory)
        if template is not None:
            tokenizer.chat_template = template
    return tokenizer


def _size(path: Path) -> int:
    """A file's size if it is a regular file inside its checkpoint folder (a link out counts nothing here and is
    refused when read: its target's size must not show in a message)."""
    try:
        resolved = path.resolve(strict=True)
        inside = resolved.is_relative_to(checkpoint_root(path.parent))
        return resolved.stat().st_size if inside and resolved.is_file() else 0
    except (OSError, RuntimeError):
        return 0


def _check_memory(total: int, memory_bytes: int) -> None:
    if PARSE_FACTOR * total > memory_bytes:
        raise CheckpointError(f"loading {total / MIB:,.1f} MiB of tokenizer files needs about "
                              f"{PARSE_FACTOR * total / MIB:,.0f} MiB, more than the memory left for it here")


def _class_name(settings: dict[str, Any], config: dict[str, Any], has_json: bool) -> str:
    """The class transformers would use, if it is one of TOKENIZER_CLASSES; else the generic fast
    tokenizer over tokenizer.json; else a refusal."""
    named = settings.get("tokenizer_class") or config.get("tokenizer_class")
    if named is not None and not isinstance(named, str):
        raise CheckpointError("tokenizer_config.json: 'tokenizer_class' must be a class name (text)")
    model_type = config.get("model_type")
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    registered = TOKENIZER_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None
    for candidate in (named, registered):
        if candidate is not None and candidate.removesuffix("Fast") not in TOKENIZER_CLASSES:
            if has_json:
                return GENERIC
            raise CheckpointError(
                f"tokenizer class {candidate[:60]!r} is not one this app loads (it may read files named inside its "
                "own files); save the tokenizer with a tokenizer.json"
            )
    if named is not None:
        return named
    if registered is not None:
        return registered
    return GENERIC


def _safe_settings(settings: dict[str, Any], class_name: str) -> dict[str, Any]:
    """tokenizer_config.json without anything that names files, folders or code, at any depth (e.g.
    `sp_model_kwargs.model_file`, which sentencepiece would open); the class we checked."""
    safe = _without_files({k: v for k, v in settings.items() if isinstance(k, str) and k not in _DROPPED_SETTINGS})
    safe["tokenizer_class"] = class_name
    return safe


def _without_files(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_files(v) for k, v in value.items()
                if not (isinstance(k, str) and (_FILE_SETTING.search(k) or k == "model_proto"))}
    if isinstance(value, list):
        return [_without_files(v) for v in value]
    return value


def _extra_templates(directory: Path) -> list[str]:
    """Named chat templates (additional_chat_templates/<name>.jinja), as transformers reads them."""
    folder = directory / TEMPLATE_DIR
    try:
        if not folder.is_dir() or folder.is_symlink():
            return []
        names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".jinja"))
    except OSError:
        return []
    return [f"{TEMPLATE_DIR}/{name}" for name in names[:64]]


def _processor_template(directory: Path) -> str | None:
    """The template of a chat_template.json (where transformers' processors keep it), used only when
    neither tokenizer_config.json nor chat_template.jinja has one."""
    try:
        data = read_folder_json(directory, "chat_template.json", MAX_TEMPLATE_BYTES)
    except CheckpointError:  # a processor's file the tokenizer itself never reads: a broken one costs no text input
        return None
    template = (data or {}).get("chat_template")
    return template if isinstance(template, str) and template else None


_ABSOLUTE_PATH = re.compile(r"(?:[A-Za-z]:)?[/\\][^\s'\",:;()]+")


def _neutral(error: BaseException) -> str:
    """An error's first line with any path in it reduced to its last part (never a server folder)."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    return _ABSOLUTE_PATH.sub(lambda m: re.split(r"[/\\]", m.group(0))[-1] or "…", text)[:200]


def tokenizer_from_json(tokenizer_json: str, settings: dict[str, Any] | None = None) -> Any:
    """A fast tokenizer from a tokenizer.json string plus special-token settings (our own format)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    if settings is not None and not isinstance(settings, dict):
        raise CheckpointError("the embedded tokenizer settings are not a JSON object")
    # The settings come from the file's metadata: nothing in them that names files or code is passed on.
    settings = _without_files({k: v for k, v in (settings or {}).items()
                               if isinstance(k, str) and k not in _DROPPED_SETTINGS})
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer_json), **settings)


def tokenizer_to_json(tokenizer: Any) -> tuple[str, dict[str, Any]]:
    """Serialise a fast tokenizer into (tokenizer.json string, special-token settings)."""
    backend = tokenizer.backend_tokenizer if hasattr(tokenizer, "backend_tokenizer") else tokenizer
    settings: dict[str, Any] = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = getattr(tokenizer, key, None)
        if isinstance(value, str):
            settings[key] = value
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        settings["chat_template"] = template
    return backend.to_str(), settings


def dumps_settings(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True)


# What a tokenizer's panic says to a person: what it was doing when it failed, and what to do.
_PANIC_NOTES = {
    "encode": ("this tokenizer could not read the prompt: change or shorten it, or pick another model",
               "tokenizer_panic_encode"),
    "decode": ("this tokenizer could not turn the tokens into text: pick another model", "tokenizer_panic_decode"),
}


def is_panic(error: BaseException) -> bool:
    """A Rust panic inside `tokenizers` (pyo3's PanicException): a BaseException, so past every `except
    Exception`. A tokenizer.json's split pattern that backtracks too long (Oniguruma's retry limit) raises one."""
    return type(error).__name__ == "PanicException" and not isinstance(error, Exception)


def guarded(call: Callable[..., T], *args: Any, doing: str = "encode", **kwargs: Any) -> T:
    """`call(*args, **kwargs)`, with a tokenizer's panic turned into one TokenizerError line (`doing`: "encode"
    or "decode"). Every encode and decode of a loaded tokenizer goes through here (`LoadedModel.tokenize`,
    `detokenize`); KeyboardInterrupt, SystemExit and GeneratorExit pass as they are."""
    try:
        return call(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as error:
        if not is_panic(error):
            raise
        log.info("the tokenizer panicked (%s): %s", doing, _neutral(error))  # Rust has printed its own note
        text, key = _PANIC_NOTES[doing]
        raise TokenizerError(Note(text, key)) from None
