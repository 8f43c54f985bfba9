"""Which checkpoints the app offers, to whom, and what the model list says about them.

The shipped folder, then those given with `app.py --weights DIR` (each checkpoint checked with
`loader.preflight`, so only what loads is listed and `unavailable()` says why the rest is not), preloaded
Hub repos found in the Hugging Face cache (offline), then each owner's own uploads and Hub downloads.
Visitors are private to each other: every call that lists, stores or resolves uploads takes an `owner`,
an opaque id of the visitor (the page passes Gradio's session hash); `owner=None` is the machine's single
local user (scripts, tests, `python app.py` for yourself), refused by a catalog built with `private=True`.

The catalog puts three parts together: the listing (here), name -> path (`playground.app.names`, the
security boundary) and the storage of uploads with their quota and time to live (`playground.app.uploads`,
reached as `catalog.uploads`). No Gradio here.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from playground.app import names as naming
from playground.app.uploads import HUB_PREFIX, SAFE_NAME, UPLOAD_PREFIX, Uploads, is_checkpoint_dir, upload_label
from playground.app.words import t
from playground.checkpoints.card import Card, parse_card, read_card
from playground.checkpoints.hub import (
    CHAT_TEMPLATE_FILES,
    PRELOADED,
    PRELOADED_CARDS,
    PRELOADED_REQUIRED,
    fetch_chat_template,
    has_chat_template,
)

log = logging.getLogger("playground.app")

DEFAULT_DECODER = "tiny-lm"
DEFAULT_SEQ2SEQ = "tiny-seq2seq"
SMOLLM2 = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class Entry:
    name: str  # catalog name (dropdown value, link parameter)
    label: str  # what the dropdown shows


# The task heads a class name ends with: the family is what comes before ("LlamaForCausalLM" -> "Llama").
HEAD_SUFFIXES = ("ForConditionalGeneration", "ForSeq2SeqLM", "ForCausalLM", "LMHeadModel", "Model")


def family(arch: str) -> str:
    """A model class's family name, short enough for the dropdown: "LlamaForCausalLM" -> "Llama",
    "Gemma3ForCausalLM" -> "Gemma3", "T5ForConditionalGeneration" -> "T5", "GPT2LMHeadModel" -> "GPT2"."""
    for suffix in HEAD_SUFFIXES:
        if arch.endswith(suffix) and len(arch) > len(suffix):
            return arch[: -len(suffix)]
    return arch


def _describe(path: Path) -> str:
    """A short kind label from config.json, if any (cheap: no tensor is read): the model's family."""
    config = path / "config.json" if path.is_dir() else None
    if config is not None and config.is_file() and config.stat().st_size < 1_000_000:
        try:
            data = json.loads(config.read_text())
            arch = (data.get("architectures") or [data.get("model_type", "")])[0]
            # Checkpoint text in a label every visitor sees: only a plain class name, never markup.
            return f" · {family(arch)}" if isinstance(arch, str) and SAFE_NAME.match(arch) else ""
        except (OSError, ValueError, IndexError, TypeError, AttributeError):
            return ""
    return ""



