"""`python -m playground deploy-space OWNER/NAME [--hardware KIND] [--dry-run] [--json]`: publish the app as a Space.

What is uploaded: the files git tracks, minus what a running Space never reads (tests/, .ci/,
.gitignore, pyproject.toml: the Space installs requirements.txt and runs app.py), plus the images
the card shows (the README's screenshots, kept at their paths so its links resolve), plus two
generated files:
- README.md with the Space config as its front matter (`space_config()`: `sdk_version` pinned to the
  Gradio that requirements.txt pins, `python_version`, `short_description`, and `preload_from_hub`
  so the Space downloads SmolLM2-135M-Instruct at build time and the catalog offers it, and `models`
  so the Hub links the Space from the model's page, `tags`, and a `thumbnail` (a screenshot the card shows,
  by its address in the Space); with `--hardware`, `suggested_hardware`, what a duplicator is offered);
- with `--hardware zerogpu`, requirements.txt with Gradio's sign-in packages added (`gradio[oauth]`'s authlib and
  itsdangerous: the card's `hf_oauth: true` gives the Space its sign-in app, and a signed-in visitor a GPU quota of
  their own). Not `spaces`: the ZeroGPU runtime installs and pins it (the Spaces ZeroGPU docs list no requirement
  for it; a pinned copy can break the runtime's own);
- .gitattributes naming every binary file for LFS (the Hub refuses binary files stored as plain git
  blobs, whatever their size). Binaries are whatever holds a NUL byte or is not UTF-8 text.

How: `create_repo(repo_type="space", space_sdk="gradio", exist_ok=True)` (with `space_hardware` when
`--hardware` is given: a new Space starts on it; an existing one keeps its hardware), `upload_file` of the
.gitattributes, then `upload_folder` of the rest, which sends binaries through the Hub's upload
API (LFS, or Xet where `hf_xet` is installed) and deletes files the Space holds that are no longer
uploaded. `--dry-run` prints exactly that (files, sizes, which go through LFS/Xet, the Space config)
without touching the network.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from playground.checkpoints.hub import PRELOADED
from playground.errors import PlaygroundError

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_VERSION = "3.11"  # what the project is tested with
SHORT_DESCRIPTION = "Watch a Transformer pick each token, and see why"  # the Hub allows 60 characters
EXCLUDED = ("tests/*", ".ci/*", ".gitignore", "pyproject.toml", "README.md", ".gitattributes")  # README/.gitattributes: generated
BINARY_SUFFIXES = (".safetensors", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".gguf", ".bin", ".pt", ".onnx")
# The Hub's default LFS patterns for a new repo, kept so files added later by hand still go to LFS.
DEFAULT_LFS_PATTERNS = ("*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.gguf", "*.gz", "*.h5", "*.onnx", "*.pkl",
                        "*.png", "*.jpg", "*.pt", "*.pth", "*.safetensors", "*.tar", "*.tgz", "*.zip", "*.zst")
TAGS = ("education", "interpretability", "transformers", "attention", "visualization", "kv-cache")
THUMBNAIL = "tests/screenshots/live-desktop.png"  # the live screen, as the card's first screenshot shows it


@dataclass(frozen=True)
class Hardware:
    """One kind of host: the Hub's name for it, the lines it adds to requirements.txt and to the card."""

    flavor: str  # huggingface_hub.SpaceHardware's value (suggested_hardware, create_repo's space_hardware)
    requirements: tuple[str, ...] = ()
    card: tuple[tuple[str, Any], ...] = ()


HARDWARE = {
    # ZeroGPU keeps its legacy flavor name, whatever card it lends today. Its `spaces` package comes with the runtime.
    "zerogpu": Hardware("zero-a10g", ("authlib  # the sign-in button (gradio[oauth]): a signed-in visitor's GPU quota",
                                      "itsdangerous  # its session cookie"), (("hf_oauth", True),)),
    "cpu-basic": Hardware("cpu-basic"),
    "cpu-upgrade": Hardware("cpu-upgrade"),
    "t4-small": Hardware("t4-small"),
    "l4x1": Hardware("l4x1"),
}
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


@dataclass(frozen=True)
class Planned:
    path: str  # in the Space repository
    bytes: int
    binary: bool
    upload: str  # "lfs/xet" (the Hub's upload API, never a git blob) or "regular" (text in the commit)
    source: str  # "working tree" or "generated"


