"""CacheBlend, measured: a prompt of a few paragraphs whose paragraphs' K/V were cached alone, reused with r % of its
tokens recomputed (`playground.analysis.cache_blend`), against the full prefill.

    python -m playground.tools.blend_bench [--model weights/SmolLM2-135M-Instruct] [--steps 16] [--threads 2]
        [--r 0,15,30,50,100] [--repeats 3]

Prints one Markdown row per r: the KL(full ‖ blend) of the first answer token's distribution, the mean KL and the
top-1 agreement along the full prefill's next `--steps` greedy tokens (teacher-forced: each step is fed the full
run's token, so a step's disagreement does not carry to the next), the share of the prefill's token·layer work a
real engine would do, and the prefill time measured (naive reuse at r = 0, the blend's own pass between, the full
prefill at r = 100; best of `--repeats`). Also the prefix reuse of a second prompt that shares the first two
paragraphs.
"""

from __future__ import annotations

import argparse

import torch

import playground
from playground.analysis import cache_blend as cb
from playground.models import cache_blend as blending

PARAGRAPHS = (
    "The old lighthouse on the northern cape was built in 1871 from granite quarried on the island. Its lamp "
    "burned whale oil at first, then kerosene, and since 1954 an electric bulb turned by a small motor.",
    "Maria, the last keeper, lived there with her two cats until the light was automated in 1989. She kept a "
    "logbook of every ship that passed, and the storms that kept the supply boat away for weeks.",
    "Today the tower is a museum. Visitors climb 117 steps to the lamp room, where Maria's logbook lies open "
    "beside the brass lens that once threw its beam twenty-two nautical miles out to sea.",
)
QUESTION = "Question: Who was the last keeper of the lighthouse, and what did she keep? Answer:"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="weights/SmolLM2-135M-Instruct")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--r", default="0,15,30,50,100")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = playground.load_model(args.model, device="cpu", dtype="float32")
    text = "\n\n".join(PARAGRAPHS) + "\n\n" + QUESTION
    ids = lm.tokenizer.encode(text)
    starts = blending.chunk_starts(lm.token_texts(ids), "paragraphs")
    rs = [float(r) for r in args.r.split(",")]
    runs = []
    for _ in range(args.repeats):
        work = cb.blend_sweep(lm.model, ids, starts, rs, steps=args.steps)
        try:
            while True:
                next(work)
        except StopIteration as end:
            runs.append(end.value)
    best = runs[0]  # the quality is the same in every repeat; each time is the best of the repeats
    for key in ("full_seconds", "naive_seconds", "chunk_seconds"):
        best[key] = min(found[key] for found in runs)
    for i, row in enumerate(best["rows"]):
        row["seconds"] = min(found["rows"][i]["seconds"] for found in runs)
    print(f"{len(ids)} prompt tokens, chunks start at {best['starts']}, {best['layers']} layers; "
          f"full prefill {best['full_seconds'] * 1000:.0f} ms, naive reuse {best['naive_seconds'] * 1000:.0f} ms "
          f"(chunks prefilled alone beforehand: {best['chunk_seconds'] * 1000:.0f} ms)")
    print("naive reuse's relative K/V deviation per layer:",
          " ".join(f"{d:.3f}" for d in best["deviation"]))
    print(f"answer: {lm.tokenizer.decode(best['answer'])!r}")
    print("| r % | positions recomputed | KL first token | mean KL, 16 steps | top-1 agreement | work | prefill ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in best["rows"]:
        print(f"| {row['r']:g} | {len(row['picked'])} | {row['kl_first']:.4f} | {row['kl_mean']:.4f} | "
              f"{row['top1']:.0%} | {row['share']:.0%} | {row['seconds'] * 1000:.0f} |")
    second = lm.tokenizer.encode("\n\n".join(PARAGRAPHS[:2]) + "\n\nQuestion: When was the lighthouse built? Answer:")
    out = cb.prefix_reuse(lm.model, ids, second, steps=args.steps)
    print(f"prefix reuse: {out['shared']} of {out['tokens']} positions reused; prefill "
          f"{out['whole_seconds'] * 1000:.0f} ms whole, {out['reused_seconds'] * 1000:.0f} ms reusing; same tokens: "
          f"{out['same']} (largest logit difference {out['max_logit_diff']:.2e})")


if __name__ == "__main__":
    main()
