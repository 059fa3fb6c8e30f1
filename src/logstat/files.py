"""Creating a user's new file: the one mechanism behind ``parse --output`` and ``plot``'s charts."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``path`` atomically: a temporary file beside it, then a hard
    link, which (like "x" mode) raises FileExistsError for a file that appeared since any check and
    leaves no partial file under the user's name if the write is cut short (disk full, Ctrl-C)."""
    # not mkstemp: its 0600 mode would make the file unreadable to the rest of the user's group;
    # 0666 minus the umask, like any new file
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.link(tmp, path)
    finally:
        os.unlink(tmp)
