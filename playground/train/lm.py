"""tiny-lm: a LLaMA-style decoder (RoPE, RMSNorm, SwiGLU, GQA, tied embeddings) on pydoc_data text.

Data: documents from `text_data.load_split()`, each preceded by <|endoftext|>, concatenated into one
token stream per split. Training batches are random windows of `context + 1` tokens (inputs are the
first `context`, targets the last `context`: teacher forcing on the true text). Evaluation cuts the
held-out stream into non-overlapping windows and reports perplexity = exp(mean NLL), next to a
unigram baseline (token frequencies of the training stream, add-one smoothed) scored on exactly
the same target tokens.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from playground.config import ModelConfig
from playground.models import build_model
from playground.models.layers import init_weights
from playground.train import text_data
from playground.train.recipe import Recipe, TrainResult, label_smoothed_loss, seed_everything, train
from playground.train.tokenizer_build import END_OF_TEXT, train_byte_bpe

CARD = {  # what the app says about the trained model
    "description": {
        "en": "A 2M-parameter LLaMA-style model trained on the Python documentation: it continues text in that style.",
        "zh": "一个 200 万参数的 LLaMA 风格模型,在 Python 官方文档上训练:按文档的风格续写文本。",
    },
    "example_prompt": "The Python interpreter",
}


@dataclass
class LMData:
    tokenizer: Any
    train_ids: torch.Tensor  # (N,) int64
    held_out_ids: torch.Tensor  # (M,) int64


def prepare_data(vocab_size: int, *, max_docs: int | None = None) -> LMData:
    split = text_data.load_split()
    train_docs, held_docs = split.train[:max_docs], split.held_out[:max_docs]
    tokenizer = train_byte_bpe(train_docs, vocab_size)
    return LMData(tokenizer, token_stream(tokenizer, train_docs), token_stream(tokenizer, held_docs))


def token_stream(tokenizer: Any, docs: list[str]) -> torch.Tensor:
    """<|endoftext|> doc <|endoftext|> doc ... as one id tensor."""
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    ids: list[int] = []
    for doc in docs:
        ids.append(eot)
        ids.extend(tokenizer.encode(doc))
    return torch.tensor(ids, dtype=torch.long)


def lm_config(
    vocab_size: int, *, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int, d_ff: int, context: int,
    eot_id: int = 0,
) -> ModelConfig:
    return ModelConfig(
        family="llama", kind="decoder", vocab_size=vocab_size, d_model=d_model, n_layers=n_layers,
        n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=d_ff, max_positions=context,
        norm="rmsnorm", norm_eps=1e-5, mlp="gated", activation="silu", positional="rope",
        rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=eot_id, eos_token_id=eot_id, pad_token_id=eot_id,
    )


def new_model(config: ModelConfig, seed: int) -> nn.Module:
    seed_everything(seed)
    model = build_model(config)
    init_weights(model, std=0.02)
    return model


def batch_fn(ids: torch.Tensor, batch_size: int, context: int, seed: int):
    """step -> ((inputs,), targets): random windows, reproducible per (seed, step)."""

    def batch(step: int) -> tuple[tuple[torch.Tensor], torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        starts = torch.randint(0, len(ids) - context - 1, (batch_size,), generator=g)
        windows = torch.stack([ids[s : s + context + 1] for s in starts.tolist()])  # (B, T+1)
        return (windows[:, :-1],), windows[:, 1:]

    return batch


def eval_windows(ids: torch.Tensor, context: int, max_tokens: int | None = None) -> torch.Tensor:
    """Non-overlapping windows (W, context + 1) of a held-out stream, at most `max_tokens` targets."""
    n = (len(ids) - 1) // context
    if max_tokens is not None:
        n = min(n, max(1, max_tokens // context))
    return torch.stack([ids[i * context : i * context + context + 1] for i in range(n)])


@torch.no_grad()
def held_out_nll(model: nn.Module, windows: torch.Tensor, batch_size: int = 16) -> float:
    """Mean next-token NLL (nats) over every target of `windows` (W, T+1)."""
    total, count = 0.0, 0
    for chunk in windows.split(batch_size):
        logits = model(chunk[:, :-1])
        _, nll, n = label_smoothed_loss(logits, chunk[:, 1:], 0.0)
        total, count = total + nll.item() * n, count + n
    return total / count


def unigram_nll(train_ids: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> float:
    """Mean NLL of `targets` under add-one smoothed token frequencies of `train_ids`."""
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    logp = torch.log(counts / counts.sum())
    return float(-logp[targets.flatten()].mean())


@torch.no_grad()
def sample(
    model: nn.Module, tokenizer: Any, prompt: str, *, max_new_tokens: int = 40, temperature: float = 0.8,
    top_k: int = 40, seed: int = 0,
) -> str:
    """A continuation of `prompt` (temperature 0: greedy); uses the model's KV cache."""
    g = torch.Generator().manual_seed(seed)
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    ids = [eot, *tokenizer.encode(prompt)]
    limit = model.config.max_positions
    cache = model.new_cache(1, limit)
    logits = model(torch.tensor([ids]), cache, last_only=True)[0, -1]
    out: list[int] = []
    for _ in range(min(max_new_tokens, limit - len(ids))):
        if temperature == 0:
            token = int(logits.argmax())
        else:
            scaled = logits / temperature
            if top_k:
                kth = scaled.topk(min(top_k, scaled.numel())).values[-1]
                scaled = scaled.masked_fill(scaled < kth, float("-inf"))
            token = int(torch.multinomial(torch.softmax(scaled, -1), 1, generator=g))
        if token == eot:
            break
        out.append(token)
        if cache.length >= limit:
            break
        logits = model(torch.tensor([[token]]), cache, last_only=True)[0, -1]
    return tokenizer.decode(out)


