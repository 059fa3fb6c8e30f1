"""The GPT-2 size presets of the seed's scripts: the single table of them in the project.

Source: the ``MSIZE`` variable of the Slurm scripts behind the BigScience GPT-2 experiments document
(fixtures/seeds/001_gpt2_experiments_tables.md) and the project's design brief, which lists them. Every preset has 32 heads, sequence
length 1024 and the GPT-2 vocabulary of 50257 tokens; ``MSIZE`` is the size in billions (1e9).
"""

from __future__ import annotations

from dataclasses import dataclass

GPT2_NUM_HEADS = 32
GPT2_SEQ_LEN = 1024
GPT2_VOCAB_SIZE = 50257


@dataclass(frozen=True, kw_only=True)
class Gpt2Preset:
    """One row of the MSIZE table."""

    msize: int
    """The preset's name: nominal size in billions of parameters (1e9)."""
    hidden_size: int
    """Hidden dimension h."""
    num_layers: int
    """Transformer layers l."""
    num_heads: int = GPT2_NUM_HEADS
    """Attention heads a."""
    seq_len: int = GPT2_SEQ_LEN
    """Sequence length s (also the position-embedding count)."""
    vocab_size: int = GPT2_VOCAB_SIZE
    """Vocabulary v (unpadded)."""


#: MSIZE -> (hidden, layers), exactly as the design brief lists them.
_MSIZE_TABLE: dict[int, tuple[int, int]] = {
    7: (4096, 36),
    14: (6144, 32),
    18: (6144, 40),
    25: (7168, 40),
    30: (7168, 48),
    39: (8192, 48),
    52: (8192, 64),
    65: (9216, 64),
    81: (10240, 64),
    97: (11264, 64),
    116: (12288, 64),
    136: (13312, 64),
    158: (14336, 64),
    181: (15360, 64),
    206: (16384, 64),
}

GPT2_PRESETS: dict[int, Gpt2Preset] = {
    msize: Gpt2Preset(msize=msize, hidden_size=hidden, num_layers=layers)
    for msize, (hidden, layers) in _MSIZE_TABLE.items()
}


def gpt2_preset(msize: int) -> Gpt2Preset:
    """The preset of size ``msize`` (billions); ``KeyError`` naming the valid sizes when unknown."""
    try:
        return GPT2_PRESETS[msize]
    except KeyError:
        valid = ", ".join(str(m) for m in GPT2_PRESETS)
        raise KeyError(f"no GPT-2 preset of size {msize}B; presets: {valid}") from None
