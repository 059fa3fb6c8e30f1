"""Shared pyparsing pieces of the log families, module-level and named so each is testable alone:
``number`` (also ``nan``, ``inf``), ``literal`` and ``positive_int`` (a dumped value as Python reads it),
``command_line_flags``. Parse actions only convert types; making facts of them is the families' job.
"""

from __future__ import annotations

import itertools
import re
import shlex
from typing import Any

import pyparsing as pp
from pyparsing import pyparsing_common as ppc

nan_inf = pp.Regex(r"[-+]?(?:nan|inf(?:inity)?)\b", flags=re.IGNORECASE).set_name("nan_inf")
nan_inf.set_parse_action(lambda t: float(t[0]))
number = (ppc.sci_real | ppc.real | ppc.signed_integer | nan_inf).set_name("number")
NUMBER_FIRST_MATCH = (
    rf"(?>(?P<sci_real>{ppc.sci_real.re.pattern})|(?P<real>{ppc.real.re.pattern})"
    rf"|(?P<signed_integer>{ppc.signed_integer.re.pattern})|(?P<nan_inf>(?i:{nan_inf.re.pattern})))"
)
"""``number`` as a regex; the named group that matched says how the grammar converts it."""


def number_of(match: re.Match[str]) -> int | float:
    """The value ``number`` gives a ``NUMBER_FIRST_MATCH``: an integer for ``signed_integer``."""
    if match["signed_integer"] is not None:
        return int(match["signed_integer"])
    return float(match["sci_real"] or match["real"] or match["nan_inf"])


def literal(text: str) -> Any:
    """A dumped value as Python: None/True/False, int, float, else the stripped string."""
    value = text.strip()
    lowered = value.lower()
    if lowered in ("none", "null", ""):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    # A failed conversion costs an exception (~1 us): a word (``cosine``) skips both, a "." skips int().
    # Of words of letters, int() and float() read only nan, inf and infinity.
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
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def command_line_flags(text: str) -> dict[str, str]:
    """``--name value`` / ``--name=value`` / bare ``--switch`` (value "") of a command line (or of a printed
    argv, ``_ARGV_LIST``), by name without the dashes; shell quoting is undone (plain splitting where the
    quotes do not close), a comment dropped. A quoted command (``srun bash -c 'torchrun --nnodes 16 ...'``)
    gives its own flags too, over the outer ones."""
    flags: dict[str, str] = {}
    words = _shell_words(_ARGV_LIST.sub(_argv_command, text) if "', '-" in text else text)
    # a comment is no part of the command (``sbatch -N4 run.sh  # each task runs torchrun --nproc_per_node 8``)
    words = list(itertools.takewhile(lambda word: not word.startswith("#"), words))
    for index, word in enumerate(words):
        if word.startswith("--"):
            name, _, inline = word[2:].partition("=")
            following = words[index + 1] if index + 1 < len(words) else ""
            flags[name] = inline or ("" if following.startswith("--") else following)
    for word in words:
        if " --" in word and word != text:
            flags.update(command_line_flags(word))
    return flags


#: a command as Python prints its argv (subprocess's ``CalledProcessError: Command '['torchrun', '--nnodes',
#: '1', '--nproc_per_node', '4', 'launcher.py']' returned non-zero exit status 1.``): read as its command line
_ARGV_LIST = re.compile(r"\[((?:'[^']*', )+'[^']*')\]")


def _argv_command(argv: re.Match[str]) -> str:
    return " ".join(shlex.quote(word) for word in re.findall(r"'([^']*)'", argv[1]))


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
