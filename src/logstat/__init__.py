"""logstat: launch reproducible LLM training jobs and turn their logs into trustworthy numbers.

Layers (each a top-level folder of the repository, imported under this namespace):
``logstat.parsers`` (raw logs -> typed frames), ``logstat.analytics`` (formulas, tables,
charts) and ``logstat.runners`` (experiment specs -> launched jobs). ``logstat.api`` ties
them together; ``logstat.cli`` is the thin click front-end.
"""

__version__ = "0.1.0"