SAMPLE_PROMPTS = ("The import statement", "A class definition", "When an exception is raised")


def run(args: argparse.Namespace, progress=None) -> tuple[nn.Module, ModelConfig, LMData, TrainResult, dict[str, Any]]:
    """Train as `args` say; returns (model, config, data, result, metrics)."""
    data = prepare_data(args.vocab_size, max_docs=args.max_docs)
    vocab = len(data.tokenizer)
    config = lm_config(
        vocab, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, n_kv_heads=args.kv_heads,
        d_ff=args.d_ff, context=args.context, eot_id=data.tokenizer.convert_tokens_to_ids(END_OF_TEXT),
    )
    model = new_model(config, args.seed)
    recipe = Recipe(
        steps=args.steps, lr=args.lr, warmup=args.warmup, schedule=args.schedule, eval_every=args.eval_every,
        seed=args.seed, weight_decay=args.weight_decay,
    )
    windows = eval_windows(data.held_out_ids, args.context, args.eval_tokens)
    baseline = unigram_nll(data.train_ids, windows[:, 1:], vocab)

    def evaluate(m: nn.Module) -> dict[str, float]:
        nll = held_out_nll(m, windows)
        return {"held_out_nll": nll, "held_out_ppl": math.exp(nll)}

    result = train(
        model, recipe, batch_fn(data.train_ids, args.batch_size, args.context, args.seed),
        lambda m, inputs: m(*inputs), evaluate=evaluate, keep_best="held_out_nll", progress=progress,
    )
    best = result.best or evaluate(model)
    metrics = {
        "held_out_ppl": round(best["held_out_ppl"], 3),
        "held_out_nll": round(best["held_out_nll"], 4),
        "best_step": best.get("step"),
        "unigram_ppl": round(math.exp(baseline), 3),
        "held_out_tokens": int(windows[:, 1:].numel()),
        "train_tokens": int(len(data.train_ids)),
        "final_train_loss": round(result.history[-1]["loss"], 4),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    return model, config, data, result, metrics


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="weights/tiny-lm/model.safetensors", help="checkpoint file to write")
    p.add_argument("--steps", type=int, default=700)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--context", type=int, default=128, help="training window = the model's max_positions")
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--d-model", type=int, default=192)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--schedule", choices=("cosine", "inverse_sqrt"), default="cosine")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-tokens", type=int, default=None, help="cap on held-out tokens per evaluation")
    p.add_argument("--max-docs", type=int, default=None, help="use only the first N documents (tests)")
    p.add_argument("--seed", type=int, default=0)
