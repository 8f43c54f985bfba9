"""Where visitors' uploads and Hub downloads are kept, for how long, and how much of the disk they may take.

Uploads live in `upload_dir/@<hash of owner>/<upload id>/`, Hub downloads in
`hub_dir/@<hash of owner>/<org>/<repo>/` (`owner=None`, the machine's single local user: directly under
`upload_dir` / `hub_dir`; a store built with `private=True`, the public app, refuses it). They expire
`ttl_seconds` after their last use (never while a page has them open) and share a disk quota of `quota_bytes`;
each owner (a page tab) keeps at most `owner_quota_bytes` of it, and each visitor (an address or an account, whose
tabs' folders stay private to each tab) at most `visitor_quota_bytes` over all its tabs, so that one address opening
many tabs or sessions cannot take more of the disk than one visitor's share. A new upload first makes room among its owner's own (least recently used
first), then, if the server is full, among everyone's that are not in use (`in_use`: the folders the pages
have open), least recently used first; it is refused rather than take a folder in use. An evicted folder's
owner is told: at their next upload (`evicted_since`) and when they ask for it (`was_evicted`); so is the owner of
a folder that expired, or went with its owner's session (`was_expired`). Defaults from
the environment:
- PLAYGROUND_UPLOAD_TTL_SECONDS (default 3600: an hour after its last use);
- PLAYGROUND_UPLOAD_QUOTA_BYTES (default 16 GiB, for uploads and Hub downloads together);
- PLAYGROUND_UPLOAD_OWNER_QUOTA_BYTES (default half the quota);
- PLAYGROUND_UPLOAD_VISITOR_QUOTA_BYTES (default half the quota, and never less than one owner's share: a class of
  30 behind one school address shares it, the other half stays for other addresses).
Which name reaches which folder is not decided here (`playground.app.names`). No Gradio here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from playground.app.notes import note
from playground.app.words import t
from playground.checkpoints.safetensors_io import PICKLE_SUFFIXES
from playground.errors import PlaygroundError

UPLOAD_PREFIX = "upload/"
HUB_PREFIX = "hub/"  # "hub/owner/name": a checkpoint downloaded from the Hugging Face Hub
# A checkpoint folder's files: weights, config, tokenizer. Nothing executable, nothing pickled.
ALLOWED_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".spm", ".jinja")
MAX_TEXT_FILE_BYTES = 64 * 1024 * 1024  # tokenizer.json of big vocabularies is ~10-20 MB
EVICTED = note("evicted")
EXPIRED = note("upload_expired")
DEFAULT_TTL_SECONDS = 3600
DEFAULT_QUOTA_BYTES = 16 * 1024**3
MAX_EVICTED_REMEMBERED = 4096  # evicted folders whose owners are still told why they went
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# An upload's folder: what it is, its size and a random part that keeps it unique and unguessable
# ("llama-12.3MB-4f1c0a9e2b7d"); the older bare 32-hex ids are still read.
SAFE_UPLOAD_ID = re.compile(r"^(?:[0-9a-f]{32}|[a-z0-9_]{1,32}-[0-9]+(?:\.[0-9])?[KMG]?B-[0-9a-f]{12})$")
_KIND_CHARS = re.compile(r"[^a-z0-9_]+")
MAX_KIND_BYTES = 1024 * 1024  # config.json is read for its model_type only


def is_checkpoint_dir(path: Path) -> bool:
    if not path.is_dir() or path.name.startswith("."):
        return False
    return any(p.is_file() and (p.suffix == ".safetensors" or p.name == "model.safetensors.index.json")
               for p in path.iterdir())


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


class _Stored(NamedTuple):
    """A stored folder as `make_room` weighs it, least recently used first."""

    folder: Path
    size: int
    mine: bool  # the uploading tab's own
    visitors: bool  # one of its visitor's tabs' (the uploading tab's included)
    open: bool  # some page has it open now: never evicted for another tab


class Uploads:
    """Each owner's uploads and Hub downloads on disk: storing, expiry, quota, end of session."""

    def __init__(
        self,
        upload_dir: Path | str,
        hub_dir: Path | str | None = None,
        *,
        private: bool = False,
        ttl_seconds: int | None = None,
        quota_bytes: int | None = None,
        owner_quota_bytes: int | None = None,
        visitor_quota_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.upload_dir = Path(upload_dir).resolve()
        self.upload_dir.mkdir(parents=True, exist_ok=True)
        self.hub_dir = Path(hub_dir).resolve() if hub_dir is not None else self.upload_dir.parent / "playground-hub"
        self.private = private
        self.ttl_seconds = ttl_seconds if ttl_seconds is not None else _env_int("PLAYGROUND_UPLOAD_TTL_SECONDS", DEFAULT_TTL_SECONDS)
        self.quota_bytes = quota_bytes if quota_bytes is not None else _env_int("PLAYGROUND_UPLOAD_QUOTA_BYTES", DEFAULT_QUOTA_BYTES)
        self._owner_quota_bytes = owner_quota_bytes if owner_quota_bytes is not None else _env_int(
            "PLAYGROUND_UPLOAD_OWNER_QUOTA_BYTES", 0)
        self._visitor_quota_bytes = visitor_quota_bytes if visitor_quota_bytes is not None else _env_int(
            "PLAYGROUND_UPLOAD_VISITOR_QUOTA_BYTES", 0)
        # owner folder ("@<hash>") -> its visitor: an owner's folders count toward its visitor's share too
        self._visitors: dict[str, str] = {}
        # The folders some page has open now (the app sets it): never evicted for another owner's upload.
        self.in_use: Callable[[], Iterable[Path]] = lambda: ()
        self._evicted: dict[Path, bool] = {}  # evicted folder -> its owner was told at an upload (oldest first)
        self._expired: dict[Path, None] = {}  # folders (or an owner's whole folder) gone with time or a session
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

    @property
    def visitor_quota_bytes(self) -> int:
        """What one visitor (an address, an account) may keep over all its tabs: the configured share, or half the
        server's quota; never less than one owner's share (a visitor's single tab keeps what a tab may)."""
        return min(max(self._visitor_quota_bytes or self.quota_bytes // 2, self.owner_quota_bytes), self.quota_bytes)

    def _note_visitor(self, owner: str | None, visitor: str | None) -> None:  # with self._lock held
        key = self._owner_key(owner)
        if key is not None and visitor:
            self._visitors[key] = visitor

    def owner_upload_dir(self, owner: str | None) -> Path:
        key = self._owner_key(owner)
        return self.upload_dir if key is None else self.upload_dir / key

    def hub_dir_for(self, owner: str | None) -> Path:
        """Where `owner`'s Hub downloads go (pass it to `hub.download_checkpoint`, or use `download_hub`)."""
        key = self._owner_key(owner)
        return self.hub_dir if key is None else self.hub_dir / key

    def is_stored(self, path: Path | str) -> bool:
        """Whether a resolved path is an owner's upload or Hub download (not a shipped or preloaded checkpoint)."""
        path = Path(path).resolve()
        return path.is_relative_to(self.upload_dir) or path.is_relative_to(self.hub_dir)

    # --- what an owner has -----------------------------------------------------------------------

    def uploads(self, owner: str | None) -> list[Path]:
        root = self.owner_upload_dir(owner)
        if not root.is_dir():
            return []
        found = [p for p in root.iterdir() if SAFE_UPLOAD_ID.match(p.name) and is_checkpoint_dir(p)]
        return sorted(found, key=lambda p: p.stat().st_mtime)

    def hub_downloads(self, owner: str | None) -> list[Path]:
        root = self.hub_dir_for(owner)
        if not root.is_dir():
            return []
        return [
            repo for org in sorted(root.iterdir()) if org.is_dir() and SAFE_NAME.match(org.name)
            for repo in sorted(org.iterdir()) if SAFE_NAME.match(repo.name) and is_checkpoint_dir(repo)
        ]

    def touch(self, path: Path) -> None:
        """A use of `path`: its time to live starts again."""
        try:
            now = self.clock()
            os.utime(path, (now, now))
        except OSError:
            pass

    def was_evicted(self, path: Path) -> bool:
        with self._lock:
            return path in self._evicted

    def was_expired(self, path: Path) -> bool:
        """Whether `path` went unused past its time to live, or with its owner's session (a tab gone or idle)."""
        with self._lock:
            return any(path == gone or path.is_relative_to(gone) for gone in self._expired)

    def _remember_expired(self, folder: Path) -> None:  # with self._lock held
        self._expired[folder.resolve()] = None
        while len(self._expired) > MAX_EVICTED_REMEMBERED:
            del self._expired[next(iter(self._expired))]

    # --- storing ---------------------------------------------------------------------------------

    def save_upload(self, files: Iterable[str | Path], max_bytes: int, owner: str | None = None,
                    visitor: str | None = None) -> str:
        """Store uploaded files in a new folder of `owner`'s (a tab of `visitor`'s); return its catalog name.

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
            if not SAFE_NAME.match(base) or not base.lower().endswith(ALLOWED_SUFFIXES):
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
            self.make_room(total, owner, visitor)
            target = self.owner_upload_dir(owner) / upload_id(names)
            target.mkdir(parents=True)
            try:
                for base, src in names.items():
                    link_or_copy(src, target / base)
            except OSError as exc:
                shutil.rmtree(target, ignore_errors=True)
                raise PlaygroundError(f"could not store the upload ({exc.strerror}); try again") from None
            self.touch(target)
        return UPLOAD_PREFIX + target.name

    def remove(self, path: Path) -> None:
        with self._lock:
            shutil.rmtree(path, ignore_errors=True)

    def download_hub(self, repo_id: str, owner: str | None, max_bytes: int | None = None,
                     visitor: str | None = None) -> str:
        """Download a Hub repo's checkpoint into `owner`'s folder (within the quotas of `owner` and its `visitor`);
        return its catalog name."""
        from playground.checkpoints.hub import download_checkpoint, validate_repo_id

        rid = validate_repo_id(repo_id)
        download_checkpoint(rid, self.hub_dir_for(owner), max_bytes=max_bytes,
                            make_room=lambda incoming: self.make_room(incoming, owner, visitor))
        self.touch(self.hub_dir_for(owner) / rid)
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
        """Delete uploads and Hub downloads unused for `ttl_seconds` that no page has open; return the folders
        removed (their owners are told they expired)."""
        removed = []
        in_use = {Path(p).resolve() for p in self.in_use()}
        with self._lock:
            cutoff = self.clock() - self.ttl_seconds
            for folder, _ in self._stored():
                try:
                    if folder.stat().st_mtime < cutoff and folder.resolve() not in in_use:
                        shutil.rmtree(folder, ignore_errors=True)
                        removed.append(folder)
                        self._remember_expired(folder)
                except OSError:
                    pass
        return removed

    def make_room(self, incoming: int, owner: str | None = None, visitor: str | None = None) -> list[Path]:
        """Evict until `incoming` more bytes of `owner`'s (a tab of `visitor`'s) fit: first `owner`'s own least
        recently used folders down to their share, then its visitor's other tabs' folders that no page has open
        down to the visitor's share, then the least recently used folders no page has open (anyone's) down to the
        server's quota. Refused, with nothing evicted, when only folders in use would do."""
        share = self.owner_quota_bytes
        if incoming > share:
            size, mib = f"{incoming / 2**20:,.1f}", f"{share / 2**20:,.1f}"
            raise PlaygroundError(note("quota_share", size=size, share=mib))
        mine = {self.owner_upload_dir(owner).resolve(), self.hub_dir_for(owner).resolve()}
        in_use = {Path(p).resolve() for p in self.in_use()}
        with self._lock:
            self._note_visitor(owner, visitor)
            theirs = {k for k, v in self._visitors.items() if v == visitor} if visitor else set()
            # (folder, size, owner's own, its visitor's, open in a page), least recently used first
            stored = [_Stored(f, _folder_bytes(f), root.resolve() in mine, root.name in theirs, f.resolve() in in_use)
                      for _, f, root in sorted((f.stat().st_mtime, f, root) for f, root in self._stored())]
            victims = self._victims(stored, incoming)
            for folder in victims:
                shutil.rmtree(folder, ignore_errors=True)
                self._evicted[folder.resolve()] = False
            while len(self._evicted) > MAX_EVICTED_REMEMBERED:
                del self._evicted[next(iter(self._evicted))]
        return victims

    def _victims(self, stored: list[_Stored], incoming: int) -> list[Path]:
        """The folders `make_room` evicts (see there), or the refusal's one line; `stored` as it lists them."""
        victims: list[Path] = []

        def evict(which: Callable[[_Stored], bool], held: int, bound: int) -> int:
            for e in stored:
                if held + incoming <= bound:
                    break
                if e.folder not in victims and which(e):
                    victims.append(e.folder)
                    held -= e.size
            return held

        evict(lambda e: e.mine, sum(e.size for e in stored if e.mine), self.owner_quota_bytes)
        if any(e.visitors for e in stored):  # its visitor's tabs (each one's folders private): only those no page has open
            held = sum(e.size for e in stored if e.visitors and e.folder not in victims)
            held = evict(lambda e: e.visitors and not e.open, held, self.visitor_quota_bytes)
            if held + incoming > self.visitor_quota_bytes:
                raise PlaygroundError(note("quota_visitor", held=f"{held / 2**20:,.1f}",
                                           share=f"{self.visitor_quota_bytes / 2**20:,.1f}"))
        used = sum(e.size for e in stored if e.folder not in victims)
        used = evict(lambda e: not e.open, used, self.quota_bytes)
        if used + incoming > self.quota_bytes:
            raise PlaygroundError(note("quota_full", room=f"{max(self.quota_bytes - used, 0) / 2**20:,.1f}"))
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
                    self._remember_expired(root)  # the tab may come back (a phone waking): it is told why
            self._visitors.pop(self._owner_key(owner) or "", None)
        return removed


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
