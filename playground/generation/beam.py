"""Beam search bookkeeping, step for step the algorithm of transformers' `generate()` (v4.50+).

At every step each of the `num_beams` live beams proposes its continuations; the best
`2 · num_beams` (more with several EOS tokens) over all beams are kept, those that hit EOS or the
length limit become finished hypotheses (score = summed log-probability / generated_length **
length_penalty), the best unfinished ones live on. `early_stopping` decides when to stop:
True — as soon as `num_beams` hypotheses are finished; False — when no live beam can beat the worst
finished one at the current length (a heuristic); "never" — only when that is impossible even at
the longest length a positive length_penalty could reach. The tensor operations mirror transformers
one for one (batch dimension included) so ties, scores and lengths come out identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LARGE_NEGATIVE = -1.0e9


def _gather(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor (B, K, ...) gathered along dim 1 by index (B, K')."""
    while index.dim() < tensor.dim():
        index = index.unsqueeze(-1)
    return torch.take_along_dim(tensor, index, dim=1)


@dataclass
class BeamStep:
    """What the engine needs after one step: how to reorder the cache and which tokens to feed next."""

    beam_index: torch.Tensor  # (num_beams,) source beam of each new live beam
    next_tokens: torch.Tensor  # (num_beams,) last token of each live beam
    done: bool
    kept_sources: torch.Tensor  # (2·num_beams or more,) source beam of every continuation kept this step
    kept_tokens: torch.Tensor  # (same,) its token: every live or finished hypothesis extends one of these


