"""Which checkpoints the app offers, to whom, and the only way a name from the browser becomes a path.

Names are what travel through the UI and links: "tiny-lm", "imports/foo", "upload/3f2a...",
"hub/owner/name". `resolve` maps a name to a path: a shipped or operator checkpoint only by looking
the name up in the listing of the weights folders (the shipped folder, then those given with
`app.py --weights DIR`; each checkpoint checked with `loader.preflight`, so only what loads is
listed and `unavailable()` says why the rest is not), a preloaded repo in the Hugging Face cache, or
a path strictly inside the owner's own upload and Hub folders (no absolute paths, no "..", no
symlinks pointing out); anything else is refused with one line. No Gradio here.

Visitors are private to each other. Every call that lists, stores or resolves uploads takes an
`owner`: an opaque id of the visitor (the page passes Gradio's session hash). Shipped checkpoints
(the weights folder) and preloaded Hub repos (found in the Hugging Face cache, offline) are offered
to everyone; an upload or Hub download is listed and resolved only for the owner who made it. For
anyone else its name resolves to the same one line as a name that never existed, so names cannot
be probed. `owner=None` is the machine's single local user (scripts, tests, `python app.py` for
yourself); a catalog built with `private=True` (the public app) refuses it.

Storage: uploads live in `upload_dir/@<hash of owner>/<upload id>/`, Hub downloads in
`hub_dir/@<hash of owner>/<org>/<repo>/` (`owner=None`: directly under `upload_dir` / `hub_dir`).
They expire `ttl_seconds` after their last use and share a disk quota of `quota_bytes`; each owner
keeps at most `owner_quota_bytes` of it. A new upload first makes room among its owner's own (least
recently used first), then, if the server is full, among everyone's that are not in use (`in_use`: the
folders the pages have open), least recently used first; it is refused rather than take a folder in use. An evicted folder's
owner is told: at their next upload (`evicted_since`) and when they ask for it (`resolve`). Defaults
from the environment:
- PLAYGROUND_UPLOAD_TTL_SECONDS (default 3600: an hour after its last use);
- PLAYGROUND_UPLOAD_QUOTA_BYTES (default 16 GiB, for uploads and Hub downloads together);
- PLAYGROUND_UPLOAD_OWNER_QUOTA_BYTES (default half the quota).
`forget(owner)` deletes everything an owner made (call it when their session ends) and returns the
folders removed, for `ModelRegistry.drop_under`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

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
from playground.checkpoints.safetensors_io import PICKLE_SUFFIXES
from playground.errors import PlaygroundError

log = logging.getLogger("playground.ui")

DEFAULT_DECODER = "tiny-lm"
DEFAULT_SEQ2SEQ = "tiny-seq2seq"
SMOLLM2 = "SmolLM2-135M-Instruct"
UPLOAD_PREFIX = "upload/"
HUB_PREFIX = "hub/"  # "hub/owner/name": a checkpoint downloaded from the Hugging Face Hub
# A checkpoint folder's files: weights, config, tokenizer. Nothing executable, nothing pickled.
ALLOWED_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".spm", ".jinja")
MAX_TEXT_FILE_BYTES = 64 * 1024 * 1024  # tokenizer.json of big vocabularies is ~10-20 MB
PRIVATE_UPLOAD = "this upload is private to the visitor who made it"
EVICTED = ("this upload was removed to make room for newer uploads (each visitor keeps a share of the server's "
           "space); upload it again")
PRIVATE_HUB = "this Hub download is private to the visitor who made it; type its repo id to download it yourself"
DEFAULT_TTL_SECONDS = 3600
DEFAULT_QUOTA_BYTES = 16 * 1024**3
MAX_EVICTED_REMEMBERED = 4096  # evicted folders whose owners are still told why they went
MAX_NAME_CHARS = 272  # longer than any catalog name ("hub/" + two Hub names of at most 128 characters)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# An upload's folder: what it is, its size and a random part that keeps it unique and unguessable
# ("llama-12.3MB-4f1c0a9e2b7d"); the older bare 32-hex ids are still read.
_SAFE_UPLOAD_ID = re.compile(r"^(?:[0-9a-f]{32}|[a-z0-9_]{1,32}-[0-9]+(?:\.[0-9])?[KMG]?B-[0-9a-f]{12})$")
_KIND_CHARS = re.compile(r"[^a-z0-9_]+")
MAX_KIND_BYTES = 1024 * 1024  # config.json is read for its model_type only


@dataclass(frozen=True)
class Entry:
    name: str  # catalog name (dropdown value, link parameter)
    label: str  # what the dropdown shows


def _is_checkpoint_dir(path: Path) -> bool:
    if not path.is_dir() or path.name.startswith("."):
        return False
    files = [p for p in path.iterdir() if p.is_file()]
    has_weights = any(p.suffix == ".safetensors" or p.name == "model.safetensors.index.json" for p in files)
    return has_weights


def _describe(path: Path) -> str:
    """A short kind label from config.json, if any (cheap: no tensor is read)."""
    config = path / "config.json" if path.is_dir() else None
    if config is not None and config.is_file() and config.stat().st_size < 1_000_000:
        try:
            data = json.loads(config.read_text())
            arch = (data.get("architectures") or [data.get("model_type", "")])[0]
            # Checkpoint text in a label every visitor sees: only a plain class name, never markup.
            return f" · {arch}" if isinstance(arch, str) and _SAFE_NAME.match(arch) else ""
        except (OSError, ValueError, IndexError, TypeError, AttributeError):
            return ""
    return ""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise PlaygroundError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise PlaygroundError(f"{name} must be positive, got {value}")
    return value


def _folder_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def remove_sources(paths: Iterable[str | Path]) -> None:
    """Delete the temporary copies a refused upload arrived in (Gradio's cache), and their folder if now empty."""
    for p in paths:
        path = Path(p)
        try:
            if path.is_file() or path.is_symlink():
                path.unlink()
            path.parent.rmdir()  # Gradio keeps each upload in a folder of its own; fails if not empty
        except OSError:
            pass


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link when both are on one disk (no second copy of a large checkpoint), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


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
    ) -> None:
        self.weights_dir = Path(weights_dir).resolve()
        # The shipped folder first, then the operator's own (`python app.py --weights DIR`): a name
        # found in an earlier folder wins.
        self.weights_dirs = list(dict.fromkeys([self.weights_dir] + [Path(d).resolve() for d in extra_weights_dirs]))
        self.prefer_preloaded = prefer_preloaded  # a Space opens on the real model it preloaded
        self._checked: dict[str, tuple[tuple, str | None]] = {}  # folder -> (its files' stats, problem or None)
        self._unavailable: dict[str, str] = {}  # name -> why it is not offered (names and reasons only)
        self._logged_no_template: set[str] = set()
        self._shadowed: dict[str, Path] = {}
        self._odd_names: set[Path] = set()
        if upload_dir is None:
            upload_dir = Path(tempfile.gettempdir()) / "playground-uploads"
        self.upload_dir = Path(upload_dir).resolve()
        self.upload_dir.mkdir(parents=True, exist_ok=True)
        self.hub_dir = Path(hub_dir).resolve() if hub_dir is not None else self.upload_dir.parent / "playground-hub"
        self.private = private
        self.ttl_seconds = ttl_seconds if ttl_seconds is not None else _env_int("PLAYGROUND_UPLOAD_TTL_SECONDS", DEFAULT_TTL_SECONDS)
        self.quota_bytes = quota_bytes if quota_bytes is not None else _env_int("PLAYGROUND_UPLOAD_QUOTA_BYTES", DEFAULT_QUOTA_BYTES)
        self._owner_quota_bytes = owner_quota_bytes if owner_quota_bytes is not None else _env_int(
            "PLAYGROUND_UPLOAD_OWNER_QUOTA_BYTES", 0)
        # The folders some page has open now (the app sets it): never evicted for another owner's upload.
        self.in_use: Callable[[], Iterable[Path]] = lambda: ()
        self._evicted: dict[Path, bool] = {}  # evicted folder -> its owner was told at an upload (oldest first)
        self.hf_cache_dir = Path(hf_cache_dir) if hf_cache_dir is not None else None
        self.preloaded = PRELOADED if preloaded is None else preloaded
        self.clock = clock
        self._lock = threading.RLock()  # storing, evicting and forgetting do not interleave

    # --- owners ----------------------------------------------------------------------------------

    def _owner_key(self, owner: str | None) -> str | None:
        if owner is None:
            if self.private:
                raise ValueError("this catalog is private: pass the visitor's owner id (e.g. the session hash)")
            return None
        if not isinstance(owner, str) or not owner:
            raise ValueError("owner must be a non-empty string (e.g. Gradio's session hash)")
        # '@' never starts an upload id or a Hub org name, so owner folders cannot be mistaken for either.
        return "@" + hashlib.sha256(owner.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    @property
    def owner_quota_bytes(self) -> int:
        """What one owner may keep: the configured share, or half the server's quota."""
        return min(self._owner_quota_bytes or self.quota_bytes // 2, self.quota_bytes)

    def owner_upload_dir(self, owner: str | None) -> Path:
        key = self._owner_key(owner)
        return self.upload_dir if key is None else self.upload_dir / key

    def hub_dir_for(self, owner: str | None) -> Path:
        """Where `owner`'s Hub downloads go (pass it to `hub.download_checkpoint`, or use `download_hub`)."""
        key = self._owner_key(owner)
        return self.hub_dir if key is None else self.hub_dir / key

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
                if not child.name.startswith(".") and not _SAFE_NAME.match(child.name) and child not in self._odd_names:
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
            if child.name.startswith(".") or not _SAFE_NAME.match(child.name):
                continue
            if child.is_symlink() and not child.exists():
                out.append((child.name, child))  # a broken link: listed as unavailable, with its reason
            elif child.is_file() and child.suffix == ".safetensors":
                out.append((child.name, child))
            elif _is_checkpoint_dir(child) or (child.is_dir() and (child / "config.json").is_file()):
                out.append((child.name, child))
            elif child.is_dir():
                out += [(f"{child.name}/{g.name}", g) for g in sorted(child.iterdir())
                        if _SAFE_NAME.match(g.name) and _is_checkpoint_dir(g)]
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
            if name in shipped or not _SAFE_NAME.match(name):
                continue
            try:
                folder = Path(snapshot_download(repo_id, local_files_only=True, allow_patterns=list(files),
                                                cache_dir=self.hf_cache_dir))
            except Exception:  # noqa: BLE001 - not in the cache (LocalEntryNotFoundError and friends)
                continue
            required = [f for f in PRELOADED_REQUIRED if f in files]
            if all((folder / f).exists() for f in required) and _is_checkpoint_dir(folder):
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
        self.sweep()
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
        for up in self._uploads(owner):
            files = sorted(p.name for p in up.iterdir() if p.suffix == ".safetensors")
            entries.append(Entry(UPLOAD_PREFIX + up.name, upload_label(up.name, files, lang)))
        for repo in self._hub_downloads(owner):
            rid = f"{repo.parent.name}/{repo.name}"
            entries.append(Entry(HUB_PREFIX + rid, t("model_hub", lang, repo=rid)))
        return entries

    def _uploads(self, owner: str | None) -> list[Path]:
        root = self.owner_upload_dir(owner)
        if not root.is_dir():
            return []
        found = [p for p in root.iterdir() if _SAFE_UPLOAD_ID.match(p.name) and _is_checkpoint_dir(p)]
        return sorted(found, key=lambda p: p.stat().st_mtime)

    def _hub_downloads(self, owner: str | None) -> list[Path]:
        root = self.hub_dir_for(owner)
        if not root.is_dir():
            return []
        return [
            repo for org in sorted(root.iterdir()) if org.is_dir() and _SAFE_NAME.match(org.name)
            for repo in sorted(org.iterdir()) if _SAFE_NAME.match(repo.name) and _is_checkpoint_dir(repo)
        ]

    def default_name(self) -> str | None:
        """The model a page opens on: on a Space the real model it preloaded when it is in the cache,
        otherwise the shipped default decoder (or the first checkpoint offered)."""
        return self._default(self.shared_paths(), self.preloaded_paths())

    def _default(self, shared: dict[str, Path], preloaded: dict[str, Path]) -> str | None:
        if self.prefer_preloaded and preloaded:
            return next(iter(preloaded))
        names = list(shared) + list(preloaded)
        return DEFAULT_DECODER if DEFAULT_DECODER in names else (names[0] if names else None)

    def is_shared(self, path: Path | str) -> bool:
        """Whether a resolved path is offered to everyone (shipped or preloaded), not an owner's file."""
        path = Path(path).resolve()
        return not (path.is_relative_to(self.upload_dir) or path.is_relative_to(self.hub_dir))

    # --- name -> path ----------------------------------------------------------------------------

    def resolve(self, name: str, owner: str | None = None) -> Path:
        """The checkpoint path for a catalog name, guaranteed inside the folders `owner` may read.

        An upload or Hub download of another owner, or one that does not exist (or expired), gives
        the same one line, so names cannot be probed. Resolving one counts as using it (its time to
        live starts again).
        """
        if not isinstance(name, str) or not name.strip():
            raise PlaygroundError("no model selected; pick one from the list or upload a .safetensors file")
        name = name.strip()
        if len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
            raise PlaygroundError(f"'{shown_name(name)}' is not a checkpoint name; pick one from the list")
        private = None
        if name.startswith(UPLOAD_PREFIX):
            root, rel, private = self.owner_upload_dir(owner), name[len(UPLOAD_PREFIX):].strip("/"), PRIVATE_UPLOAD
            if not _SAFE_UPLOAD_ID.match(rel):
                raise PlaygroundError(PRIVATE_UPLOAD)
        elif name.startswith(HUB_PREFIX):
            root, rel, private = self.hub_dir_for(owner), name[len(HUB_PREFIX):], PRIVATE_HUB
            if not all(_SAFE_NAME.match(part) for part in rel.split("/")) or rel.count("/") != 1:
                raise PlaygroundError(f"'{shown_name(name)}' is not a Hub download name; type the repo id as owner/name")
        else:
            parts = name.split("/")
            if "\\" in name or any(p in ("", ".", "..") for p in parts) or len(parts) > 2:
                raise PlaygroundError(f"'{name}' is not a checkpoint name; pick one from the list")
            shared = self.shared_paths()  # only what the listing offers: a name is looked up, never joined
            if name in shared:
                return shared[name]
            preloaded = self.preloaded_paths()
            if name in preloaded:
                return preloaded[name]
            raise PlaygroundError(f"no checkpoint named '{name}' here; pick one from the list or upload it")
        parts = rel.split("/")
        if rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts) or len(parts) > 2:
            raise PlaygroundError(f"'{shown_name(name)}' is not a checkpoint name; pick one from the list")
        try:
            path = (root / rel).resolve()
            if not path.is_relative_to(root):
                raise PlaygroundError(private or f"'{shown_name(name)}' points outside the checkpoint folders; pick one from the list")
            exists = path.exists()
        except OSError:  # a name the file system cannot hold: its message would show the server's folder
            raise PlaygroundError(private or f"'{shown_name(name)}' is not a checkpoint name; pick one from the list") from None
        if not exists:
            with self._lock:
                evicted = path in self._evicted
            if evicted:
                raise PlaygroundError(EVICTED)
            raise PlaygroundError(private or f"no checkpoint named '{shown_name(name)}' here; pick one from the list or upload it")
        if private is not None:
            self._touch(path)
        return path

    def _touch(self, path: Path) -> None:
        try:
            now = self.clock()
            os.utime(path, (now, now))
        except OSError:
            pass

    # --- uploads ---------------------------------------------------------------------------------

    def save_upload(self, files: Iterable[str | Path], max_bytes: int, owner: str | None = None) -> str:
        """Store uploaded files in a new folder of `owner`'s; return its catalog name.

        Accepts one .safetensors file (our own format carries config + tokenizer) or the files of a
        checkpoint folder (config.json, model.safetensors, tokenizer files). Refuses pickles, other
        file types, duplicate names and totals over `max_bytes` or the disk quota before storing
        anything. The given files are linked (or copied), never moved: Gradio keeps an upload under
        the hash of its bytes, so two visitors who upload the same file hold the same path, and
        taking it from one would break the other. Gradio's cache cleaner removes them
        (`build_app` sets `delete_cache`); the page deletes refused ones at once (`remove_sources`).
        """
        paths = [Path(f) for f in files if f]
        if not paths:
            raise PlaygroundError("no file received; choose a .safetensors file (plus config/tokenizer files)")
        names: dict[str, Path] = {}
        total = 0
        for p in paths:
            base = Path(p.name).name
            if p.suffix.lower() in PICKLE_SUFFIXES:
                raise PlaygroundError(
                    f"{base}: pickle-based checkpoints can run code when opened and are refused; "
                    "convert it to .safetensors first"
                )
            if not _SAFE_NAME.match(base) or not base.lower().endswith(ALLOWED_SUFFIXES):
                raise PlaygroundError(
                    f"{base}: not accepted; upload .safetensors weights and the folder's config and tokenizer "
                    "files (.json, .txt, .model, .spm, .jinja)"
                )
            if base in names:
                raise PlaygroundError(f"two uploaded files are both called {base}; upload one checkpoint at a time")
            if p.is_symlink():
                raise PlaygroundError(f"{base}: not a regular file; upload the file itself")
            if not p.is_file():
                raise PlaygroundError(f"{base}: the upload is no longer on the server; upload it again")
            size = p.stat().st_size
            if not base.endswith(".safetensors") and size > MAX_TEXT_FILE_BYTES:
                raise PlaygroundError(f"{base}: {size / 2**20:.1f} MiB is too large for a config or tokenizer file")
            total += size
            names[base] = p
        if not any(n.endswith(".safetensors") for n in names):
            raise PlaygroundError("no .safetensors file among the uploaded files; the weights must be safetensors")
        if total > max_bytes:
            raise PlaygroundError(
                f"the upload is {total / 2**20:,.1f} MiB, over the {max_bytes / 2**20:,.1f} MiB limit for checkpoints "
                "here; use a smaller model"
            )
        with self._lock:
            self.make_room(total, owner)
            target = self.owner_upload_dir(owner) / upload_id(names)
            target.mkdir(parents=True)
            try:
                for base, src in names.items():
                    link_or_copy(src, target / base)
            except OSError as exc:
                shutil.rmtree(target, ignore_errors=True)
                raise PlaygroundError(f"could not store the upload ({exc.strerror}); try again") from None
            self._touch(target)
        return UPLOAD_PREFIX + target.name

    def discard_upload(self, name: str, owner: str | None = None) -> Path | None:
        """Delete an upload (after a failed load) so broken files do not pile up; returns its folder."""
        if not name.startswith((UPLOAD_PREFIX, HUB_PREFIX)):
            return None
        try:
            path = self.resolve(name, owner)
        except PlaygroundError:
            return None
        with self._lock:
            shutil.rmtree(path, ignore_errors=True)
        return path

    def download_hub(self, repo_id: str, owner: str | None, max_bytes: int | None = None) -> str:
        """Download a Hub repo's checkpoint into `owner`'s folder (within the quota); return its catalog name."""
        from playground.checkpoints.hub import download_checkpoint, validate_repo_id

        rid = validate_repo_id(repo_id)
        download_checkpoint(rid, self.hub_dir_for(owner), max_bytes=max_bytes,
                            make_room=lambda incoming: self.make_room(incoming, owner))
        self._touch(self.hub_dir_for(owner) / rid)
        return HUB_PREFIX + rid

    # --- expiry, quota, end of session -----------------------------------------------------------

    def _stored(self) -> list[tuple[Path, Path]]:
        """(folder, root it belongs under) of every upload and Hub download of every owner."""
        out: list[tuple[Path, Path]] = []
        for root, depth in ((self.upload_dir, 1), (self.hub_dir, 2)):
            if not root.is_dir():
                continue
            owner_roots = [root] + [p for p in root.iterdir() if p.name.startswith("@") and p.is_dir()]
            for owner_root in owner_roots:
                level = [owner_root]
                for _ in range(depth):
                    level = [c for p in level for c in p.iterdir() if c.is_dir() and not c.name.startswith((".", "@"))]
                out += [(folder, owner_root) for folder in level]
        return out

    def sweep(self) -> list[Path]:
        """Delete uploads and Hub downloads unused for `ttl_seconds`; return the folders removed."""
        removed = []
        with self._lock:
            cutoff = self.clock() - self.ttl_seconds
            for folder, _ in self._stored():
                try:
                    if folder.stat().st_mtime < cutoff:
                        shutil.rmtree(folder, ignore_errors=True)
                        removed.append(folder)
                except OSError:
                    pass
        return removed

    def make_room(self, incoming: int, owner: str | None = None) -> list[Path]:
        """Evict until `incoming` more bytes of `owner`'s fit: first `owner`'s own least recently used
        folders down to their share, then the least recently used folders no page has open (anyone's)
        down to the server's quota. Refused, with nothing evicted, when only folders in use would do."""
        share = self.owner_quota_bytes
        if incoming > share:
            raise PlaygroundError(
                f"{incoming / 2**20:,.1f} MiB is more than this server keeps for uploads and Hub downloads "
                f"({share / 2**20:,.1f} MiB per visitor); use a smaller model"
            )
        mine = {self.owner_upload_dir(owner).resolve(), self.hub_dir_for(owner).resolve()}
        in_use = {Path(p).resolve() for p in self.in_use()}
        with self._lock:
            stored = sorted(((f.stat().st_mtime, f, _folder_bytes(f), root.resolve() in mine)
                             for f, root in self._stored()), key=lambda e: e[0])
            used = sum(size for _, _, size, _ in stored)
            own = sum(size for _, _, size, is_mine in stored if is_mine)
            victims = []
            for _, folder, size, is_mine in stored:
                if own + incoming <= share:
                    break
                if is_mine:
                    victims.append(folder)
                    own -= size
                    used -= size
            for _, folder, size, _ in stored:
                if used + incoming <= self.quota_bytes:
                    break
                if folder not in victims and folder.resolve() not in in_use:
                    victims.append(folder)
                    used -= size
            if used + incoming > self.quota_bytes:
                raise PlaygroundError(
                    f"the server's space for uploads is full of models other visitors are using; try again in a "
                    f"while or use a model under {max(self.quota_bytes - used, 0) / 2**20:,.1f} MiB"
                )
            for folder in victims:
                shutil.rmtree(folder, ignore_errors=True)
                self._evicted[folder.resolve()] = False
            while len(self._evicted) > MAX_EVICTED_REMEMBERED:
                del self._evicted[next(iter(self._evicted))]
        return victims

    def evicted_since(self, owner: str | None) -> list[str]:
        """Names of `owner`'s folders evicted since the last call (each is told once)."""
        roots = {self.owner_upload_dir(owner).resolve(): UPLOAD_PREFIX, self.hub_dir_for(owner).resolve(): HUB_PREFIX}
        out = []
        with self._lock:
            for folder, told in self._evicted.items():
                for root, prefix in roots.items():
                    if not told and folder.is_relative_to(root) and folder != root:
                        rel = folder.relative_to(root)
                        if prefix == UPLOAD_PREFIX and len(rel.parts) == 1 or prefix == HUB_PREFIX and len(rel.parts) == 2:
                            out.append(prefix + rel.as_posix())
                            self._evicted[folder] = True
        return out

    def stored_path(self, name: str, owner: str | None) -> Path | None:
        """The folder of `owner`'s upload or Hub download `name` (whether or not it still exists), without
        counting as a use; None for any other name."""
        if not isinstance(name, str):
            return None
        if name.startswith(UPLOAD_PREFIX):
            rel = name[len(UPLOAD_PREFIX):].strip("/")
            return self.owner_upload_dir(owner).resolve() / rel if _SAFE_UPLOAD_ID.match(rel) else None
        if name.startswith(HUB_PREFIX):
            parts = name[len(HUB_PREFIX):].split("/")
            if len(parts) == 2 and all(_SAFE_NAME.match(p) for p in parts):
                return self.hub_dir_for(owner).resolve().joinpath(*parts)
        return None

    def forget(self, owner: str) -> list[Path]:
        """Delete everything `owner` uploaded or downloaded (their session ended); return the folders
        removed (pass them to `ModelRegistry.drop_under`)."""
        if owner is None:
            raise ValueError("forget() needs the visitor's owner id")
        removed = []
        with self._lock:
            for root in (self.owner_upload_dir(owner), self.hub_dir_for(owner)):
                if root.is_dir():
                    shutil.rmtree(root, ignore_errors=True)
                    removed.append(root)
        return removed


def shown_name(name: str, limit: int = 40) -> str:
    """A name as a message quotes it: at most `limit` characters (a 300-character name is not repeated)."""
    return name if len(name) <= limit else name[:limit] + "…"


def upload_id(files: dict[str, Path]) -> str:
    """A new upload's folder name: its kind (config.json's model_type, else the weights file's name), the
    size of its weights and 12 random hex digits, e.g. "llama-12.3MB-4f1c0a9e2b7d"."""
    kind = ""
    config = files.get("config.json")
    try:
        if config is not None and config.stat().st_size <= MAX_KIND_BYTES:
            model_type = json.loads(config.read_bytes()).get("model_type")
            kind = model_type if isinstance(model_type, str) else ""
    except (OSError, ValueError, AttributeError, RecursionError):  # the loader says what is wrong with it
        kind = ""
    if not kind:
        weights = sorted(n for n in files if n.endswith(".safetensors"))
        kind = weights[0].removesuffix(".safetensors") if weights else "upload"
    kind = _KIND_CHARS.sub("_", kind.lower()).strip("_")[:32] or "upload"
    size = sum(p.stat().st_size for n, p in files.items() if n.endswith(".safetensors"))
    return f"{kind}-{_short_size(size)}-{uuid.uuid4().hex[:12]}"


def _short_size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return f"{n}B"


def upload_label(folder: str, files: list[str], lang: str = "en") -> str:
    """What the model list shows for an upload: "uploaded: llama · 12.3MB · model.safetensors [4f1c0a]"."""
    if "-" not in folder:  # an older upload named by its random id alone
        return t("model_uploaded", lang, what=f"{', '.join(files)} [{folder[:8]}]")
    kind, size, rand = folder.rsplit("-", 2)
    return t("model_uploaded", lang, what=f"{kind} · {size} · {', '.join(files)} [{rand[:6]}]")
