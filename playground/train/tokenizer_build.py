"""Tokenizers for the two tasks, built with `tokenizers` and wrapped as transformers fast tokenizers.

Both serialise to a tokenizer.json document (our checkpoints embed it), so `LoadedModel.encode`
and `decode` work on the shipped weights without any extra file.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

END_OF_TEXT = "<|endoftext|>"
CHAR_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0, 1, 2, 3


def train_byte_bpe(texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2) -> PreTrainedTokenizerFast:
    """GPT-2-style byte-level BPE (every byte is a base token, so nothing is ever unknown).

    `<|endoftext|>` (id 0) separates documents and serves as bos/eos/pad. Training on the same texts
    gives the same merges: the trainer breaks frequency ties deterministically.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT, pad_token=END_OF_TEXT
    )


def char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """One token per character of `alphabet` after the specials <pad> <s> </s> <unk>.

    `encode` appends </s> (the encoder sees where the source ends, as in T5/Marian); `decode` joins
    characters without spaces. The decoder starts from <s>.
    """
    chars = sorted(set(alphabet))
    vocab = {token: i for i, token in enumerate([*CHAR_SPECIALS, *chars])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", vocab["</s>"])]
    )
    pad, bos, eos, unk = CHAR_SPECIALS
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad, bos_token=bos, eos_token=eos, unk_token=unk)