class BeamSearch:
    """State of one beam search over a single prompt (batch size 1, `num_beams` rows)."""

    def __init__(
        self,
        prefix: torch.Tensor,
        *,
        num_beams: int,
        max_length: int,
        eos_token_ids: list[int],
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
        pad_token_id: int | None = None,
    ) -> None:
        """prefix: (P,) the tokens the decoder stream starts with (prompt, or decoder start ids);
        max_length: P + max_new_tokens."""
        device = prefix.device
        self.num_beams, self.max_length = num_beams, max_length
        self.length_penalty, self.early_stopping = length_penalty, early_stopping
        self.prompt_len = self.cur_len = prefix.shape[0]
        self.eos = torch.tensor(eos_token_ids, dtype=torch.long, device=device) if eos_token_ids else None
        self.beams_to_keep = max(2, 1 + len(eos_token_ids)) * num_beams
        self.top_num_beam_mask = torch.cat(
            (torch.ones(num_beams, dtype=torch.bool), torch.zeros(self.beams_to_keep - num_beams, dtype=torch.bool))
        ).to(device)
        fill = pad_token_id or eos_token_ids[0] if eos_token_ids else -1
        self.running_sequences = torch.full((1, num_beams, max_length), fill, dtype=torch.long, device=device)
        self.running_sequences[:, :, : self.prompt_len] = prefix
        self.sequences = self.running_sequences.clone()
        self.running_beam_scores = torch.zeros((1, num_beams), dtype=torch.float, device=device)
        self.running_beam_scores[:, 1:] = LARGE_NEGATIVE
        self.beam_scores = torch.full((1, num_beams), LARGE_NEGATIVE, dtype=torch.float, device=device)
        self.is_sent_finished = torch.zeros((1, num_beams), dtype=torch.bool, device=device)
        self.improvable = torch.ones((1, 1), dtype=torch.bool, device=device)
        self.running_beam_indices = torch.full(
            (1, num_beams, max_length - self.prompt_len), -1, dtype=torch.int32, device=device
        )
        self.beam_indices = self.running_beam_indices.clone()

    def flat_running(self) -> torch.Tensor:
        """(num_beams, cur_len): the live sequences, what the processors see as input_ids."""
        return self.running_sequences[0, :, : self.cur_len]

    def step(self, log_probs: torch.Tensor) -> BeamStep:
        """log_probs: (num_beams, V) processed next-token log-probabilities of the live beams."""
        nb, cur_len = self.num_beams, self.cur_len
        vocab = log_probs.shape[-1]
        scores = (log_probs[None] + self.running_beam_scores[:, :, None]).reshape(1, -1)  # (1, nb·V)

        # c. the best beams_to_keep continuations over all beams
        topk_log_probs, topk_indices = torch.topk(scores, k=self.beams_to_keep)
        topk_beam = topk_indices // vocab
        topk_beam_indices = _gather(self.running_beam_indices, topk_beam)
        topk_sequences = _gather(self.running_sequences, topk_beam)
        topk_ids = topk_indices % vocab
        topk_sequences[:, :, cur_len] = topk_ids
        topk_beam_indices[:, :, cur_len - self.prompt_len] = topk_beam.to(torch.int32)

        # d. which of them end here (EOS or the length limit)
        hits = torch.zeros_like(topk_ids, dtype=torch.bool)
        if cur_len + 1 >= self.max_length:
            hits = torch.ones_like(hits)
        if self.eos is not None:
            hits = hits | torch.isin(topk_ids, self.eos)

        # e. the best unfinished continuations live on
        running_log_probs = topk_log_probs + hits.to(torch.float32) * LARGE_NEGATIVE
        next_topk = torch.topk(running_log_probs, k=nb)[1]
        self.running_sequences = _gather(topk_sequences, next_topk)
        self.running_beam_scores = _gather(running_log_probs, next_topk)
        self.running_beam_indices = _gather(topk_beam_indices, next_topk)

        # f. finished ones join the n-best list if they beat it
        just_finished = hits & self.top_num_beam_mask[None, :]
        finished_scores = topk_log_probs / ((cur_len + 1 - self.prompt_len) ** self.length_penalty)
        full = torch.all(self.is_sent_finished, dim=-1, keepdim=True) & (self.early_stopping is True)
        finished_scores = finished_scores + full.to(torch.float32) * LARGE_NEGATIVE
        finished_scores = finished_scores + (~self.improvable).to(torch.float32) * LARGE_NEGATIVE
        finished_scores = finished_scores + (~just_finished) * LARGE_NEGATIVE
        merged_sequences = torch.cat((self.sequences, topk_sequences), dim=1)
        merged_scores = torch.cat((self.beam_scores, finished_scores), dim=1)
        merged_indices = torch.cat((self.beam_indices, topk_beam_indices), dim=1)
        merged_finished = torch.cat((self.is_sent_finished, just_finished), dim=1)
        best = torch.topk(merged_scores, k=nb)[1]
        self.sequences = _gather(merged_sequences, best)
        self.beam_scores = _gather(merged_scores, best)
        self.beam_indices = _gather(merged_indices, best)
        self.is_sent_finished = _gather(merged_finished, best)

        # g. cache order for the next step, and whether to go on
        beam_index = self.running_beam_indices[0, :, cur_len - self.prompt_len].long()
        self.cur_len = cur_len = cur_len + 1
        if self.early_stopping == "never" and self.length_penalty > 0.0:
            best_length = self.max_length - self.prompt_len
        else:
            best_length = cur_len - self.prompt_len
        best_running = self.running_beam_scores[:, :1] / (best_length**self.length_penalty)
        worst_finished = torch.where(
            self.is_sent_finished, torch.min(self.beam_scores, dim=1, keepdim=True)[0], LARGE_NEGATIVE
        )
        self.improvable = self.improvable & torch.any(best_running > worst_finished, dim=-1, keepdim=True)
        open_beam = not (bool(torch.all(self.is_sent_finished)) and self.early_stopping is True)
        done = not (bool(torch.any(self.improvable)) and open_beam and not bool(torch.all(hits)))
        return BeamStep(beam_index, self.running_sequences[0, :, cur_len - 1], done, topk_beam[0], topk_ids[0])

    def live(self) -> list[tuple[list[int], float, list[int]]]:
        """Live beams: (generated ids, summed log-probability, beam path), best first.

        The beam path names, for each generated token, the running beam whose distribution chose it.
        """
        generated = self.cur_len - self.prompt_len
        seqs = self.running_sequences[0, :, self.prompt_len : self.cur_len].tolist()
        paths = self.running_beam_indices[0, :, :generated].tolist()
        return list(zip(seqs, self.running_beam_scores[0].tolist(), paths))

    def finished(self) -> list[tuple[list[int], float, list[int]]]:
        """Finished hypotheses so far: (generated ids, length-penalised score, beam path), best first."""
        lengths = (self.beam_indices[0] + 1).bool().sum(dim=1).tolist()
        scores = self.beam_scores[0].tolist()
        flags = self.is_sent_finished[0].tolist()
        out = []
        for row, (n, score, done) in enumerate(zip(lengths, scores, flags)):
            if done and score > LARGE_NEGATIVE / 2:
                ids = self.sequences[0, row, self.prompt_len : self.prompt_len + n].tolist()
                out.append((ids, score, self.beam_indices[0, row, :n].tolist()))
        return out