def _gradio_pin(requirements: Path) -> str:
    """The exact Gradio version requirements.txt pins: the Space installs it as its SDK."""
    for line in requirements.read_text().splitlines():
        match = re.match(r"^\s*gradio\s*==\s*([0-9][0-9A-Za-z.]*)\s*(#.*)?$", line)
        if match:
            return match.group(1)
    raise PlaygroundError(
        f"{requirements.name} must pin gradio exactly (gradio==X.Y.Z) so the Space runs the version the tests ran"
    )


def space_config(root: Path = REPO_ROOT, *, repo_id: str | None = None, hardware: str | None = None) -> dict[str, Any]:
    """The README front matter of the Space (the Hub reads it as the Space's configuration). With `repo_id`,
    the thumbnail's address in that Space; with `hardware`, the hardware a duplicator is offered."""
    config = {
        "title": "Transformer Playground",
        "emoji": "🔍",
        "colorFrom": "indigo",
        "colorTo": "purple",
        "sdk": "gradio",
        "sdk_version": _gradio_pin(root / "requirements.txt"),
        "python_version": PYTHON_VERSION,
        "app_file": "app.py",
        "pinned": False,
        "license": "apache-2.0",
        "short_description": SHORT_DESCRIPTION,
        "models": list(PRELOADED),  # the Hub links the Space from the models it runs
        "preload_from_hub": [f"{repo} {','.join(files)}" for repo, files in PRELOADED.items()],
        "tags": list(TAGS),
    }
    if repo_id is not None:
        config["thumbnail"] = f"https://huggingface.co/spaces/{repo_id}/resolve/main/{THUMBNAIL}"
    if hardware is not None:
        config["suggested_hardware"] = HARDWARE[hardware].flavor
        config.update(HARDWARE[hardware].card)
    return config


def requirements_for(root: Path, hardware: str | None) -> bytes | None:
    """requirements.txt for `hardware` when it needs more than the checkout's (None: upload it as it is)."""
    extra = HARDWARE[hardware].requirements if hardware else ()
    if not extra:
        return None
    text = (root / "requirements.txt").read_text(encoding="utf-8").rstrip("\n") + "\n"
    return (text + f"# For the {hardware} hardware (added by deploy-space):\n" + "\n".join(extra) + "\n").encode("utf-8")


def front_matter(config: dict[str, Any]) -> str:
    import yaml

    return "---\n" + yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=200) + "---\n"


def split_front_matter(text: str) -> tuple[dict[str, Any] | None, str]:
    """(front matter, body) of a README; (None, text) when it has none."""
    import yaml

    match = re.match(r"^---\n(.*?\n)---\n", text, re.S)
    if not match:
        return None, text
    return yaml.safe_load(match.group(1)) or {}, text[match.end():]


def is_binary(data: bytes, path: str) -> bool:
    """Binary for the Hub: a known binary suffix, a NUL byte, or not UTF-8 text."""
    if path.lower().endswith(BINARY_SUFFIXES) or b"\0" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def tracked_files(root: Path = REPO_ROOT) -> list[str]:
    """Paths git tracks in `root` (the checkout being deployed), sorted."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        raise PlaygroundError(
            f"{root} is not a git checkout (or git is missing); deploy-space uploads the files git tracks"
        ) from None
    return sorted(p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p)


def untracked_files(root: Path = REPO_ROOT) -> list[str]:
    """Files in the checkout that git neither tracks nor ignores: they would be missing on the Space."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    found = [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
    return sorted(p for p in found if not any(fnmatch.fnmatch(p, pat) for pat in EXCLUDED))


def selected_files(root: Path = REPO_ROOT) -> list[str]:
    """The tracked files the Space needs, present in the working tree."""
    keep = [p for p in tracked_files(root) if not any(fnmatch.fnmatch(p, pat) for pat in EXCLUDED)]
    return [p for p in keep if (root / p).is_file()]


_MD_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_IMAGE = re.compile(r"<img\b[^>]*?\bsrc\s*=\s*[\"']([^\"']+)[\"']", re.I)