class Catalog:
    """Checkpoints under `weights_dir` (depth ≤ 2), preloaded Hub repos in the Hugging Face cache,
    and each owner's uploads and Hub downloads (see the module docstring)."""

    def __init__(
        self,
        weights_dir: Path | str,
        upload_dir: Path | str | None = None,
        hub_dir: Path | str | None = None,
        *,
        private: bool = False,
        ttl_seconds: int | None = None,
        quota_bytes: int | None = None,
        owner_quota_bytes: int | None = None,
        hf_cache_dir: Path | str | None = None,
        preloaded: dict[str, tuple[str, ...]] | None = None,
        clock: Callable[[], float] = time.time,
        extra_weights_dirs: Iterable[Path | str] = (),
        prefer_preloaded: bool = False,
        default_model: str | None = None,
    ) -> None:
        self.weights_dir = Path(weights_dir).resolve()
        # The shipped folder first, then the operator's own (`python app.py --weights DIR`): a name
        # found in an earlier folder wins.
        self.weights_dirs = list(dict.fromkeys([self.weights_dir] + [Path(d).resolve() for d in extra_weights_dirs]))
        self.prefer_preloaded = prefer_preloaded  # a Space opens on the real model it preloaded
        self.default_model = default_model or None  # `app.py --default-model NAME`: pages open on it when offered
        self._checked: dict[str, tuple[tuple, str | None]] = {}  # folder -> (its files' stats, problem or None)
        self._unavailable: dict[str, str] = {}  # name -> why it is not offered (names and reasons only)
        self._logged_no_template: set[str] = set()
        self._shadowed: dict[str, Path] = {}
        self._odd_names: set[Path] = set()
        if upload_dir is None:
            import tempfile

            upload_dir = Path(tempfile.gettempdir()) / "playground-uploads"
        self.uploads = Uploads(upload_dir, hub_dir, private=private, ttl_seconds=ttl_seconds, quota_bytes=quota_bytes,
                               owner_quota_bytes=owner_quota_bytes, clock=clock)
        self.hf_cache_dir = Path(hf_cache_dir) if hf_cache_dir is not None else None
        self.preloaded = PRELOADED if preloaded is None else preloaded

    # --- listing ---------------------------------------------------------------------------------

    def names(self, owner: str | None = None) -> list[str]:
        return [e.name for e in self.entries(owner)]

    def _shipped(self) -> list[str]:
        return list(self.shared_paths())

    def shared_paths(self) -> dict[str, Path]:
        """Name -> path of every checkpoint in the weights folders that passes `preflight` (headers
        only); the others are left out, each with a reason in `unavailable()` and one log line.

        Links are followed: the operator put them there. Names from the browser only ever look up
        this map, so no name can reach anything else.
        """
        found: dict[str, Path] = {}
        unavailable: dict[str, str] = {}
        for root in self.weights_dirs:
            if not root.is_dir():
                if root != self.weights_dir:
                    unavailable[root.name] = "the folder given with --weights does not exist"
                continue
            for child in root.iterdir():  # links and dropdowns carry only plain names: the log says so once
                if not child.name.startswith(".") and not SAFE_NAME.match(child.name) and child not in self._odd_names:
                    self._odd_names.add(child)
                    log.warning("%r in the folder %s is not offered: rename it with letters, digits, '.', '_' and '-'",
                                child.name, root.name)
            for name, path in self._candidates(root):
                if name in found:  # the operator's concern, not a visitor's: the log only
                    if self._shadowed.get(name) != root:
                        self._shadowed[name] = root
                        log.info("checkpoint %s in the folder %s: the one of the same name listed first is offered",
                                 name, root.name)
                    continue
                problem = self._problem(path, name)
                if problem is None:
                    found[name] = path.resolve()
                else:
                    unavailable[name] = problem
        for name, why in unavailable.items():
            if self._unavailable.get(name) != why:
                log.warning("checkpoint %s is not offered: %s", name, why)
        self._unavailable = unavailable
        return found

    def unavailable(self) -> dict[str, str]:
        """Checkpoints of the weights folders left out at the last listing, and why (no server paths)."""
        return dict(self._unavailable)

    @staticmethod
    def _candidates(root: Path) -> list[tuple[str, Path]]:
        out: list[tuple[str, Path]] = []
        for child in sorted(root.iterdir()):
            if child.name.startswith(".") or not SAFE_NAME.match(child.name):
                continue
            if child.is_symlink() and not child.exists():
                out.append((child.name, child))  # a broken link: listed as unavailable, with its reason
            elif child.is_file() and child.suffix == ".safetensors":
                out.append((child.name, child))
            elif is_checkpoint_dir(child) or (child.is_dir() and (child / "config.json").is_file()):
                out.append((child.name, child))
            elif child.is_dir():
                out += [(f"{child.name}/{g.name}", g) for g in sorted(child.iterdir())
                        if SAFE_NAME.match(g.name) and is_checkpoint_dir(g)]
        return out

    def _problem(self, path: Path, name: str) -> str | None:
        """Why `path` would not load (one line naming only `name`), or None; remembered per file stats."""
        from playground.checkpoints.loader import preflight

        try:
            target = path.resolve()
            entries = [target] + (sorted(target.iterdir()) if target.is_dir() else [])
            stamp = tuple((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in entries)
        except OSError:
            return "the link points to nothing" if path.is_symlink() else "it cannot be read"
        cached = self._checked.get(str(path))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            preflight(target)
            problem = None
        except Exception as exc:  # noqa: BLE001 - any reason not to load is a reason not to offer it
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            for where in (str(target), str(path), str(target.parent), str(path.parent)):
                text = text.replace(where, name)
            problem = text
        self._checked[str(path)] = (stamp, problem)
        return problem

    def preloaded_paths(self) -> dict[str, Path]:
        """Catalog name -> snapshot folder of each preloaded repo present in the Hugging Face cache.

        Offline by construction (`local_files_only`): on a Space, `preload_from_hub` put the files
        there at build time; elsewhere the repo is simply not offered. A name already in the weights
        folders (an imported copy) wins. Its config and weights must be there; the chat template may
        be in either of its two files, and a model without one is offered without chat (logged).
        """
        try:
            from huggingface_hub import snapshot_download
        except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
            return {}
        shipped = set(self._shipped())
        out: dict[str, Path] = {}
        for repo_id, files in self.preloaded.items():
            name = repo_id.split("/")[-1]
            if name in shipped or not SAFE_NAME.match(name):
                continue
            try:
                folder = Path(snapshot_download(repo_id, local_files_only=True, allow_patterns=list(files),
                                                cache_dir=self.hf_cache_dir))
            except Exception:  # noqa: BLE001 - not in the cache (LocalEntryNotFoundError and friends)
                continue
            required = [f for f in PRELOADED_REQUIRED if f in files]
            if all((folder / f).exists() for f in required) and is_checkpoint_dir(folder):
                out[name] = folder
                if not has_chat_template(folder) and name not in self._logged_no_template:
                    self._logged_no_template.add(name)
                    if fetch_chat_template(repo_id, folder, self.hf_cache_dir):
                        log.info("preloaded %s: fetched its chat_template.jinja", repo_id)
                        continue
                    log.warning("preloaded %s has no chat template (%s): offered without chat", repo_id,
                                " or ".join(CHAT_TEMPLATE_FILES))
        return out

    def card(self, name: str, owner: str | None = None) -> Card:
        """What the page says about a model: its playground.json (or own-format card), or for a
        preloaded repo the card the app carries (the preload downloads only the Hub's files)."""
        preloaded = self.preloaded_paths()
        if name in preloaded:
            repo_id = next(r for r in self.preloaded if r.split("/")[-1] == name)
            card = parse_card(PRELOADED_CARDS.get(repo_id, {}))
            if not has_chat_template(preloaded[name]):
                note = {"en": " Its chat template was not downloaded, so Chat is off.",
                        "zh": " 它的对话模板没有下载,所以对话模式关闭。"}
                card = Card({lang: text + note[lang] for lang, text in card.description.items()}, card.example_prompt)
            return card
        return read_card(self.resolve(name, owner))

    def entries(self, owner: str | None = None, lang: str = "en") -> list[Entry]:
        """Defaults first (decoder, seq2seq, SmolLM2), then the rest, then `owner`'s uploads and Hub downloads;
        the labels' own words in `lang` (the names are the checkpoints')."""
        self.uploads.sweep()
        shared = self.shared_paths()
        preloaded = self.preloaded_paths()
        found = list(shared) + list(preloaded)
        order = {DEFAULT_DECODER: 0, DEFAULT_SEQ2SEQ: 1, SMOLLM2: 2, self._default(shared, preloaded): -1}
        found.sort(key=lambda n: (order.get(n, 3), n))
        entries = []
        for name in found:
            tag = {DEFAULT_DECODER: " " + t("model_default_decoder", lang),
                   DEFAULT_SEQ2SEQ: " " + t("model_default_seq2seq", lang)}.get(name, "")
            if name in preloaded:
                entries.append(Entry(name, f"{name} {t('model_preloaded', lang)}{_describe(preloaded[name])}"))
            else:
                entries.append(Entry(name, name + tag + _describe(shared[name])))
        for up in self.uploads.uploads(owner):
            files = sorted(p.name for p in up.iterdir() if p.suffix == ".safetensors")
            entries.append(Entry(UPLOAD_PREFIX + up.name, upload_label(up.name, files, lang)))
        for repo in self.uploads.hub_downloads(owner):
            rid = f"{repo.parent.name}/{repo.name}"
            entries.append(Entry(HUB_PREFIX + rid, t("model_hub", lang, repo=rid)))
        return entries

    def default_name(self) -> str | None:
        """The model a page opens on: the operator's choice (`--default-model`) when it is offered; else on a
        Space the real model it preloaded when it is in the cache, otherwise the shipped default decoder (or the
        first checkpoint offered)."""
        return self._default(self.shared_paths(), self.preloaded_paths())

    def default_offered(self) -> bool:
        """Whether the operator's `--default-model` (if any) is a model this catalog offers everyone."""
        return self.default_model is None or self.default_model in {**self.shared_paths(), **self.preloaded_paths()}

    def _default(self, shared: dict[str, Path], preloaded: dict[str, Path]) -> str | None:
        if self.default_model is not None and (self.default_model in shared or self.default_model in preloaded):
            return self.default_model
        if self.prefer_preloaded and preloaded:
            return next(iter(preloaded))
        names = list(shared) + list(preloaded)
        return DEFAULT_DECODER if DEFAULT_DECODER in names else (names[0] if names else None)

    def is_shared(self, path: Path | str) -> bool:
        """Whether a resolved path is offered to everyone (shipped or preloaded), not an owner's file."""
        return not self.uploads.is_stored(path)

    # --- name -> path (playground.app.names) ------------------------------------------------------

    def resolve(self, name: str, owner: str | None = None) -> Path:
        """The checkpoint path for a catalog name, guaranteed inside the folders `owner` may read."""
        return naming.resolve(name, owner, self.uploads, self._listed)

    def _listed(self, name: str) -> Path | None:
        return self.shared_paths().get(name) or self.preloaded_paths().get(name)

    def stored_path(self, name: str, owner: str | None) -> Path | None:
        return naming.stored_path(name, owner, self.uploads)

    # --- an owner's own checkpoints (playground.app.uploads) --------------------------------------

    def save_upload(self, files: Iterable[str | Path], max_bytes: int, owner: str | None = None,
                    visitor: str | None = None) -> str:
        return self.uploads.save_upload(files, max_bytes, owner, visitor)

    def download_hub(self, repo_id: str, owner: str | None, max_bytes: int | None = None,
                     visitor: str | None = None) -> str:
        return self.uploads.download_hub(repo_id, owner, max_bytes, visitor)

    def discard_upload(self, name: str, owner: str | None = None) -> Path | None:
        """Delete an upload (after a failed load) so broken files do not pile up; returns its folder."""
        if not name.startswith((UPLOAD_PREFIX, HUB_PREFIX)):
            return None
        try:
            path = self.resolve(name, owner)
        except ValueError:
            return None
        self.uploads.remove(path)
        return path
