"""Random texts joined from hand-picked pieces, for the property tests of hand-written shortcuts.

A shortcut (a compiled pattern, a substring test before a grammar) goes wrong at its edges: a keyword
cut short, a separator doubled, an odd space or digit next to a number. Texts glued from a few pieces
chosen for those edges reach them far more often than ``st.text`` does, whose random characters almost
never spell a keyword.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


def joined(pieces: Sequence[str], *, max_size: int | None, min_size: int = 0) -> st.SearchStrategy[str]:
    """Texts of ``min_size`` to ``max_size`` pieces (repeats allowed, ``None``: no bound) put end to end."""
    return st.lists(st.sampled_from(pieces), min_size=min_size, max_size=max_size).map("".join)
