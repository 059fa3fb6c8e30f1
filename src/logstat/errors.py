"""The one exception type the CLI turns into a one-line message (no traceback unless --debug)."""


class LogstatError(Exception):
    """A user-facing error: bad input, bad spec, missing path. The message names what and why."""
