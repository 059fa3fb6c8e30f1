"""A GPT-2 of a given shape, built from a ``transformers.GPT2Config`` with random weights.

Nothing is downloaded: the shape comes from the command line and the weights from the seed, so
the same flags give the same model on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, GPT2Config, PreTrainedModel


@dataclass(frozen=True, kw_only=True)
class GPT2Shape:
    """The shape of a GPT-2 model, in Megatron's terms."""

    hidden_size: int
    """Width of the residual stream (``n_embd``)."""
    num_layers: int
    """Number of transformer blocks (``n_layer``)."""
    num_attention_heads: int
    """Attention heads per block (``n_head``); must divide ``hidden_size``."""
    seq_length: int
    """Tokens per sample; also the number of position embeddings (``n_positions``)."""
    vocab_size: int
    """Token vocabulary; used unpadded (no tensor parallelism here, so nothing to pad for)."""


def gpt2_config(shape: GPT2Shape) -> GPT2Config:
    """The ``GPT2Config`` of ``shape``; dropout and the rest keep GPT-2's defaults."""
    return GPT2Config(
        n_embd=shape.hidden_size,
        n_layer=shape.num_layers,
        n_head=shape.num_attention_heads,
        n_positions=shape.seq_length,
        vocab_size=shape.vocab_size,
        # GPT-2's own ids (50256) would be out of range for a small vocabulary.
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )


def build_gpt2(shape: GPT2Shape, *, seed: int) -> PreTrainedModel:
    """A freshly initialised ``GPT2LMHeadModel`` of ``shape``, identical on every rank for one seed.

    ``from_config`` (not the class constructor) so that under a ZeRO-3 DeepSpeed config made
    active by ``TrainingArguments`` the parameters are created already partitioned.
    """
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(gpt2_config(shape))
    # transformers derives loss_type from the class name, and "GPT2LMHeadModel" matches no entry:
    # left None, the Trainer counts unshifted labels (seq per sample, not seq - 1) and under-reports
    # the loss by (seq - 1) / seq. The model's loss already is the causal-LM one; say so.
    model.loss_type = "ForCausalLM"
    return model


def parameter_count(model: torch.nn.Module) -> int:
    """Distinct parameters of ``model`` (tied embeddings counted once, as ``parameters()`` does)."""
    return sum(p.numel() for p in model.parameters())