def card_images(markdown: str) -> list[str]:
    """Repository paths of the images a README shows (Markdown and <img>); web addresses left out."""
    found = _MD_IMAGE.findall(markdown) + _HTML_IMAGE.findall(markdown)
    paths = [p.split("#")[0].split("?")[0] for p in found if not re.match(r"^[a-z][a-z0-9+.-]*:|^//", p, re.I)]
    return list(dict.fromkeys(p[2:] if p.startswith("./") else p for p in paths))


def gitattributes(binaries: list[str]) -> str:
    lines = ["# Generated by `python -m playground deploy-space`: every binary goes through LFS/Xet."]
    lines += [f"{pattern} filter=lfs diff=lfs merge=lfs -text" for pattern in DEFAULT_LFS_PATTERNS]
    lines += [f"{path} filter=lfs diff=lfs merge=lfs -text" for path in binaries]
    return "\n".join(lines) + "\n"


def build(
    root: Path = REPO_ROOT, *, repo_id: str | None = None, hardware: str | None = None,
) -> tuple[dict[str, Any], dict[str, bytes], list[Planned], list[str]]:
    """(space config, generated files' contents, every file planned, notes). Reads only local files."""
    config = space_config(root, repo_id=repo_id, hardware=hardware)
    notes = []
    readme = (root / "README.md").read_text(encoding="utf-8")
    existing, body = split_front_matter(readme)
    if existing != space_config(root):  # the README's own: no Space named, no hardware chosen
        notes.append("README.md's own front matter differs from the Space config; the uploaded README uses the Space config")
    untracked = untracked_files(root)
    if untracked:
        notes.append(f"not uploaded because git does not track them (git add them if the Space needs them): "
                     f"{', '.join(untracked[:5])}{' ...' if len(untracked) > 5 else ''}")
    planned: list[Planned] = []
    requirements = requirements_for(root, hardware)
    selected = [p for p in selected_files(root) if not (requirements and p == "requirements.txt")]
    # The card's screenshots live under tests/, which the Space does not need; the card shows them,
    # so they go up too (as binaries, like the checkpoints).
    tracked = set(tracked_files(root))
    images = [p for p in card_images(body) if p not in selected and p in tracked and (root / p).is_file()]
    missing = [p for p in card_images(body) if p not in selected and p not in images]
    if missing:
        notes.append(f"the card shows images git does not track, which would be broken on the Space: "
                     f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    for path in selected + images:
        data = (root / path).read_bytes()
        binary = is_binary(data, path)
        planned.append(Planned(path, len(data), binary, "lfs/xet" if binary else "regular", "working tree"))
    if "thumbnail" in config and THUMBNAIL not in selected + images:
        notes.append(f"the thumbnail {THUMBNAIL} is not uploaded (the card no longer shows it): pick another image")
    generated = {"README.md": (front_matter(config) + body.lstrip("\n")).encode("utf-8")}
    if requirements:
        generated["requirements.txt"] = requirements
    generated[".gitattributes"] = gitattributes([p.path for p in planned if p.binary]).encode("utf-8")
    for path, data in generated.items():
        planned.append(Planned(path, len(data), False, "regular", "generated"))
    planned.sort(key=lambda p: p.path)
    return config, generated, planned, notes


def _report(repo_id: str, config: dict[str, Any], planned: list[Planned], notes: list[str], as_json: bool) -> str:
    flavor = config.get("suggested_hardware")
    if as_json:
        return json.dumps({"repo_id": repo_id, "repo_type": "space", "space_sdk": "gradio", "space_hardware": flavor,
                           "space_config": config,
                           "steps": ["create_repo", "upload_file .gitattributes", "upload_folder"],
                           "files": [asdict(p) for p in planned], "notes": notes}, indent=2, ensure_ascii=False)
    total = sum(p.bytes for p in planned)
    lines = [
        f"Space {repo_id}: gradio {config['sdk_version']}, python {config['python_version']} (dry run: nothing uploaded)",
        f'1. create_repo("{repo_id}", repo_type="space", space_sdk="gradio"'
        + (f', space_hardware="{flavor}"' if flavor else "") + ", exist_ok=True)",
        "2. upload_file(.gitattributes)   3. upload_folder(the files below; files no longer listed are deleted)",
        "Space config (README.md front matter):",
        front_matter(config).rstrip("\n"),
        f"Files ({len(planned)}, {total:,} bytes):",
    ]
    for p in planned:
        how = "binary -> Hub upload API (LFS/Xet), never a git blob" if p.binary else "text"
        lines.append(f"  {p.bytes:>12,}  {p.path}  [{how}{', generated' if p.source == 'generated' else ''}]")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def deploy(repo_id: str, *, dry_run: bool, as_json: bool = False, root: Path = REPO_ROOT, token: str | None = None,
           hardware: str | None = None) -> str:
    """Plan (and unless `dry_run`, perform) the upload; returns the report to print."""
    if not _REPO_ID.match(repo_id or "") or ".." in repo_id:
        raise PlaygroundError(f"'{repo_id}' is not a Space id; write it as OWNER/NAME, e.g. me/transformer-playground")
    if hardware is not None and hardware not in HARDWARE:
        raise PlaygroundError(f"--hardware {hardware!r} is not offered; use one of {', '.join(HARDWARE)}")
    config, generated, planned, notes = build(root, repo_id=repo_id, hardware=hardware)
    report = _report(repo_id, config, planned, notes, as_json)
    if dry_run:
        return report
    _upload(repo_id, root, generated, planned, token, config.get("suggested_hardware"))
    return report.replace("(dry run: nothing uploaded)", "(uploaded)")


def _upload(repo_id: str, root: Path, generated: dict[str, bytes], planned: list[Planned], token: str | None,
            flavor: str | None = None) -> None:
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hub_errors

    from playground.checkpoints.hub import offline

    if offline():
        raise PlaygroundError("no network: offline mode is on (HF_HUB_OFFLINE); run with --dry-run to see the upload")
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="playground-space-") as staging:
        stage = Path(staging)
        for p in planned:
            target = stage / p.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if p.source == "generated":
                target.write_bytes(generated[p.path])
            else:
                shutil.copyfile(root / p.path, target)
        try:
            api.create_repo(repo_id, repo_type="space", space_sdk="gradio", space_hardware=flavor, exist_ok=True)
            api.upload_file(path_or_fileobj=generated[".gitattributes"], path_in_repo=".gitattributes", repo_id=repo_id,
                            repo_type="space", commit_message="LFS/Xet for every binary file")
            api.upload_folder(repo_id=repo_id, folder_path=stage, repo_type="space", delete_patterns="*",
                              commit_message="Deploy with python -m playground deploy-space")
        except hub_errors.LocalTokenNotFoundError:
            raise PlaygroundError("no Hugging Face token: run `hf auth login` or set HF_TOKEN, then deploy again") from None
        except hub_errors.HfHubHTTPError as exc:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            raise PlaygroundError(f"the Hub refused the upload to '{repo_id}' (HTTP {status}): check the token's "
                                  "write access and the Space id") from None
        except (ConnectionError, TimeoutError, OSError) as exc:
            raise PlaygroundError(f"no network: cannot reach the Hugging Face Hub ({type(exc).__name__}); "
                                  "run with --dry-run to see the upload") from None
        except Exception as exc:  # httpx transport errors are not OSErrors
            if type(exc).__module__.split(".")[0] in ("httpx", "httpcore", "requests", "urllib3"):
                raise PlaygroundError(f"no network: cannot reach the Hugging Face Hub ({type(exc).__name__}); "
                                      "run with --dry-run to see the upload") from None
            raise


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo_id", metavar="OWNER/NAME", help="the Space to create or update")
    parser.add_argument("--hardware", default=None, metavar="KIND",
                        help="the host the Space is for: zerogpu (free accounts), cpu-basic, cpu-upgrade, t4-small, "
                             "l4x1; written as suggested_hardware (what a duplicator is offered), with requirements to "
                             "match, and asked for when the Space is created")
    parser.add_argument("--dry-run", action="store_true", help="print what would be uploaded; no network")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    parser.add_argument("--token", default=None, help="a Hugging Face write token (default: HF_TOKEN or `hf auth login`)")


def run(args: argparse.Namespace) -> int:
    print(deploy(args.repo_id, dry_run=args.dry_run, as_json=args.json, token=args.token, hardware=args.hardware))
    if not args.dry_run and not args.json:
        print(f"https://huggingface.co/spaces/{args.repo_id}", file=sys.stderr)
    return 0
