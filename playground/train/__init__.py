"""Training the shipped default checkpoints with the seeds' recipe.

`python -m playground.train lm ...` trains weights/tiny-lm (LLaMA-style decoder on Python's bundled
documentation text); `python -m playground.train seq2seq ...` trains weights/tiny-seq2seq (the
original encoder-decoder Transformer on date normalisation). Modules, one idea each:

- recipe.py          loss (label smoothing), AdamW, warm-up + decay schedule, clipping, the loop
- progress.py        progress bar (tqdm when on a terminal) or a plain line printer for log files
- text_data.py       pydoc_data English text, split deterministically into train / held-out
- dates.py           seeded generator of human-written dates -> ISO YYYY-MM-DD
- tokenizer_build.py byte-level BPE (LM) and character-level (dates) fast tokenizers
- lm.py, seq2seq.py  the two tasks: model config, batches, metrics, entry points
"""
