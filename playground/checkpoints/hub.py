"""Download a checkpoint from the Hugging Face Hub by repo id (online only), safetensors only.

Only the files `load_model` needs are fetched: `*.safetensors` weights, `*.json` configs and
tokenizer files (`tokenizer.json`, `tokenizer_config.json`, `vocab.json`, `merges.txt`,
`tokenizer.model`, a chat template). Pickled weights (`.bin`, `.pt`, `.pth`, `.ckpt`) and Python
files are never downloaded, and nothing is run: our own model code loads the weights, there is no
`trust_remote_code`. The repo's listed size is checked against a budget before anything is
downloaded. Offline, every call fails with one message starting "no network: ".
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from playground.errors import PlaygroundError

# Hub repos a Space downloads at build time (README front matter `preload_from_hub`, written by
# `python -m playground deploy-space`), which the app's catalog offers from the Hugging Face cache.
# The files are those load_model needs, and only files the repo has (a listed file the repo lacks may
# fail the Space's build). The chat template lives in tokenizer_config.json (older uploads, SmolLM2's)
# or in chat_template.jinja (transformers 5 writes it there): when the preloaded copy has neither, the
# app fetches chat_template.jinja once at start where the Hub is reachable (`fetch_chat_template`).
PRELOADED: dict[str, tuple[str, ...]] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"),
}
PRELOADED_REQUIRED = ("config.json", "model.safetensors")  # without these a preloaded repo is not offered
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "tokenizer_config.json")
# What the app says about each preloaded model: the preload does not download our playground.json.
PRELOADED_CARDS: dict[str, dict[str, object]] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": {
        "description": {
            "en": "SmolLM2-135M-Instruct: a small instruction-tuned chat model (Chat is on: it answers your message).",
            "zh": "SmolLM2-135M-Instruct:一个小型指令微调对话模型(已开启对话模式:它会回答你的消息)。",
        },
        "example_prompt": "What is the capital of France?",
    },
}


def has_chat_template(folder: Path) -> bool:
    """Whether a checkpoint folder carries a chat template in either place transformers reads it from."""
    if (folder / "chat_template.jinja").is_file():
        return True
    config = folder / "tokenizer_config.json"
    try:
        return config.is_file() and config.stat().st_size < 64 * 2**20 and bool(
            json.loads(config.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return False


def fetch_chat_template(repo_id: str, folder: Path, cache_dir: Path | str | None = None) -> bool:
    """Best effort, online only: put the repo's chat_template.jinja beside a preloaded snapshot that has
    no template (same revision, so it lands in `folder`). False when offline, absent or unreachable."""
    if offline() or folder.parent.name != "snapshots":
        return False
    try:
        from huggingface_hub import hf_hub_download

        hf_hub_download(repo_id, "chat_template.jinja", revision=folder.name, cache_dir=cache_dir, etag_timeout=5)
    except Exception:  # noqa: BLE001 - no such file, no network: the model is offered without chat
        return False
    return has_chat_template(folder)


# Tokenizer files by the families' names: tokenizer.model / spiece.model / sentencepiece.bpe.model, Marian's .spm.
ALLOW_PATTERNS = ["*.safetensors", "*.json", "*.txt", "*.model", "*.spm", "*.jinja"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


class NoNetworkError(PlaygroundError):
    """The Hub cannot be reached (offline mode, no route, DNS, timeout)."""


def validate_repo_id(repo_id: str) -> str:
    """'owner/name' with safe characters (it becomes a folder name), or a PlaygroundError."""
    rid = (repo_id or "").strip()
    if not _REPO_ID.match(rid) or ".." in rid:
        raise PlaygroundError(f"'{rid}' is not a Hub repo id; write it as owner/name, e.g. HuggingFaceTB/SmolLM2-135M")
    return rid


def allowed(filename: str) -> bool:
    """Whether a repo file is one we download (weights as safetensors, configs, tokenizer files)."""
    base = filename.rsplit("/", 1)[-1]
    return "/" not in filename and any(fnmatch.fnmatch(base, pat) for pat in ALLOW_PATTERNS)


def offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARS)


def _no_network(repo_id: str, why: str) -> NoNetworkError:
    return NoNetworkError(f"no network: cannot reach the Hugging Face Hub to download '{repo_id}' ({why}); "
                          "download its .safetensors and config/tokenizer files elsewhere and upload them, "
                          "or pick a model from the list")


def download_checkpoint(repo_id: str, cache_dir: Path | str, *, revision: str | None = None,
                        max_bytes: int | None = None, endpoint: str | None = None,
                        make_room: Callable[[int], object] | None = None) -> Path:
    """Fetch `repo_id`'s safetensors checkpoint into `cache_dir/owner/name`; return that folder.

    `make_room(total_bytes)` runs once the listed size is known, before anything is downloaded (the
    catalog evicts old uploads to keep its disk quota, or refuses)."""
    rid = validate_repo_id(repo_id)
    if offline():
        raise _no_network(rid, "offline mode is on (HF_HUB_OFFLINE)")
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub import errors as hub_errors
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        raise PlaygroundError("loading by Hub repo id needs huggingface_hub: pip install huggingface_hub") from None

    try:
        info = HfApi(endpoint=endpoint).model_info(rid, revision=revision, files_metadata=True)
        files = [s for s in (info.siblings or []) if allowed(s.rfilename)]
        if not any(s.rfilename.endswith(".safetensors") for s in files):
            raise PlaygroundError(f"'{rid}' has no .safetensors weights at its top level; pickled .bin/.pt "
                                  "weights are never loaded here (they can run code); pick a safetensors repo")
        total = sum(int(s.size or 0) for s in files)
        if max_bytes is not None and total > max_bytes:
            raise PlaygroundError(f"'{rid}' is {total / 2**20:,.1f} MiB of weights and files, over the "
                                  f"{max_bytes / 2**20:,.1f} MiB limit here; pick a smaller model")
        if make_room is not None:
            make_room(total)
        target = Path(cache_dir) / rid
        # Exactly the top-level files checked above (the patterns alone would also match sub-folders).
        snapshot_download(rid, revision=info.sha, allow_patterns=[s.rfilename for s in files], local_dir=target,
                          endpoint=endpoint)
    except PlaygroundError:
        raise
    except hub_errors.GatedRepoError:
        raise PlaygroundError(f"'{rid}' is gated on the Hub (accept its licence and use a token); "
                              "download it elsewhere and upload its files") from None
    except hub_errors.RepositoryNotFoundError:
        raise PlaygroundError(f"no public model repo '{rid}' on the Hub; check the spelling") from None
    except hub_errors.RevisionNotFoundError:
        raise PlaygroundError(f"'{rid}' has no revision '{revision}'") from None
    except hub_errors.HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        raise PlaygroundError(f"the Hub refused to serve '{rid}' (HTTP {status}); try again later") from None
    except (ConnectionError, TimeoutError, OSError) as exc:  # includes OfflineModeIsEnabled, socket errors
        raise _no_network(rid, type(exc).__name__) from None
    except Exception as exc:  # httpx transport errors and the like are not OSErrors
        if type(exc).__module__.split(".")[0].startswith(("httpx", "httpcore", "requests", "urllib3")):
            raise _no_network(rid, type(exc).__name__) from None
        raise
    return target
