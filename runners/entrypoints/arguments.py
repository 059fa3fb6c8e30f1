"""Command-line pieces the entry points share: checked argument types and the model-shape flags.

A bad value is an ``argparse.ArgumentTypeError`` (argparse prints it after the flag's name and
exits 2), so every entry point refuses the same input with the same words.
"""

from __future__ import annotations

import argparse
import math

PRECISIONS = ("fp32", "fp16", "bf16")


def positive_int(text: str) -> int:
    """An integer >= 1 (a count of layers, samples, steps)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (a learning rate)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{value} must be a finite number > 0")
    return value


def add_gpt2_shape_arguments(parser: argparse.ArgumentParser, *, heads_dest: str) -> None:
    """The required GPT-2 shape flags, Megatron's names; ``--num-heads`` is stored as ``heads_dest``
    (the entry point's own field name for it)."""
    required = {"required": True, "type": positive_int}
    parser.add_argument("--hidden-size", dest="hidden_size", **required)
    parser.add_argument("--num-layers", dest="num_layers", **required)
    parser.add_argument("--num-heads", dest=heads_dest, metavar="NUM_HEADS", **required)
    parser.add_argument("--seq-length", dest="seq_length", **required)
    parser.add_argument("--vocab-size", dest="vocab_size", **required)


def check_heads_divide_hidden(parser: argparse.ArgumentParser, *, num_heads: int, hidden_size: int) -> None:
    """Refuse (exit 2, naming both flags) a head count that does not divide the width."""
    if hidden_size % num_heads:
        parser.error(f"--num-heads={num_heads} must divide --hidden-size={hidden_size}")
