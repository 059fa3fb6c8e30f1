"""How TFLOPs and MFU read wherever logstat shows them: parse's table, the markdown tables, charts,
the estimate. One definition, so the same run never reads "0.0" in one place and "0.012" in another.

Data outputs (JSON, CSV, parquet) keep the unrounded numbers; MFU there stays a fraction.
"""

from __future__ import annotations

import math

#: from this magnitude on a number is written in scientific notation (a garbled log's 1e305).
HUGE = 1e15
#: significant digits of a number below 1 (a tiny test model's 0.0123 TFLOPs is not "0.0").
SMALL_DIGITS = 3


def number_text(value: float | None) -> str | None:
    """One decimal from 1 up (``52.8``), :data:`SMALL_DIGITS` significant digits below 1
    (``0.0123``, ``0.123``), ``0.0`` for zero; None (an empty cell) for unknown, nan or inf."""
    if value is None or not math.isfinite(value):
        return None
    magnitude = abs(value)
    if magnitude >= HUGE:
        return f"{value:.3g}"
    if magnitude == 0 or magnitude >= 1:
        return f"{value:.1f}"
    decimals = SMALL_DIGITS - 1 - math.floor(math.log10(magnitude))
    text = f"{value:.{decimals}f}"
    # 0.9996 rounds up to 1: then it is written as the numbers from 1 up are
    return f"{value:.1f}" if abs(float(text)) >= 1 else text


def tflops_text(tflops: float | None) -> str | None:
    """TFLOPs per GPU as shown to a reader: ``52.8``, ``0.0123`` (see :func:`number_text`)."""
    return number_text(tflops)


def mfu_text(mfu: float | None) -> str | None:
    """MFU (a fraction of the GPU's peak) as a percent: ``37.9%``, ``0.0123%`` for a tiny run."""
    percent = None if mfu is None else mfu * 100
    text = number_text(percent)
    return None if text is None else f"{text}%"
