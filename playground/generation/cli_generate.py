"""`python -m playground generate`: the engine from the command line, one JSON object with --json."""

from __future__ import annotations

import argparse
import json
import sys

from playground.errors import PlaygroundError

EXIT_USAGE = 2


def _early_stopping(value: str) -> bool | str:
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    if lowered == "never":
        return "never"
    raise argparse.ArgumentTypeError(f"--early-stopping takes true, false or never, got {value!r}")


def _rope_scaling(value: str) -> dict[str, object]:
    kind, _, factor = value.partition(":")
    try:
        return {"type": kind, "factor": float(factor)}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rope-scaling takes TYPE:FACTOR like yarn:2, got {value!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="checkpoint folder or .safetensors file")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="prompt text (the source text for seq2seq models)")
    source.add_argument("--input-ids", help="comma-separated prompt token ids, e.g. 1,2,3")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--top-k", type=int, default=0, help="0: off")
    parser.add_argument("--top-p", type=float, default=1.0, help="1: off")
    parser.add_argument("--min-p", type=float, default=0.0, help="0: off")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help="1: off")
    parser.add_argument("--num-beams", type=int, default=1)
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument(
        "--early-stopping", nargs="?", const=True, default=False, type=_early_stopping,
        help="beam search stops once num_beams hypotheses are done (optionally: true, false, never)",
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-cache", action="store_true", help="recompute the whole sequence every step")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the checkpoint's chat template")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--target-lang", help="translation: the target language code (e.g. fr_XX, fra_Latn, fr)")
    target.add_argument("--forced-bos-token-id", type=int, default=None,
                        help="force this token id as the first generated token (a target language code)")
    kv = parser.add_argument_group("KV-cache lab (decoder-only models)")
    kv.add_argument("--kv-window", type=int, default=None, help="keep the last N positions of the KV cache")
    kv.add_argument("--kv-sink", type=int, default=0, help="also keep the first S positions (with --kv-window)")
    kv.add_argument("--kv-heavy", type=int, default=0, help="also keep H positions with the most attention (with --kv-window)")
    kv.add_argument("--kv-dtype", choices=["int8", "int4"], default=None, help="store K/V quantised")
    kv.add_argument("--rope-scaling", type=_rope_scaling, default=None, metavar="TYPE:FACTOR",
                    help="scale RoPE for this run: linear, ntk or yarn, e.g. yarn:2")
    parser.add_argument("--weight-precision", default=None,
                        help="run a copy of the model with weight-only float32, bfloat16, float16, int8 or int4 weights")
    parser.add_argument("--draft", help="speculative decoding: ngram, layer:K, or a second checkpoint with the same "
                                        "vocabulary (the tokens stay the model's own)")
    parser.add_argument("--draft-tokens", type=int, default=4, help="tokens drafted per pass of the model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--compile", nargs="?", const="auto", default=None, choices=["auto", "inductor", "cudagraph", "eager"],
                        help="decode through the captured step: alone (auto), the device's own way (CUDA graphs captured by "
                             "hand on a GPU, torch.compile elsewhere); or by name: torch.compile (inductor), CUDA "
                             "graphs by hand (cudagraph), the step uncompiled (eager); the first run of each shape "
                             "compiles. Runs the step cannot take decode as usual, and the JSON's decoding says why")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _input_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise PlaygroundError(f"--input-ids must be comma-separated integers like 1,2,3, got {text!r}") from None
    if not ids:
        raise PlaygroundError("--input-ids is empty; give at least one token id, e.g. --input-ids 1,2,3")
    return ids


def _draft_setting(value: str | None) -> str | None:
    """--draft as a GenerationConfig value: ngram and layer:K as they are; anything else names a checkpoint,
    loaded after the model (None until then)."""
    if value is None or value == "ngram" or value.startswith("layer:"):
        return value
    return None


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except PlaygroundError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: argparse.Namespace) -> int:
    from playground.checkpoints.loader import load_model
    from playground.generation import GenerationConfig, generate_all, language_token_id

    cfg = GenerationConfig(
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        min_p=args.min_p, repetition_penalty=args.repetition_penalty, num_beams=args.num_beams,
        length_penalty=args.length_penalty, early_stopping=args.early_stopping, seed=args.seed,
        use_cache=not args.no_cache, top_candidates=0, chat=args.chat, forced_bos_token_id=args.forced_bos_token_id,
        kv_window=args.kv_window, kv_sink=args.kv_sink, kv_heavy=args.kv_heavy, kv_dtype=args.kv_dtype,
        rope_scaling=args.rope_scaling,
        weight_precision=args.weight_precision,
        draft=_draft_setting(args.draft), draft_tokens=args.draft_tokens,
    ).validate()  # bad settings fail before the model loads
    prompt = _input_ids(args.input_ids) if args.input_ids is not None else args.prompt
    lm = load_model(args.model, device=args.device, dtype=args.dtype, compile=args.compile)
    if args.draft is not None and cfg.draft is None:  # a second checkpoint drafts
        cfg = cfg.replace(draft=load_model(args.draft, device=args.device, dtype=args.dtype))
    if args.target_lang is not None:
        if lm.tokenizer is None:
            raise PlaygroundError(
                f"--target-lang needs the checkpoint's tokenizer ({lm.tokenizer_error}); use --forced-bos-token-id"
            )
        cfg = cfg.replace(forced_bos_token_id=language_token_id(lm.tokenizer, args.target_lang))
    result = generate_all(lm, prompt, cfg)
    timing = result.timing
    out = {
        "token_ids": result.token_ids,
        "text": result.text,
        "sequences": [s.to_dict() for s in result.sequences],
        "cache": result.cache,
        "timing": {
            "prefill_ms": timing.get("prefill_ms", 0.0),
            "decode_ms_per_token": timing.get("decode_ms_per_token", 0.0),
            "tokens_per_s": timing.get("tokens_per_s", 0.0),
        },
    }
    if result.precision is not None:
        out["precision"] = result.precision
    if result.speculation is not None:
        out["speculation"] = result.speculation
    if result.decoding is not None:
        out["decoding"] = result.decoding
    if args.json:
        print(json.dumps(out))
    else:
        print(result.text)
        print(
            f"[{len(result.token_ids)} tokens, {result.finish_reason}; prefill {out['timing']['prefill_ms']:.1f} ms, "
            f"{out['timing']['tokens_per_s']:.1f} tokens/s; KV cache {result.cache.get('bytes', 0):,} bytes]",
            file=sys.stderr,
        )
    return 0
