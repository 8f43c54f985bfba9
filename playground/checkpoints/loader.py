"""`load_model`: a checkpoint on disk -> our own model, config and tokenizer.

Accepted inputs:
- a Hugging Face directory: config.json + model.safetensors (or a sharded model.safetensors.index.json)
  + tokenizer files;
- our own single .safetensors file whose metadata carries the config (see own_format.py), or a
  directory holding exactly one such file.
Pickle-based files (.bin, .pt...) are refused: unpickling can execute code.

Order of checks, so that a lying file costs nothing: file sizes and tensor count (headers only) ->
the config's claims against the file (`check_file_holds`: counts and sizes by arithmetic) -> the
memory estimate (weights, position tables and their construction, module objects, a KV cache) ->
names, dtypes and shapes of every tensor (headers only) -> the copies -> only then the module.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from playground.checkpoints.expected import state_layout
from playground.checkpoints.families import family_for
from playground.checkpoints.folder_files import checkpoint_root, read_folder_json
from playground.checkpoints.limits import Limits, check_file_holds, check_file_sizes, check_memory, estimate_load
from playground.checkpoints.own_format import is_own_format
from playground.checkpoints.safetensors_io import PICKLE_SUFFIXES, TensorReader, read_header, refuse_pickle
from playground.checkpoints.tokenizer import TOKEN_IDS_HINT, load_directory_tokenizer, tokenizer_from_json
from playground.checkpoints.weight_map import Rule, build_state_dict, expand_layers
from playground.config import ModelConfig
from playground.errors import CheckpointError, ConfigError
from playground.loaded import LoadedModel
from playground.models import build_model, reset_buffers

log = logging.getLogger("playground.checkpoints")
MAX_CONFIG_BYTES = 1024 * 1024
NO_TOKENIZER = f"the tokenizer was not loaded (load_model(..., tokenizer=False)); {TOKEN_IDS_HINT}"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def load_model(
    path: str | Path,
    device: str = "cpu",
    dtype: str = "float32",
    *,
    limits: Limits | None = None,
    tokenizer: bool = True,
    compile: bool | str | None = None,
) -> LoadedModel:
    """Load a checkpoint into playground's own model classes (see module docstring).

    `limits` (default `Limits.default()`) caps file size and estimated memory before any tensor is read.
    `tokenizer=False` skips the tokenizer files (token-id input only; parsing a large tokenizer.json
    can take longer than the weights). `compile=True` ("auto"): decode steps run captured
    (`generation.captured`; each step shape is captured on its first run) where a run allows it; the rest
    decodes eagerly and says why. True takes the device's own way: on CUDA, CUDA graphs captured by hand
    (on an H200: tokens equal to eager on every family, one host sync a step; Inductor failed on one shape
    there), elsewhere `torch.compile(fullgraph=True)`. A backend by name: "inductor" (torch.compile; on
    CUDA replayed as CUDA graphs), "cudagraph" (CUDA graphs by hand, no compiler: ZeroGPU's way; a model
    on the CPU then decodes as usual), "eager" (the captured step uncompiled). None: $PLAYGROUND_COMPILE
    (1, auto or a backend; unset, empty or 0: off), which
    `python app.py --compile` sets for every model it loads.
    """
    started = time.perf_counter()
    limits = limits or Limits.default()
    if dtype not in DTYPES:
        raise CheckpointError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    torch_dtype = DTYPES[dtype]
    target = usable_device(device)
    path = Path(path)
    try:
        if not path.exists():
            raise CheckpointError(f"{path.name}: no such file or directory; pass a checkpoint folder or a .safetensors file")
        if path.is_dir():
            loaded = _load_directory(path, torch_dtype, limits, tokenizer)
        else:
            loaded = _load_file(path, torch_dtype, limits, tokenizer)
    except OSError as error:  # names the file only: the folder it sits in may be a server path
        raise CheckpointError(os_error_line(error, path)) from None
    (model, estimate), config, tokenizer, tokenizer_error, reader = loaded
    model.to(target).eval()
    model.prepare()  # layouts inference reads besides the weights (the tied head's copy)
    backend = _compile_backend(compile, target)
    captured = None
    if backend == "cudagraph" and target.type != "cuda":
        backend = None  # CUDA graphs need a GPU: a CPU copy (ZeroGPU's page models) decodes eagerly
    if backend is not None:
        from playground.generation.captured import CapturedDecoder

        mode = "reduce-overhead" if target.type == "cuda" and backend == "inductor" else None
        try:
            captured = CapturedDecoder(model, backend=backend, mode=mode)
        except ValueError as error:
            raise CheckpointError(str(error)) from None
    return LoadedModel(
        model=model,
        config=config,
        tokenizer=tokenizer,
        tokenizer_error=tokenizer_error,
        path=path,
        device=target,
        dtype=torch_dtype,
        file_bytes=reader.total_bytes,
        load_seconds=time.perf_counter() - started,
        limits=limits,
        resident_bytes=estimate.resident,
        captured=captured,
    )


def compile_requested() -> bool:
    """Whether models load with their captured decode steps by default ($PLAYGROUND_COMPILE: `app.py --compile`)."""
    return _compile_backend(None, torch.device("cuda")) is not None


def _compile_backend(compile: bool | str | None, device: torch.device) -> str | None:
    """The captured decoding backend `compile` asks for on `device` (None: none), $PLAYGROUND_COMPILE when
    None. True picks the device's: CUDA graphs by hand on CUDA, torch.compile elsewhere."""
    if compile is None:
        compile = os.environ.get("PLAYGROUND_COMPILE", "").strip().lower()
        compile = False if compile in ("", "0", "false", "no") else compile
    if compile is True or compile in ("1", "true", "yes", "auto"):
        return "cudagraph" if device.type == "cuda" else "inductor"
    return compile or None


