"""tiny-seq2seq: the original encoder-decoder Transformer (sinusoidal PE, post-LN, ReLU FFN) on
date normalisation ("3rd of March 2021" -> "2021-03-03").

Tokens are characters (`tokenizer_build.char_tokenizer`): <pad>=0, <s>=1, </s>=2, <unk>=3. The
source is `tokenizer.encode(text)` (characters + </s>), padded with <pad> and masked. Teacher
forcing: the decoder reads <s> + target characters and predicts target characters + </s>.
Every training batch is freshly generated (seed, step), so the model never sees a fixed set.

Seeds: model init and training batches use `--seed`; the periodic validation set uses
VALIDATION_SEED; the final report uses REPORT_SEED; tests use their own seeds. None of these
generators is shared with training.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import torch
from torch import nn

from playground.config import ModelConfig
from playground.models import build_model
from playground.models.layers import init_weights
from playground.models.recorder import Recorder
from playground.train import dates
from playground.train.recipe import IGNORE, Recipe, TrainResult, seed_everything, train
from playground.train.tokenizer_build import char_tokenizer

CARD = {  # what the app says about the trained model
    "description": {
        "en": "The original Transformer (encoder-decoder), trained to convert a written date to ISO 8601: "
              "“March 5, 2021” → 2021-03-05.",
        "zh": "原始 Transformer(编码器-解码器),训练用于把书面日期转换为 ISO 8601 格式:“March 5, 2021” → 2021-03-05。",
    },
    "example_prompt": "March 5, 2021",
}

SOURCE = "synthetic: playground.train.dates (generated dates, no external data)"
PAD, BOS, EOS = 0, 1, 2
VALIDATION_SEED = 1_000_001
REPORT_SEED = 2_024_2024
TARGET_LEN = 10  # YYYY-MM-DD


def make_tokenizer() -> Any:
    return char_tokenizer(dates.ALPHABET)


def seq2seq_config(
    vocab_size: int, *, d_model: int, layers: int, encoder_layers: int, heads: int, d_ff: int, max_positions: int = 64
) -> ModelConfig:
    from playground.checkpoints.families.transformer import transformer_config

    return transformer_config(
        vocab_size=vocab_size, d_model=d_model, n_layers=layers, n_encoder_layers=encoder_layers,
        n_heads=heads, d_ff=d_ff, max_positions=max_positions,
        pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS,
    )


def new_model(config: ModelConfig, seed: int) -> nn.Module:
    seed_everything(seed)
    model = build_model(config)
    init_weights(model, std=config.d_model**-0.5)
    return model


def encode_sources(tokenizer: Any, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids (B, S) padded with <pad>, attention_mask (B, S) 1 for real tokens)."""
    rows = [tokenizer.encode(t) for t in texts]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


