"""Shared pyparsing pieces of the log families, module-level and named so each is testable alone.

- ``number``: integer / float / scientific literal, also ``nan`` and ``inf``.
- ``dotted_record``: ``  name ........ value`` lines of Megatron's arguments dump and DeepSpeed's
  config printer (old Megatron pads long names with spaces only: ``  long_name  value``).
- ``pipe_record``: ``key: value | key: value |`` records (Megatron iteration, timer and memory lines);
  ``pipe_layout`` reads the records of one layout (the same names in the same order) in one match.
- ``eq_record``: ``key=value, key=value`` records (DeepSpeed ``step=``/throughput lines).
- ``command_line_flags``: the ``--name value`` flags of an echoed launch command.

Parse actions only convert types; turning parse results into facts is the families' job.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

import pyparsing as pp
from pyparsing import pyparsing_common as ppc

nan_inf = pp.Regex(r"[-+]?(?:nan|inf(?:inity)?)\b", flags=re.IGNORECASE).set_name("nan_inf")
nan_inf.set_parse_action(lambda t: float(t[0]))
number = (ppc.sci_real | ppc.real | ppc.signed_integer | nan_inf).set_name("number")

# One token per field, so the hot path can scan a line with the token's compiled pattern
# (``pipe_field.re``): pyparsing's generic scanning costs milliseconds per Megatron line.
NUMBER_PATTERN = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
pipe_field = pp.Regex(
    r"(?P<name>[A-Za-z][^:|=\n]*?)\s*:\s*(?P<value>" + NUMBER_PATTERN + r")\s*(?=\||$)", flags=re.IGNORECASE
).set_name("pipe_field")
# ``pipe_field`` for the hot path, same matches: the name runs possessively up to the ``:`` (or the
# ``|``, ``=`` or newline that fails it) instead of trying ``\s*:`` after every character; its
# trailing whitespace, which the lazy name leaves out, is stripped by ``pipe_fields`` as before.
# tests/parsers/test_hot_path.py checks both patterns find the same fields on the real logs.
_PIPE_FIELD = re.compile(
    r"(?P<name>[A-Za-z][^:|=\n]*+)\s*:\s*(?P<value>" + NUMBER_PATTERN + r")\s*(?=\||$)", flags=re.IGNORECASE
)
# A field whose value is not a number (e.g. "learning rate: N/A") is skipped, not fatal.
pipe_other = pp.Suppress(pp.Regex(r"[^|]+")).set_name("pipe_other")
pipe_record = pp.ZeroOrMore(pp.Suppress("|") | pipe_field | pipe_other).set_name("pipe_record")

arg_name = pp.Word(pp.alphas + "_", pp.alphanums + "_").set_name("arg_name")
# Whitespace is part of the filler (two spaces separate a long name from its value): do not skip it.
arg_filler = pp.Regex(r"\s*\.{2,}\s*|\s{2,}").leave_whitespace().set_name("arg_filler")
dotted_record = (
    arg_name("name") + pp.Suppress(arg_filler) + pp.Regex(r".*")("value") + pp.StringEnd()
).set_name("dotted_record")
# ``dotted_record`` as one compiled pattern, for the hot path (every line of a dump): pyparsing's
# default whitespace (" \t\r\n") is skipped where the grammar skips it, the name is matched as
# greedily as ``Word`` does (possessive), and the filler's alternatives are tried in the same order.
# tests/parsers/test_fast_path.py checks it against ``dotted_record`` on every line of the real logs.
_DOTTED_LINE = re.compile(
    r"[ \t\r\n]*(?P<name>[A-Za-z_][A-Za-z0-9_]*+)(?:\s*\.{2,}\s*|\s{2,})[ \t\r\n]*(?P<value>.*)[ \t\r\n]*\Z"
)

eq_name = pp.Word(pp.alphas + "_", pp.alphanums + "_").set_name("eq_name")
eq_list = pp.Suppress("[") + pp.Optional(pp.DelimitedList(number)) + pp.Suppress("]")
eq_value = (number + pp.Optional(pp.Word(pp.alphas)("unit")).suppress()) | pp.Group(eq_list)
eq_field = pp.Group(eq_name + pp.Suppress("=") + eq_value).set_name("eq_field")
eq_record = pp.DelimitedList(eq_field, delim=pp.one_of(", /")).set_name("eq_record")


def pipe_fields(text: str) -> dict[str, float]:
    """``key: value |`` fields of ``text`` as a dict (names stripped, lower case). An integer of more
    than 4,300 digits raises ValueError (Python's limit on int conversion); the reader notes that line
    in ``parse_errors`` and goes on.

    Uses the compiled equivalent of ``pipe_field`` (same grammar as ``pipe_record``, at regex speed).
    """
    out: dict[str, float] = {}
    # findall's (name, value) tuples cost less than match objects and their group lookups; a value
    # matched NUMBER_PATTERN, so an optional sign and digits only is an integer, anything else (".", an
    # exponent, nan, inf) a float
    for name, value in _PIPE_FIELD.findall(text):
        out[name.strip().lower()] = int(value) if value.lstrip("+-").isdigit() else float(value)
    return out


# A record whose fields all hold plain numbers has a layout: its names in order. Megatron prints the
# same names on every iteration (and timer, memory) line of a run, so one compiled pattern of the
# names as literals reads a record of that layout in one match, about three times faster than
# ``_PIPE_FIELD``'s search field by field. Between the literals, the pattern allows only what leaves
# each ``|``-separated piece one field: whitespace, the name, ":", a value, whitespace (a piece
# cannot hold two fields, and a match of ``_PIPE_FIELD`` starts at the piece's first letter, the
# name's). The value is loose (ASCII digits, signs, ".", "e"): a text that int() or float() then
# refuses (``1.2.3``) is no number, as ``_PIPE_FIELD``'s would be, and the caller reads the record
# the general way. tests/parsers/test_hot_path.py checks layouts against ``pipe_fields``.
_LAYOUT_VALUE_CHARACTERS = "-+.0123456789eE"
_LAYOUT_VALUE = r"\s*+:\s*+([-+.0-9eE]++)\s*+"
# int() refuses an integer of more digits (Python's conversion limit): a longer record goes the
# general way, where pipe_fields raises as it always did, even for a field its caller does not read.
LAYOUT_MAX_LENGTH = 4300


@dataclass(frozen=True)
class PipeLayout:
    """The names of a ``key: value |`` record's fields, in order, and the pattern that reads them."""

    names: tuple[str, ...]  # as pipe_fields keys them (stripped, lower case), each once
    pattern: re.Pattern[str]

    def values(self, text: str) -> tuple[str, ...] | None:
        """The value texts of ``text``, by ``names``, if it has exactly these fields; else None. A value
        ``pipe_number`` refuses is no number (the record then needs ``pipe_fields``)."""
        if len(text) > LAYOUT_MAX_LENGTH:
            return None
        match = self.pattern.fullmatch(text)
        return None if match is None else match.groups()


def pipe_layout(text: str) -> PipeLayout | None:
    """The layout of ``text``, a record of plain-number fields with distinct names; None for another."""
    fields = _PIPE_FIELD.findall(text)
    names = tuple(name.strip() for name, _ in fields)
    keys = tuple(name.lower() for name in names)
    if not names or len(set(keys)) < len(keys):
        return None  # a repeated name keeps its last value: the general way reads that
    if any(value.strip(_LAYOUT_VALUE_CHARACTERS) for _, value in fields):
        return None  # nan or inf: not a plain number (known before compiling a pattern)
    # the names as matched: a pattern that ignored case would also match a name that lower-cases to
    # another key ("ſ" matches "s" but stays "ſ")
    pattern = (
        r"\s*+" + "".join(r"\|\s*+" + re.escape(name) + _LAYOUT_VALUE for name in names) + r"(?:\|\s*+)?+"
    )
    layout = PipeLayout(keys, re.compile(pattern))
    return layout if layout.values(text) is not None else None


def pipe_number(text: str) -> int | float:
    """A field's value as ``pipe_fields`` reads it (ValueError for a text that is no number)."""
    return int(text) if text.lstrip("+-").isdigit() else float(text)


def dotted(text: str) -> tuple[str, str] | None:
    """``(name, value)`` of a ``name ..... value`` record, or None; the value is the raw text.

    Matches ``dotted_record`` with its compiled equivalent (pyparsing costs ~100 us a line, and a
    dump is hundreds of lines); like ``parse_string``, tabs are expanded first.
    """
    match = _DOTTED_LINE.match(text.expandtabs() if "\t" in text else text)
    if match is None:
        return None
    name, value = match.group("name", "value")
    return name, value.strip()


def eq_fields(text: str) -> dict[str, Any]:
    """``key=value`` fields of ``text`` (lists stay lists, units such as ``GB`` dropped); never raises."""
    out: dict[str, Any] = {}
    for tokens, _, _ in eq_field.scan_string(text):
        name, value = tokens[0][0], tokens[0][1]
        out[name] = value.as_list() if isinstance(value, pp.ParseResults) else value
    return out


def literal(text: str) -> Any:
    """A dumped value as Python: None/True/False, int, float, else the stripped string."""
    value = text.strip()
    lowered = value.lower()
    if lowered in ("none", "null", ""):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    # The conversions below fail by exception (~1 us each): a word such as ``cosine`` skips both, a
    # number with a "." skips int(). int() and float() read only decimal digits and signs, "_", ".",
    # "e", and the words nan, inf and infinity, so neither reads a word of letters but those three.
    if value.isalpha() and lowered not in _FLOAT_WORDS:
        return value
    if "." not in value:
        try:
            return int(value)
        except ValueError:
            pass
    try:
        return float(value)
    except ValueError:
        return value


_FLOAT_WORDS = frozenset({"nan", "inf", "infinity"})


def positive_int(text: str) -> int | None:
    """A dumped value that is a whole number > 0 (a count, a size), else None (booleans are not counts)."""
    value = literal(text)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def command_line_flags(text: str) -> dict[str, str]:
    """``--name value`` / ``--name=value`` / bare ``--switch`` (value "") of a command line, by name
    without the dashes; shell quoting is undone (plain splitting where the quotes do not close)."""
    flags: dict[str, str] = {}
    words = _shell_words(text)
    for index, word in enumerate(words):
        if word.startswith("--"):
            name, _, inline = word[2:].partition("=")
            following = words[index + 1] if index + 1 < len(words) else ""
            flags[name] = inline or ("" if following.startswith("--") else following)
    return flags


# shlex.split reads a character at a time (~55 us an echoed command line). It splits words at " \t\r\n"
# only, and quotes and backslashes change them: a line with neither and no other whitespace splits the
# same with str.split (tests/parsers/test_grammar.py compares both on real and random lines).
_SHELL_SPECIAL = re.compile(r"""['"\\]|[^\S \t\r\n]""")


def _shell_words(text: str) -> list[str]:
    """The words of a command line as a POSIX shell reads them (plain splitting where quotes do not close)."""
    if _SHELL_SPECIAL.search(text) is None:
        return text.split()
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()