def usable_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device this machine has, or a CheckpointError saying what to use instead."""
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise CheckpointError(f"device {device!r} is not a device name; use cpu (or cuda / mps where present)") from None
    if target.type == "cpu":
        return target
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise CheckpointError(f"device {device!r}: no CUDA GPU is available here; use --device cpu")
        if target.index is not None and target.index >= torch.cuda.device_count():
            raise CheckpointError(
                f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s); use cuda:0"
            )
        return target
    if target.type == "mps":
        if not torch.backends.mps.is_available():
            raise CheckpointError(f"device {device!r}: Apple's MPS is not available here; use --device cpu")
        return target
    raise CheckpointError(f"device {device!r} is not supported; use cpu, cuda or mps")


def _load_directory(directory: Path, dtype: torch.dtype, limits: Limits, with_tokenizer: bool):
    refuse_outside_links(directory)
    config_path = directory / "config.json"
    if not config_path.exists():
        own = [
            p for p in directory.glob("*.safetensors")
            if is_own_format(read_header(p, max_tensors=limits.max_tensors).metadata)
        ]
        if len(own) == 1:
            return _load_file(own[0], dtype, limits, with_tokenizer)
        pickles = sorted(p.name for p in directory.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
        if pickles:
            refuse_pickle(directory / pickles[0])
        raise CheckpointError(
            f"{directory.name}: no config.json and no playground .safetensors file; "
            "a checkpoint folder needs config.json + model.safetensors (Hugging Face layout)"
        )
    hf_config = _read_json(config_path)
    family = family_for(hf_config, where=f"{directory.name}/config.json")
    try:
        config = family.config_from_hf(hf_config)
    except CheckpointError:
        raise
    except ConfigError as error:
        raise CheckpointError(f"{directory.name}/config.json: {error}") from None
    except (TypeError, ValueError, ArithmeticError) as error:  # e.g. a string where a size belongs
        raise CheckpointError(f"{directory.name}/config.json: invalid field values ({error})") from None
    files = _weight_files(directory)
    check_file_sizes({f.name: f.stat().st_size for f in files}, limits)
    reader = TensorReader.open(files, max_tensors=limits.max_tensors)
    prefix = next((p for p in family.prefixes if p + family.probe in reader), family.prefixes[0])
    if family.adapt is not None:
        config = family.adapt(config, reader, prefix)
    layout, estimate = _check_claims(config, reader, dtype, limits, directory.name)
    # Parsing tokenizer files is pure Python; the weight copies below release the GIL: overlap them.
    with ThreadPoolExecutor(max_workers=1) as pool:
        left = limits.memory_budget_bytes - estimate.resident
        tokenizer_job = pool.submit(load_directory_tokenizer, directory, left) if with_tokenizer else None
        rules = family.rules(config)
        model = _build(config, layout.shapes(), rules, reader, dtype, family.ignore, prefix, directory.name)
        tokenizer, tokenizer_error = tokenizer_job.result() if tokenizer_job else (None, NO_TOKENIZER)
    return (model, estimate), config, tokenizer, tokenizer_error, reader


def _check_claims(config: ModelConfig, reader: TensorReader, dtype: torch.dtype, limits: Limits, where: str):
    """What the config implies, against the file and the memory budget: arithmetic only, nothing built."""
    layout = state_layout(config)
    check_file_holds(layout, reader.headers, where)
    estimate = estimate_load(layout, config, dtype.itemsize, limits.cache_tokens)
    check_memory(estimate, limits, where)
    return layout, estimate


def _load_file(path: Path, dtype: torch.dtype, limits: Limits, with_tokenizer: bool):
    refuse_pickle(path)
    if path.suffix.lower() != ".safetensors":
        raise CheckpointError(f"{path.name}: not a .safetensors file; only safetensors checkpoints are loaded")
    check_file_sizes({path.name: path.stat().st_size}, limits)
    header = read_header(path, max_tensors=limits.max_tensors)
    if not is_own_format(header.metadata):
        if (path.parent / "config.json").exists():
            return _load_directory(path.parent, dtype, limits, with_tokenizer)
        raise CheckpointError(
            f"{path.name}: no playground config in the file's metadata and no config.json beside it; "
            "put the file in a folder with its config.json"
        )
    try:
        config = ModelConfig.from_dict(json.loads(header.metadata["config"]))
    except (json.JSONDecodeError, RecursionError) as error:
        raise CheckpointError(f"{path.name}: config in the metadata is not valid JSON ({error})") from None
    except ConfigError as error:
        raise CheckpointError(f"{path.name}: {error}") from None
    reader = TensorReader([header])
    layout, estimate = _check_claims(config, reader, dtype, limits, path.name)
    model = _build(config, layout.shapes(), None, reader, dtype, (), "", path.name)
    tokenizer, tokenizer_error = _own_tokenizer(path, header.metadata) if with_tokenizer else (None, NO_TOKENIZER)
    return (model, estimate), config, tokenizer, tokenizer_error, reader


def _own_tokenizer(path: Path, metadata: dict[str, str]):
    if "tokenizer" in metadata:
        try:
            settings = json.loads(metadata.get("tokenizer_settings", "{}"))
            return tokenizer_from_json(metadata["tokenizer"], settings), None
        except Exception as error:  # a broken embedded tokenizer must not hide a good model
            return None, f"{path.name}: embedded tokenizer is unreadable ({type(error).__name__}); {TOKEN_IDS_HINT}"
    return load_directory_tokenizer(path.parent)


def os_error_line(error: OSError, path: Path) -> str:
    """One line for an OSError met while loading `path`: the reason and the file's own name, never the
    folders above it (a server path)."""
    name = Path(error.filename).name if isinstance(error.filename, str) and error.filename else path.name
    reason = error.strerror or type(error).__name__
    return f"{name[:80]}: could not be read ({reason}); check the checkpoint's files and try again"


def _build(
    config: ModelConfig,
    expected: dict[str, tuple[int, ...]],
    rules: list[Rule] | None,
    reader: TensorReader,
    dtype: torch.dtype,
    ignore: tuple[str, ...],
    prefix: str,
    where: str,
) -> torch.nn.Module:
    """Validate and convert the tensors against `expected` (the config's state dict, see
    `state_layout`), then build on the meta device and adopt them without a second allocation."""

    def convert(shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
        # rules=None: our own format, whose tensor names are our state dict; names and shapes are still checked.
        expanded = ([Rule(name, (name,)) for name in shapes] if rules is None
                    else expand_layers(rules, config.n_layers, config.n_encoder_layers))
        return build_state_dict(reader, expanded, expected_shapes=shapes, ignore=ignore, prefix=prefix, dtype=dtype,
                                where=where)

    state = convert(expected)  # a refusal comes from here, before any module exists
    with torch.device("meta"):
        model = build_model(config)
    actual = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if actual != expected:
        # The arithmetic layout missed part of this model's structure (a bug; tests/library/test_budget.py checks
        # every family): validate and convert again against the module itself, so loading stays right.
        log.warning("state layout of %s differs from its module (%s); validating against the module",
                    config.family, next(iter(set(actual) ^ set(expected)), "shapes"))
        state = convert(actual)
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as error:
        missing = sorted(set(actual) - set(state))
        detail = f"no weights for {missing[0]}" if missing else str(error).splitlines()[0]
        raise CheckpointError(f"{where}: {detail}") from None
    reset_buffers(model)
    return model


def refuse_outside_links(directory: Path) -> None:
    """Refuse a checkpoint folder holding symbolic links to files outside it.

    Reading such a link would read its target: a header-length or JSON error would then show the
    target's first bytes and its size. A Hugging Face cache snapshot (models--owner--name/snapshots/
    <revision>/) links into its repo's blobs/ folder, which counts as inside.
    """
    root = checkpoint_root(directory)
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.resolve().is_relative_to(root):
            raise CheckpointError(
                f"{directory.name}/{entry.name} is a symbolic link to a file outside the checkpoint folder; "
                "copy the file itself into the folder"
            )


def _weight_files(directory: Path) -> list[Path]:
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.exists():
        return [single]
    if index.exists():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index.name}: missing or empty 'weight_map'")
        bad = [v for v in weight_map.values() if not isinstance(v, str)]
        if bad:
            raise CheckpointError(
                f"{index.name}: 'weight_map' values must be shard file names (strings), got "
                f"{type(bad[0]).__name__}; fix the index"
            )
        files = []
        for name in sorted(set(weight_map.values())):
            shard = (directory / str(name)).resolve()
            if shard.parent != directory.resolve() or shard.suffix != ".safetensors":
                raise CheckpointError(f"{index.name}: shard {name!r} is not a .safetensors file inside the folder")
            if not shard.exists():
                raise CheckpointError(f"{index.name}: shard {name} is missing from {directory.name}")
            files.append(shard)
        return files
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
    if pickles:
        refuse_pickle(directory / pickles[0])
    raise CheckpointError(f"{directory.name}: no model.safetensors or model.safetensors.index.json found")


def _read_json(path: Path) -> dict[str, Any]:
    data = read_folder_json(path.parent, path.name, MAX_CONFIG_BYTES)  # a regular file inside, within budget
    if data is None:
        raise CheckpointError(f"{path.name}: missing from the checkpoint folder")
    return data


def preflight(path: str | Path, limits: Limits | None = None) -> None:
    """Raise the CheckpointError `load_model(path)` would raise before reading any tensor: the config
    (family, fields), the weight files, their headers and the config's claims against them, the memory
    budget. Headers only: cheap enough to check every offered checkpoint when the app starts."""
    limits = limits or Limits.default()
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path.name}: no such file or directory (a broken link?)")
    if path.is_file():
        refuse_pickle(path)
        if path.suffix.lower() != ".safetensors":
            raise CheckpointError(f"{path.name}: not a .safetensors file")
        header = read_header(path, max_tensors=limits.max_tensors)
        if not is_own_format(header.metadata):
            raise CheckpointError(f"{path.name}: no playground config in the file's metadata and no config.json beside it")
        try:
            config = ModelConfig.from_dict(json.loads(header.metadata["config"]))
        except (json.JSONDecodeError, RecursionError, ConfigError) as error:
            raise CheckpointError(f"{path.name}: config in the metadata is unusable ({error})") from None
        _check_claims(config, TensorReader([header]), torch.float32, limits, path.name)
        return
    refuse_outside_links(path)
    if not (path / "config.json").exists():
        own = [p for p in path.glob("*.safetensors") if is_own_format(read_header(p, max_tensors=limits.max_tensors).metadata)]
        if len(own) != 1:
            raise CheckpointError(f"{path.name}: no config.json and no playground .safetensors file")
        return preflight(own[0], limits)
    hf_config = _read_json(path / "config.json")
    family = family_for(hf_config, where=f"{path.name}/config.json")
    try:
        config = family.config_from_hf(hf_config)
    except CheckpointError:
        raise
    except (ConfigError, TypeError, ValueError, ArithmeticError) as error:
        raise CheckpointError(f"{path.name}/config.json: {error}") from None
    files = _weight_files(path)
    check_file_sizes({f.name: f.stat().st_size for f in files}, limits)
    reader = TensorReader.open(files, max_tensors=limits.max_tensors)
    if family.adapt is not None:
        prefix = next((p for p in family.prefixes if p + family.probe in reader), family.prefixes[0])
        config = family.adapt(config, reader, prefix)
    _check_claims(config, reader, torch.float32, limits, path.name)