def encode_targets(tokenizer: Any, targets: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(decoder_input_ids = <s> + chars, labels = chars + </s>), both (B, T); padding -> IGNORE."""
    rows = [tokenizer.encode(t) for t in targets]  # chars + </s>
    width = max(map(len, rows))
    dec = torch.full((len(rows), width), PAD, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for i, row in enumerate(rows):
        dec[i, : len(row)] = torch.tensor([BOS, *row[:-1]])
        labels[i, : len(row)] = torch.tensor(row)
    return dec, labels


def batch_fn(tokenizer: Any, batch_size: int, seed: int):
    """step -> ((input_ids, decoder_input_ids, attention_mask), labels), fresh examples per step."""

    def batch(step: int):
        r = random.Random(seed * 1_000_003 + step)
        pairs = [dates.example(r) for _ in range(batch_size)]
        src, mask = encode_sources(tokenizer, [s for s, _ in pairs])
        dec, labels = encode_targets(tokenizer, [t for _, t in pairs])
        return (src, dec, mask), labels

    return batch


@torch.no_grad()
def greedy(model: nn.Module, tokenizer: Any, texts: list[str], max_new_tokens: int = TARGET_LEN + 2) -> list[str]:
    """Greedy decoding without a cache (the engine's is faster; this one is independent of it)."""
    src, mask = encode_sources(tokenizer, texts)
    memory = model.encode(src, mask)
    out = torch.full((len(texts), 1), BOS, dtype=torch.long)
    done = torch.zeros(len(texts), dtype=torch.bool)
    for _ in range(max_new_tokens):
        nxt = model.decode(out, memory, mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        out = torch.cat([out, nxt[:, None]], 1)
        done |= nxt == EOS
        if done.all():
            break
    return [tokenizer.decode([t for t in row[1:].tolist() if t not in (PAD, EOS)]) for row in out]


def exact_match(model: nn.Module, tokenizer: Any, pairs: list[tuple[str, str]], batch_size: int = 250) -> tuple[float, list[tuple[str, str, str]]]:
    """(fraction of exactly right outputs, [(source, expected, got)] for the wrong ones)."""
    wrong = []
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i : i + batch_size]
        for (src, want), got in zip(chunk, greedy(model, tokenizer, [s for s, _ in chunk])):
            if got != want:
                wrong.append((src, want, got))
    return 1 - len(wrong) / len(pairs), wrong


@torch.no_grad()
def cross_attention(model: nn.Module, tokenizer: Any, text: str, target: str) -> torch.Tensor:
    """Cross-attention weights (L, h, T, S) of the decoder reading <s> + target for source `text`."""
    src, mask = encode_sources(tokenizer, [text])
    dec, _ = encode_targets(tokenizer, [target])
    memory = model.encode(src, mask)
    recorder = Recorder()
    model.decode(dec, memory, mask, recorder=recorder)
    return torch.stack([w[0] for w in recorder.layers_of("cross", model.config.n_layers)])


def _span(text: str, needle: str) -> range | None:
    at = text.lower().find(needle.lower())
    return None if at < 0 else range(at, at + len(needle))


def alignment(model: nn.Module, tokenizer: Any, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """How much cross-attention the output digits put on the source words they come from.

    Month digits (output chars 5-6) vs the month name in the source, when it has one; year digits
    (output chars 0-3) vs the 4-digit year in the source, when it has one. Per decoder layer: mean
    attention mass (heads averaged, and the best single head) on the right span, next to the mass
    uniform attention would put there (chance).
    """
    rows: dict[str, list[list[float]]] = {"month": [], "year": []}
    best_head: dict[str, list[list[float]]] = {"month": [], "year": []}
    chance: dict[str, list[float]] = {"month": [], "year": []}
    for text, iso in pairs:
        month = dates.MONTHS[int(iso[5:7]) - 1]
        spans = {
            "month": (_span(text, month) or _span(text, month[:3]), [5, 6]) if any(c.isalpha() for c in text) and "月" not in text else (None, []),
            "year": (_span(text, iso[:4]), [0, 1, 2, 3]),
        }
        weights = None
        for name, (span, outputs) in spans.items():
            if span is None:
                continue
            if weights is None:
                weights = cross_attention(model, tokenizer, text, iso)  # (L, h, T, S)
            mass = weights[:, :, outputs][..., list(span)].sum(-1).mean(-1)  # (L, h)
            rows[name].append(mass.mean(-1).tolist())
            best_head[name].append(mass.max(-1).values.tolist())
            chance[name].append(len(span) / (len(tokenizer.encode(text))))
    report: dict[str, Any] = {}
    for name in rows:
        if not rows[name]:
            continue
        per_layer = torch.tensor(rows[name]).mean(0)
        report[name] = {
            "examples": len(rows[name]),
            "mass_per_layer": [round(v, 3) for v in per_layer.tolist()],
            "best_head_mass_per_layer": [round(v, 3) for v in torch.tensor(best_head[name]).mean(0).tolist()],
            "chance": round(sum(chance[name]) / len(chance[name]), 3),
        }
    return report


def run(args: argparse.Namespace, progress=None) -> tuple[nn.Module, ModelConfig, Any, TrainResult, dict[str, Any], dict[str, Any]]:
    """Train as `args` say; returns (model, config, tokenizer, result, metrics, extra provenance)."""
    tokenizer = make_tokenizer()
    config = seq2seq_config(
        len(tokenizer), d_model=args.d_model, layers=args.layers, encoder_layers=args.encoder_layers,
        heads=args.heads, d_ff=args.d_ff,
    )
    model = new_model(config, args.seed)
    recipe = Recipe(
        steps=args.steps, lr=args.lr, warmup=args.warmup, schedule=args.schedule, eval_every=args.eval_every,
        seed=args.seed, weight_decay=args.weight_decay,
    )
    validation = dates.examples(args.eval_examples, VALIDATION_SEED)

    def evaluate(m: nn.Module) -> dict[str, float]:
        acc, _ = exact_match(m, tokenizer, validation)
        return {"exact_match": acc, "errors": 1 - acc}

    result = train(
        model, recipe, batch_fn(tokenizer, args.batch_size, args.seed),
        lambda m, inputs: m(inputs[0], inputs[1], attention_mask=inputs[2]),
        evaluate=evaluate, keep_best="errors", progress=progress,
    )
    report_pairs = dates.examples(args.report_examples, REPORT_SEED)
    acc, wrong = exact_match(model, tokenizer, report_pairs)
    align = alignment(model, tokenizer, report_pairs[:200])
    metrics = {
        "exact_match": round(acc, 4),
        "report_examples": len(report_pairs),
        "report_seed": REPORT_SEED,
        "validation_exact_match": round((result.best or {}).get("exact_match", float("nan")), 4),
        "best_step": (result.best or {}).get("step"),
        "final_train_loss": round(result.history[-1]["loss"], 4),
        "parameters": sum(p.numel() for p in model.parameters()),
        "cross_attention_alignment": align,
    }
    examples = dates.examples(8, REPORT_SEED + 1)
    extra = {
        "licence": "synthetic data generated by playground.train.dates (no third-party text)",
        "samples": dict(zip([s for s, _ in examples], greedy(model, tokenizer, [s for s, _ in examples]))),
        "errors": [{"source": s, "expected": w, "got": g} for s, w, g in wrong[:20]],
    }
    return model, config, tokenizer, result, metrics, extra


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="weights/tiny-seq2seq/model.safetensors", help="checkpoint file to write")
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2, help="decoder layers")
    p.add_argument("--encoder-layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=400)
    p.add_argument("--schedule", choices=("cosine", "inverse_sqrt"), default="inverse_sqrt")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-examples", type=int, default=500, help="validation examples per evaluation")
    p.add_argument("--report-examples", type=int, default=2000, help="fresh examples for the final exact match")
    p.add_argument("--seed", type=int, default=0)
