"""Which checkpoints the app offers, and the only way a name from the browser becomes a path.

Names are what travel through the UI and links: "tiny-lm", "imports/foo", "upload/3f2a.../".
`resolve` maps a name to a path strictly inside the weights folder or the upload folder (no
absolute paths, no "..", no symlinks pointing out); anything else is refused with a message.
Uploads are copied into a fresh folder per upload, keeping only safetensors and small text files.
No Gradio here.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from playground.checkpoints.safetensors_io import PICKLE_SUFFIXES
from playground.errors import PlaygroundError

DEFAULT_DECODER = "tiny-lm"
DEFAULT_SEQ2SEQ = "tiny-seq2seq"
SMOLLM2 = "SmolLM2-135M-Instruct"
UPLOAD_PREFIX = "upload/"
HUB_PREFIX = "hub/"  # "hub/owner/name": a checkpoint downloaded from the Hugging Face Hub
# A checkpoint folder's files: weights, config, tokenizer. Nothing executable, nothing pickled.
ALLOWED_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".jinja")
MAX_TEXT_FILE_BYTES = 64 * 1024 * 1024  # tokenizer.json of big vocabularies is ~10-20 MB
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SAFE_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")


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
            return f" · {arch}" if arch else ""
        except (OSError, ValueError, IndexError, TypeError):
            return ""
    return ""


class Catalog:
    """Checkpoints under `weights_dir` (depth ≤ 2), uploads under `upload_dir`, Hub downloads under `hub_dir`."""

    def __init__(self, weights_dir: Path | str, upload_dir: Path | str | None = None,
                 hub_dir: Path | str | None = None) -> None:
        self.weights_dir = Path(weights_dir).resolve()
        if upload_dir is None:
            upload_dir = Path(tempfile.gettempdir()) / "playground-uploads"
        self.upload_dir = Path(upload_dir).resolve()
        self.upload_dir.mkdir(parents=True, exist_ok=True)
        self.hub_dir = Path(hub_dir).resolve() if hub_dir is not None else self.upload_dir.parent / "playground-hub"

    # --- listing ---------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return [e.name for e in self.entries()]

    def entries(self) -> list[Entry]:
        """Defaults first (decoder, seq2seq, SmolLM2 when imported), then the rest, then uploads."""
        found: list[str] = []
        if self.weights_dir.is_dir():
            for child in sorted(self.weights_dir.iterdir()):
                if child.name.startswith("."):
                    continue
                if child.is_file() and child.suffix == ".safetensors":
                    found.append(child.name)
                elif _is_checkpoint_dir(child):
                    found.append(child.name)
                elif child.is_dir():
                    found += [f"{child.name}/{g.name}" for g in sorted(child.iterdir()) if _is_checkpoint_dir(g)]
        order = {DEFAULT_DECODER: 0, DEFAULT_SEQ2SEQ: 1, SMOLLM2: 2}
        found.sort(key=lambda n: (order.get(n, 3), n))
        entries = []
        for name in found:
            tag = {DEFAULT_DECODER: " (default decoder)", DEFAULT_SEQ2SEQ: " (default seq2seq)"}.get(name, "")
            entries.append(Entry(name, name + tag + _describe(self.weights_dir / name)))
        for up in sorted(self.upload_dir.iterdir(), key=lambda p: p.stat().st_mtime):
            if up.is_dir() and _SAFE_UPLOAD_ID.match(up.name) and _is_checkpoint_dir(up):
                files = sorted(p.name for p in up.iterdir() if p.suffix == ".safetensors")
                entries.append(Entry(UPLOAD_PREFIX + up.name, f"uploaded: {', '.join(files)} [{up.name[:8]}]"))
        if self.hub_dir.is_dir():
            for owner in sorted(self.hub_dir.iterdir()):
                for repo in sorted(owner.iterdir()) if owner.is_dir() else []:
                    if _SAFE_NAME.match(owner.name) and _SAFE_NAME.match(repo.name) and _is_checkpoint_dir(repo):
                        rid = f"{owner.name}/{repo.name}"
                        entries.append(Entry(HUB_PREFIX + rid, f"Hub: {rid}"))
        return entries

    def default_name(self) -> str | None:
        names = self.names()
        return DEFAULT_DECODER if DEFAULT_DECODER in names else (names[0] if names else None)

    # --- name -> path ----------------------------------------------------------------------------

    def resolve(self, name: str) -> Path:
        """The checkpoint path for a catalog name, guaranteed inside the allowed folders."""
        if not isinstance(name, str) or not name.strip():
            raise PlaygroundError("no model selected; pick one from the list or upload a .safetensors file")
        name = name.strip()
        if name.startswith(UPLOAD_PREFIX):
            root, rel = self.upload_dir, name[len(UPLOAD_PREFIX):].strip("/")
            if not _SAFE_UPLOAD_ID.match(rel):
                raise PlaygroundError(f"'{name}' is not an upload of this server; upload the file again")
        elif name.startswith(HUB_PREFIX):
            root, rel = self.hub_dir, name[len(HUB_PREFIX):]
            if not all(_SAFE_NAME.match(part) for part in rel.split("/")) or rel.count("/") != 1:
                raise PlaygroundError(f"'{name}' is not a Hub download of this server; load the repo id again")
        else:
            root, rel = self.weights_dir, name
        parts = rel.split("/")
        if rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts) or len(parts) > 2:
            raise PlaygroundError(f"'{name}' is not a checkpoint name; pick one from the list")
        path = (root / rel).resolve()
        if not path.is_relative_to(root):
            raise PlaygroundError(f"'{name}' points outside the checkpoint folders; pick one from the list")
        if not path.exists():
            raise PlaygroundError(f"no checkpoint named '{name}' here; pick one from the list or upload it")
        return path

    # --- uploads ---------------------------------------------------------------------------------

    def save_upload(self, files: Iterable[str | Path], max_bytes: int) -> str:
        """Copy uploaded files into a new folder; return its catalog name.

        Accepts one .safetensors file (our own format carries config + tokenizer) or the files of a
        checkpoint folder (config.json, model.safetensors, tokenizer files). Refuses pickles, other
        file types, duplicate names and totals over `max_bytes` before copying anything.
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
                    f"{base}: not accepted; upload .safetensors weights and the folder's .json/.txt config "
                    "and tokenizer files"
                )
            if base in names:
                raise PlaygroundError(f"two uploaded files are both called {base}; upload one checkpoint at a time")
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
        upload_id = uuid.uuid4().hex
        target = self.upload_dir / upload_id
        target.mkdir()
        try:
            for base, src in names.items():
                shutil.copyfile(src, target / base)
        except OSError as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise PlaygroundError(f"could not store the upload ({exc.strerror}); try again") from None
        return UPLOAD_PREFIX + upload_id

    def discard_upload(self, name: str) -> None:
        """Delete an upload folder (after a failed load) so broken files do not pile up."""
        if name.startswith(UPLOAD_PREFIX):
            try:
                path = self.resolve(name)
            except PlaygroundError:
                return
            shutil.rmtree(path, ignore_errors=True)
