"""Synthetic training data: uniformly random tokens, reproducible from a seed.

Throughput and memory do not depend on what the tokens say, so no dataset is needed; the loss
of a freshly initialised model on uniform tokens starts near ``ln(vocab_size)``, which makes a
wrong loss easy to spot.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class RandomTokens(Dataset):
    """``num_samples`` samples of ``seq_length`` tokens drawn uniformly from ``[0, vocab_size)``.

    Every sample is a dict ``{"input_ids", "labels"}`` (labels = inputs: the model shifts them),
    the form both ``transformers.Trainer`` and our own loop feed to a causal LM. The whole set is
    drawn once from ``seed``, so sample ``i`` is the same on every rank and every run.
    """

    def __init__(self, *, num_samples: int, seq_length: int, vocab_size: int, seed: int) -> None:
        if num_samples < 1 or seq_length < 1 or vocab_size < 1:
            raise ValueError(
                f"num_samples={num_samples}, seq_length={seq_length}, vocab_size={vocab_size} must all be >= 1"
            )
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab_size, (num_samples, seq_length), generator=generator)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        sample = self.tokens[index]
        return {"input_ids": sample, "labels": sample}
