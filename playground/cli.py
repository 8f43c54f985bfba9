"""Command line: `python -m playground {info,generate,import-smollm2,import-gemma3,deploy-space} ...`.

Errors a person can fix print one line on stderr and exit with status 2 — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext

from playground.errors import PlaygroundError
from playground.generation import cli_generate
from playground.rust_stderr import panic_reports_dropped

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage + message; keep it to one line
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _info(args: argparse.Namespace) -> int:
    from playground.app import describe  # the structure in words, as the model card says it
    from playground.checkpoints.loader import load_model

    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    info = lm.info()
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        c = lm.config
        print(f"{info['family']} ({info['kind']}), {info['parameters']:,} parameters, {info['dtype']}")
        print(f"  layers {c.n_layers}, d_model {c.d_model}, heads {c.n_heads} / KV heads {c.n_kv_heads}, head dim {c.head_dim}")
        for stack in ("encoder", "decoder") if not info.get("symmetric", True) else ():
            s = info[stack]
            print(f"  {stack}: {s['layers']} layers, heads {s['heads']} / KV heads {s['kv_heads']}, "
                  f"head dim {s['head_dim']}, FFN {s['d_ff']}")
        print(f"  positional encoding: {describe.positional_label(c)}; attention: {info['attention']}")
        print(f"  blocks: {describe.block_label(c)}; layers: {describe.layer_summary(c)}")
        print(f"  file size {info['file_bytes']:,} bytes, loaded in {info['load_seconds']:.2f} s")
        if info["tokenizer_error"]:
            print(f"  tokenizer: {info['tokenizer_error']}")
    return 0


def _import_smollm2(args: argparse.Namespace) -> int:
    from playground.checkpoints import import_smollm2

    forwarded = ["--dest", args.dest] + (["--force"] if args.force else [])
    return import_smollm2.main(forwarded)


def _import_gemma3(args: argparse.Namespace) -> int:
    from playground.checkpoints import import_gemma3

    return import_gemma3.main(["--dest", args.dest] + (["--force"] if args.force else []))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m playground", description="Transformer Playground command line")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    info = commands.add_parser("info", help="describe a checkpoint: config, parameters, positional encoding")
    info.add_argument("--model", required=True, help="checkpoint folder or .safetensors file")
    info.add_argument("--device", default="cpu")
    info.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(handler=_info)

    generate = commands.add_parser("generate", help="generate from a prompt or token ids")
    cli_generate.add_arguments(generate)
    generate.set_defaults(handler=cli_generate.run)

    imports = commands.add_parser("import-smollm2", help="convert the pip-installed SmolLM2-135M-Instruct GGUF to safetensors")
    imports.add_argument("--dest", default="weights/SmolLM2-135M-Instruct")
    imports.add_argument("--force", action="store_true")
    imports.set_defaults(handler=_import_smollm2)

    gemma = commands.add_parser("import-gemma3", help="convert the pip-installed Gemma 3 270M GGUF to safetensors")
    gemma.add_argument("--dest", default="weights/gemma-3-270m")
    gemma.add_argument("--force", action="store_true")
    gemma.set_defaults(handler=_import_gemma3)

    # A tool of the checkout (playground/tools/ is not installed with the package): imported only when asked for,
    # its own parser reads the rest of the line.
    space = commands.add_parser("deploy-space", help="create or update a Hugging Face Space running this app "
                                "(from a checkout)", add_help=False)
    space.add_argument("rest", nargs=argparse.REMAINDER)
    space.set_defaults(handler=_deploy_space)
    return parser


def _deploy_space(args: argparse.Namespace) -> int:
    try:
        from playground.tools import deploy
    except ModuleNotFoundError as missing:
        if missing.name not in ("playground.tools", "playground.tools.deploy"):
            raise
        raise PlaygroundError("deploy-space runs from a checkout of the repository (it uploads the files git tracks): "
                              "clone it, then run python -m playground deploy-space OWNER/NAME there") from None
    parser = _Parser(prog="python -m playground deploy-space",
                     description="create or update a Hugging Face Space running this app")
    deploy.add_arguments(parser)
    return deploy.run(parser.parse_args(args.rest))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "deploy-space":
        parser.parse_args(argv)  # says which argument is not known, in one line
    if unknown:  # the deploy tool's own options (its parser is built only when it runs)
        args.rest = unknown + args.rest
    # A tokenizer's Rust panic is told in our one line (TokenizerError), not in Rust's report as well.
    quiet = panic_reports_dropped() if args.command in ("info", "generate") else nullcontext()
    try:
        with quiet:
            return args.handler(args)
    except PlaygroundError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError:
        print("error: out of memory; try a smaller model, --dtype bfloat16 or fewer tokens", file=sys.stderr)
        return EXIT_USAGE
